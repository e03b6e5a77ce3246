"""The batched head ablation (issue 39 point 3) equals the per-head loop it replaces: every (mode, layer,
head) cell's prompts stacked into a few forwards, each row with its own head zeroed or mean-replaced,
give the loop's predictions and its table, on posym's GPT-J and other families (GQA, one KV head,
GPT-NeoX), in both modes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.heads.ablate import ablate_heads, ablated, ablated_predictions, head_output_means
from posym.model import build_model, model_config
from posym.tasks import get_vocab, make_split
from posym.train import predict
from family_models import build_family

VOCAB = get_vocab("number").size


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _model(name: str) -> torch.nn.Module:
    if name == "gptj":
        cfg = model_config("quick", VOCAB, n_layer=2, n_head=2, n_embd=32, n_inner=64, rotary_dim=16)
        return build_model(cfg, seed=0).eval()
    return build_family(name, vocab_size=VOCAB).eval()


def _batch(model, n: int = 12):
    """Labels = the model's own predictions on every other row, so that ablations move the accuracy."""
    b = make_split("number", "test", n=n)
    pred, _ = predict(model, b.input_ids)
    labels = b.labels.copy()
    labels[::2] = pred[::2]
    return dataclasses.replace(b, labels=labels)


@pytest.mark.parametrize("family", ["gptj", "llama", "gemma3_text", "gpt_neox"])
def test_batched_table_equals_the_loop(family):
    model = _model(family)
    batch = _batch(model)
    loop = ablate_heads(model, batch, method="loop", batch_size=12)
    for rows in (5, 10_000):  # a cell split over forwards / several cells per forward, everything in one
        fast = ablate_heads(model, batch, method="batched", rows=rows)
        pd.testing.assert_frame_equal(fast, loop, check_exact=True)
    assert (loop["acc"] != loop["acc"].iloc[0]).any()  # the ablations do move something


@pytest.mark.parametrize("family", ["gptj", "llama"])
def test_batched_predictions_equal_each_ablated_forward(family):
    """Cell by cell, the stacked forward's argmax is the :func:`ablated` context's, and a mean cell
    writes the reference's means (a mean batch other than the evaluation prompts)."""
    model = _model(family)
    ids = make_split("number", "test", n=10).input_ids
    means = head_output_means(model, make_split("number", "test", seed=3, n=16).input_ids)
    cells = [("mean", 1, 0), ("none", -1, -1), ("zero", 0, 1), ("mean", 0, 1), ("zero", 1, 0)]
    got = ablated_predictions(model, ids, cells, means, rows=13)
    for (mode, layer, head), pred in zip(cells, got):
        if mode == "none":
            ref = predict(model, ids)[0]
        else:
            with ablated(model, [(layer, head)], mode, means):
                ref = predict(model, ids)[0]
        np.testing.assert_array_equal(pred, ref)


def test_batched_refuses_bad_cells_and_methods():
    model = _model("gptj")
    ids = make_split("number", "test", n=4).input_ids
    with pytest.raises(PosymError, match="no head"):
        ablated_predictions(model, ids, [("zero", 2, 0)])
    with pytest.raises(PosymError, match="per-layer means"):
        ablated_predictions(model, ids, [("mean", 0, 0)])
    with pytest.raises(PosymError, match="unknown ablation method"):
        ablate_heads(model, _batch(model, 4), method="fast")
