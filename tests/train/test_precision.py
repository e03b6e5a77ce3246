"""bf16 autocast and torch.compile options of the training loop, on the CPU."""

import functools
import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from posym.errors import PosymError
from train_helpers import Interrupt, interrupt_at
from posym.heads.tracking import score_table
from posym.verbs.scores import score_checkpoints
from posym.model.gptj import load_model
from posym.tasks import make_split
from posym.train import make_config
from posym.verbs.train import train

TINY = dict(steps=12, eval_every=4, n_val=64, n_test=64, eval_batch_size=64, track_prompts=16, warmup=2,
            model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))


def _metrics(run) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv").drop(columns="time_s")


def test_bf16_trains_close_to_fp32_and_keeps_fp32_weights(tmp_path):
    torch.set_num_threads(1)
    train(make_config("number", "quick", **TINY), tmp_path / "fp32", progress=False)
    train(make_config("number", "quick", precision="bf16", **TINY), tmp_path / "bf16", progress=False)
    a, b = _metrics(tmp_path / "fp32"), _metrics(tmp_path / "bf16")
    val_a, val_b = a[a.split == "val"].dropna(subset=["train_loss"]), b[b.split == "val"].dropna(subset=["train_loss"])
    np.testing.assert_allclose(val_b.train_loss, val_a.train_loss, rtol=2e-2)
    np.testing.assert_allclose(b.loss, a.loss, rtol=2e-2)
    assert not np.array_equal(val_a.train_loss, val_b.train_loss)  # autocast really was on
    meta = json.loads((tmp_path / "bf16/posym.json").read_text())
    assert meta["config"]["precision"] == "bf16" and meta["config"]["compile"] is False
    w = load_file(str(tmp_path / "bf16/checkpoints/step-000012/model.safetensors"))
    assert all(t.dtype == torch.float32 for t in w.values())
    with pytest.raises(PosymError, match="precision"):
        make_config("number", "quick", precision="fp8")


def test_bf16_resume_is_exact(tmp_path):
    cfg = make_config("letter", "quick", precision="bf16", **TINY)
    train(cfg, tmp_path / "full", progress=False)
    with pytest.raises(Interrupt):  # dies at the step-8 evaluation: newest trainer state is step 4
        train(cfg, tmp_path / "cut", progress=False, callbacks=[interrupt_at(8)])
    train(make_config("letter", "quick"), tmp_path / "cut", resume=True, progress=False)  # stored config wins
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "cut"), rtol=0, atol=1e-7)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "full/scores.csv"), pd.read_csv(tmp_path / "cut/scores.csv"),
                                  rtol=0, atol=1e-9)


def test_tracking_under_bf16_scores_in_fp32(tmp_path):
    """Scores written during bf16 training equal scoring the saved checkpoints afterwards in fp32."""
    cfg = make_config("number", "quick", precision="bf16", **{**TINY, "warmup": 1})
    train(cfg, tmp_path / "run", progress=False)
    tracked = pd.read_csv(tmp_path / "run/scores.csv")
    assert sorted(tracked.step.unique()) == [0, 4, 8, 12]
    offline = score_checkpoints(tmp_path / "run", n_prompts=TINY["track_prompts"], steps=[0, 4, 8, 12],
                                progress=False)
    cols = ["s_pos", "s_sym", "entropy"]
    np.testing.assert_allclose(tracked[cols].to_numpy(), offline[cols].to_numpy(), rtol=0, atol=1e-12)
    # ... whereas scoring under bf16 autocast would have given different numbers
    model = load_model(tmp_path / "run/checkpoints/step-000012")
    ids = make_split("number", "val", seed=0, n=TINY["track_prompts"]).input_ids
    with torch.autocast("cpu", dtype=torch.bfloat16):
        in_bf16 = score_table(model, ids)
    last = offline[offline.step == 12].reset_index(drop=True)
    assert np.abs(in_bf16[cols].to_numpy() - last[cols].to_numpy()).max() > 1e-8


def _check_compiled_equals_eager(tmp_path, monkeypatch=None, backend=None):
    if backend is not None:
        monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=backend))
    small = {**TINY, "steps": 4, "eval_every": 2, "track_heads": False}
    torch._dynamo.reset()
    train(make_config("number", "quick", **small), tmp_path / "eager", progress=False)
    train(make_config("number", "quick", compile=True, **small), tmp_path / "compiled", progress=False)
    a, b = _metrics(tmp_path / "eager"), _metrics(tmp_path / "compiled")
    pd.testing.assert_frame_equal(a, b, rtol=1e-5, atol=1e-6)
    assert json.loads((tmp_path / "compiled/posym.json").read_text())["config"]["compile"] is True
    # checkpoints hold the plain module's weights (no "_orig_mod." / wrapper prefixes) and match
    wa = load_file(str(tmp_path / "eager/checkpoints/step-000004/model.safetensors"))
    wb = load_file(str(tmp_path / "compiled/checkpoints/step-000004/model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-5)
    load_model(tmp_path / "compiled/checkpoints/step-000004")  # loads in plain transformers


def test_compile_gives_the_same_losses_aot_eager(tmp_path, monkeypatch):
    """Fast variant: Dynamo + AOTAutograd tracing of the training step (no Inductor code generation)."""
    _check_compiled_equals_eager(tmp_path, monkeypatch, backend="aot_eager")


@pytest.mark.slow
def test_compile_gives_the_same_losses_inductor(tmp_path):
    """The real default backend (Inductor); about 1.5 min of C++ compilation on a 2-core CPU."""
    _check_compiled_equals_eager(tmp_path)
