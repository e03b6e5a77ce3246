"""Head ablations (Paper A Fig. 3 right): zero / mean replacement of one head's output."""

from __future__ import annotations

import copy
import dataclasses

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from posym.errors import PosymError  # noqa: E402
from posym.heads.ablate import (  # noqa: E402
    ABLATION_COLUMNS,
    ablate_heads,
    ablated,
    ablated_logits,
    ablation_for_run,
    head_output_means,
)
from posym.model import build_model, model_config  # noqa: E402
from posym.model.adapters import get_adapter  # noqa: E402
from posym.report.flow_figures import plot_ablation, save_figure  # noqa: E402
from posym.tasks import get_vocab, make_split  # noqa: E402
from posym.train import evaluate, predict  # noqa: E402
from posym.train.checkpoints import save_checkpoint  # noqa: E402
from family_models import build_family  # noqa: E402

N_LAYER, N_HEAD = 2, 2


@pytest.fixture(scope="module")
def model():
    torch.set_num_threads(1)
    cfg = model_config("quick", get_vocab("number").size, n_layer=N_LAYER, n_head=N_HEAD, n_embd=32, n_inner=64,
                       rotary_dim=16)
    return build_model(cfg, seed=0).eval()


@pytest.fixture(scope="module")
def batch(model):
    """Test prompts whose labels are the model's own predictions on every other row (accuracy ~0.5+),
    so ablations visibly move the accuracy of a random model."""
    b = make_split("number", "test", n=96)
    pred, _ = predict(model, b.input_ids)
    labels = b.labels.copy()
    labels[::2] = pred[::2]
    return dataclasses.replace(b, labels=labels)


def _zeroed_copy(model, layer, head):
    m = copy.deepcopy(model)
    hd = m.config.n_embd // m.config.n_head
    with torch.no_grad():
        m.transformer.h[layer].attn.out_proj.weight[:, head * hd:(head + 1) * hd] = 0
    return m


def test_table_shape_and_baseline(model, batch):
    table = ablate_heads(model, batch, batch_size=40)
    assert list(table.columns) == ABLATION_COLUMNS
    assert len(table) == 1 + 2 * N_LAYER * N_HEAD
    base = table.iloc[0]
    assert (base["mode"], base["layer"], base["head"]) == ("none", -1, -1)
    ref = evaluate(model, batch)
    for c in ABLATION_COLUMNS[3:]:
        assert base[c] == ref[c]
    assert base["acc"] >= 0.5
    assert set(table["mode"]) == {"none", "zero", "mean"}
    abl = table[table["mode"] == "zero"]
    assert sorted(zip(abl["layer"], abl["head"])) == [(l, h) for l in range(N_LAYER) for h in range(N_HEAD)]


def test_zero_ablation_equals_zeroed_out_proj_columns(model, batch):
    base_logits = predict(model, batch.input_ids)[1]
    table = ablate_heads(model, batch, modes="zero")
    for layer in range(N_LAYER):
        for head in range(N_HEAD):
            got = ablated_logits(model, batch.input_ids, [(layer, head)], "zero")
            zeroed = _zeroed_copy(model, layer, head)
            want = predict(zeroed, batch.input_ids)[1]
            np.testing.assert_allclose(got, want, atol=1e-6, rtol=0)
            assert not np.allclose(got, base_logits, atol=1e-4)  # the head matters
            row = table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]
            ref = evaluate(zeroed, batch)
            for c in ABLATION_COLUMNS[3:]:
                assert row[c] == ref[c], (layer, head, c)


def test_mean_ablation_on_its_own_prompt_is_identity(model, batch):
    one = batch.subset(5)
    means = head_output_means(model, one.input_ids)
    assert len(means) == N_LAYER and means[0].shape == (17, 32)
    base = predict(model, one.input_ids)[1]
    for layer in range(N_LAYER):
        for head in range(N_HEAD):
            got = ablated_logits(model, one.input_ids, [(layer, head)], "mean", means=means)
            np.testing.assert_allclose(got, base, atol=1e-5, rtol=0)
            assert got.argmax(-1)[0] == base.argmax(-1)[0]
    table = ablate_heads(model, one, modes="mean", mean_batch=one)
    assert (table["acc"] == table["acc"].iloc[0]).all()
    # with the default reference (the whole batch) mean-ablation does change the logits
    means_all = head_output_means(model, batch)
    got = ablated_logits(model, batch.input_ids, [(0, 0)], "mean", means=means_all)
    assert not np.allclose(got, predict(model, batch.input_ids)[1], atol=1e-4)


def test_hooks_are_removed(model, batch):
    def n_hooks():
        return sum(len(b.attn.out_proj._forward_pre_hooks) for b in model.transformer.h)

    before = predict(model, batch.input_ids)[1]
    ablate_heads(model, batch)
    assert n_hooks() == 0
    with pytest.raises(RuntimeError):
        with ablated(model, [(0, 0), (1, 1)], "zero"):
            assert n_hooks() == 2
            raise RuntimeError("boom")
    assert n_hooks() == 0
    after = predict(model, batch.input_ids)[1]
    np.testing.assert_array_equal(before, after)
    with torch.no_grad():
        full = model(input_ids=torch.as_tensor(batch.input_ids)).logits[:, -1].numpy()
    np.testing.assert_allclose(full, before, atol=1e-5, rtol=0)


def test_ablation_errors(model, batch):
    with pytest.raises(PosymError):
        ablate_heads(model, batch, modes=("zero", "resample"))
    with pytest.raises(PosymError):
        ablate_heads(model, batch, modes="mean", mean_batch=batch.input_ids[:, 1:])
    with pytest.raises(PosymError):
        with ablated(model, [(N_LAYER, 0)], "zero"):
            pass
    with pytest.raises(PosymError):
        with ablated(model, [(0, 0)], "mean"):  # no means
            pass


def test_ablation_for_run_and_plot(model, tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run, 5, model, {"task": "number", "preset": "quick"})
    table = ablation_for_run(run, n=40, modes=("zero",))
    assert len(table) == 1 + N_LAYER * N_HEAD
    assert table.attrs["task"] == "number" and table.attrs["step"] == 5
    b = make_split("number", "test", n=40)
    assert table.iloc[0]["acc"] == evaluate(model, b)["acc"]

    full = ablate_heads(model, b, batch_size=64)
    fig = plot_ablation(full)
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len([a for a in fig.axes if a.get_title().endswith("ablation")]) == 2
    paths = save_figure(fig, tmp_path / "abl")
    assert sorted(p.suffix for p in paths) == [".pdf", ".png"]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    fig2, ax = plt.subplots()
    assert plot_ablation(full, ax=ax, modes=["zero"]) is fig2
    with pytest.raises(PosymError):
        plot_ablation(full, ax=ax)  # two modes, one Axes
    plt.close("all")


# ---- every family: ablation through the adapter equals a literal forward ------------------------------

KNOWN_FAMILIES = ["gptj", "llama", "qwen3", "gemma3_text", "gpt_neox"]  # llama, gemma3_text: GQA
T_KNOWN = 9


def _family_model(name: str):
    """A tiny random model of ``name`` whose heads visibly matter (output projections re-drawn)."""
    if name == "gptj":
        m = build_model(model_config("quick", 128, n_layer=2, n_head=4, n_embd=64, n_inner=128, rotary_dim=8), seed=0)
    else:
        m = build_family(name)
    ad = get_adapter(m)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for layer in range(ad.n_layers):
            w = ad.head_output_site(layer).weight
            w.copy_(torch.randn(w.shape, generator=g) * 0.3)
    return m.eval()


def _literal(model, layer: int, head: int, mean: torch.Tensor | None = None):
    """A copy of ``model`` with query head ``head`` of ``layer`` removed literally: its columns of the
    output projection zeroed, plus (``mean`` [T, H*hd]) the head's mean output sent through those
    columns by a forward hook on the projection's output."""
    m = copy.deepcopy(model)
    ad = get_adapter(m)
    hd = ad.head_dim
    sl = slice(head * hd, (head + 1) * hd)
    proj = ad.head_output_site(layer)
    with torch.no_grad():
        cols = proj.weight[:, sl].clone()
        proj.weight[:, sl] = 0
    if mean is not None:
        def add(module, args, out):
            return out + mean[-out.shape[-2]:, sl].to(out.dtype) @ cols.T
        proj.register_forward_hook(add)
    return m


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", KNOWN_FAMILIES)
def test_ablation_equals_literal_forward_every_family(name, dtype):
    """Every (layer, query head), zero and mean: the hooked forward equals the literal one. Float64: to
    1e-12 (measured: 0 to 7e-16); float32: to 2e-6 on logits of scale < 1 (measured: zero 0, mean
    2e-7 to 1.6e-6, the rounding of two summation orders)."""
    model = _family_model(name).to(dtype)
    ad = get_adapter(model)
    ids = torch.randint(3, 128, (6, T_KNOWN), generator=torch.Generator().manual_seed(1))
    means = head_output_means(model, ids, batch_size=4)
    assert len(means) == ad.n_layers and means[0].shape == (T_KNOWN, ad.n_heads * ad.head_dim)
    assert means[0].dtype == dtype
    tol = 2e-6 if dtype == torch.float32 else 1e-12
    with torch.no_grad():
        base = model(input_ids=ids).logits
    for layer in range(ad.n_layers):
        for head in range(ad.n_heads):  # under GQA query heads sharing a kv head are ablated apart
            for mode in ("zero", "mean"):
                lit = _literal(model, layer, head, means[layer] if mode == "mean" else None)
                with torch.no_grad(), ablated(model, [(layer, head)], mode, means):
                    got = model(input_ids=ids).logits
                want = lit(input_ids=ids).logits.detach()
                err = (got - want).abs().max().item()
                assert err <= tol * max(1.0, want.abs().max().item()), (name, layer, head, mode, err)
                assert (got - base).abs().max().item() > 1e-3  # the head matters
                if dtype == torch.float32 and head in (0, ad.n_heads - 1):
                    # the evaluation forward (last position; GPT-J's fast path) agrees too
                    last = ablated_logits(model, ids.numpy(), [(layer, head)], mode, means)
                    np.testing.assert_allclose(last, want[:, -1].numpy(), atol=1e-5, rtol=0)


def _old_gptj_ablated_logits(model, ids, layer, head, mode, means):
    """The GPT-J-only formula posym used before the adapter: a pre-hook on ``transformer.h[l].attn.out_proj``."""
    hd = model.config.n_embd // model.config.n_head
    sl = slice(head * hd, (head + 1) * hd)

    def hook(module, args):
        x = args[0].clone()
        x[..., sl] = 0 if mode == "zero" else means[layer][-x.shape[-2]:, sl].to(x.dtype)
        return (x, *args[1:])

    handle = model.transformer.h[layer].attn.out_proj.register_forward_pre_hook(hook)
    try:
        return predict(model, ids)[1]
    finally:
        handle.remove()


def test_gptj_adapter_path_is_bit_identical_to_the_old_formula(model, batch):
    ids = batch.input_ids
    hd = model.config.n_embd // model.config.n_head
    # the old head_output_means: the HF forward's out_proj inputs, summed in float64
    sums = [torch.zeros(ids.shape[1], model.config.n_embd, dtype=torch.float64) for _ in range(N_LAYER)]
    def summing(i):
        def hook(module, args):
            sums[i].add_(args[0].double().sum(0))
        return hook

    handles = [b.attn.out_proj.register_forward_pre_hook(summing(i)) for i, b in enumerate(model.transformer.h)]
    with torch.no_grad():
        model(input_ids=torch.as_tensor(ids))
    for h in handles:
        h.remove()
    old_means = [(s / len(ids)).float() for s in sums]
    means = head_output_means(model, ids)
    for a, b in zip(means, old_means):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert means[0].shape[1] == N_HEAD * hd
    for layer in range(N_LAYER):
        for head in range(N_HEAD):
            for mode in ("zero", "mean"):
                new = ablated_logits(model, ids, [(layer, head)], mode, means)
                old = _old_gptj_ablated_logits(model, ids, layer, head, mode, old_means)
                np.testing.assert_array_equal(new, old)


def test_ablate_heads_on_llama_with_gqa():
    model = build_family("llama", vocab_size=get_vocab("number").size)
    b = make_split("number", "test", n=24)
    table = ablate_heads(model, b, batch_size=16)
    ad = get_adapter(model)
    assert ad.n_kv_heads < ad.n_heads
    assert len(table) == 1 + 2 * ad.n_layers * ad.n_heads
    assert table.iloc[0]["acc"] == evaluate(model, b)["acc"]
    with pytest.raises(PosymError, match="means must be"):
        with ablated(model, [(0, 0)], "mean", means=[torch.zeros(17, 8)] * ad.n_layers):
            pass
