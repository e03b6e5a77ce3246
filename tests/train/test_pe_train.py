"""``posym train --pe`` (SPEC §2.1): the variant is stored in ``posym.json`` and the model's config,
honoured on ``--resume`` (exactly), by every analysis that resolves the run, and by reproduce's
``--set train.pe=...``; ``rope`` and ``rope-base:10000`` train the very same model as before."""

import json

import numpy as np
import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

import posym.train.loop as loop
from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.model.gptj import rotary_table
from posym.model.pe import gptj_rotary_table, parse_pe
from posym.runs.resolve import resolve_model
from posym.train import make_config
from posym.train.config import TrainConfig
from posym.verbs.train import train
from train_helpers import Interrupt, interrupt_at

torch.set_num_threads(1)
TINY = dict(steps=16, eval_every=4, n_val=64, n_test=64, eval_batch_size=64, track_prompts=8, warmup=2, lr=3e-3,
            checkpoint_every=8, model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))


def _metrics(run) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv").drop(columns="time_s")


def _weights(run) -> dict:
    return load_file(run / "checkpoints/step-000016/model.safetensors")


def test_config_values_and_errors():
    assert make_config("number").pe == "rope"
    assert make_config("number", pe="ssmax").pe == "ssmax:17"  # the initial length is the training length
    assert make_config("number", pe="rope-base:1e6").pe == "rope-base:1000000"
    assert make_config("letter", pe="p-rope:0.25").pe == "p-rope:0.25"
    with pytest.raises(PosymError, match="L must be >= the training length 17"):
        make_config("number", pe="randomized:16")
    with pytest.raises(PosymError, match="unknown positional encoding"):
        make_config("number", pe="alibi")
    old = make_config("number").to_dict()
    del old["pe"]  # a posym.json written before the option existed: RoPE
    assert TrainConfig.from_dict(old).pe == "rope"


def test_rope_base_default_trains_bit_identically_to_rope(tmp_path):
    small = {**TINY, "track_heads": False}
    train(make_config("number", "quick", **small), tmp_path / "plain", progress=False)
    train(make_config("number", "quick", pe="rope-base:10000", **small), tmp_path / "base", progress=False)
    a, b = _weights(tmp_path / "plain"), _weights(tmp_path / "base")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pd.testing.assert_frame_equal(_metrics(tmp_path / "plain"), _metrics(tmp_path / "base"), rtol=0, atol=0)
    plain_cfg = json.loads((tmp_path / "plain/checkpoints/step-000016/config.json").read_text())
    assert plain_cfg["model_type"] == "gptj" and "posym_pe" not in plain_cfg  # today's config.json


@pytest.mark.parametrize("pe", ["randomized:64", "ssmax", "p-rope:0.5"])
def test_variant_resumes_exactly(tmp_path, pe, monkeypatch):
    drawn = {}
    real = loop.random_positions

    def record(batch, length, limit, seed, step):
        out = real(batch, length, limit, seed, step)
        drawn.setdefault(step, []).append(out)
        return out

    monkeypatch.setattr(loop, "random_positions", record)
    cfg = make_config("letter", "quick", pe=pe, **TINY)
    train(cfg, tmp_path / "full", progress=False)
    with pytest.raises(Interrupt):  # dies at the step-12 evaluation: newest trainer state is step 8
        train(cfg, tmp_path / "cut", progress=False, callbacks=[interrupt_at(12)])
    train(make_config("letter", "quick"), tmp_path / "cut", resume=True, progress=False)  # the stored config wins
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "cut"), rtol=0, atol=1e-7)
    stored = json.loads((tmp_path / "cut/posym.json").read_text())["config"]["pe"]
    assert stored == parse_pe(cfg.pe).name
    if pe.startswith("randomized"):  # every step drew sorted ids in [0, 64), the same ones after resuming
        assert sorted(drawn) == list(range(16))
        for step, draws in drawn.items():
            assert all(torch.equal(d, draws[0]) for d in draws)
            assert draws[0].shape == (64, 17) and (draws[0].diff(dim=1) > 0).all() and int(draws[0].max()) < 64
        # full run 0..15, cut run 0..11, resumed from the step-8 checkpoint: 8..15
        assert [len(drawn[s]) for s in (0, 7, 8, 11, 12, 15)] == [2, 2, 3, 3, 2, 2]
    else:
        assert not drawn
    # every analysis resolves the run to the variant's model
    model = resolve_model(tmp_path / "cut").model
    assert model.config.posym_pe == cfg.pe
    assert torch.equal(rotary_table(model), gptj_rotary_table(parse_pe(cfg.pe), model.config.n_positions, 32))
    assert torch.equal(get_adapter(model).inv_freq, get_adapter(resolve_model(tmp_path / "full").model).inv_freq)


def test_randomized_training_differs_and_evaluation_uses_plain_positions(tmp_path):
    small = {**TINY, "track_heads": False}
    train(make_config("number", "quick", **small), tmp_path / "rope", progress=False)
    train(make_config("number", "quick", pe="randomized:64", **small), tmp_path / "rand", progress=False)
    a, b = _metrics(tmp_path / "rope"), _metrics(tmp_path / "rand")
    assert not np.array_equal(a.train_loss.dropna(), b.train_loss.dropna())  # the positions reached the loss
    cfg = json.loads((tmp_path / "rand/checkpoints/step-000016/config.json").read_text())
    assert cfg["model_type"] == "gptj" and cfg["posym_pe"] == "randomized:64" and cfg["n_positions"] == 128


def test_reproduce_setting_reaches_the_training_config():
    from posym.verbs.settings import overrides_from_pairs, preset_settings, validate_settings

    s = preset_settings("quick", overrides_from_pairs({"train.pe": "nope"}))
    assert s["train"]["pe"] == "nope"
    validate_settings(s, ("number",))
    bad = preset_settings("quick", overrides_from_pairs({"train.pe": "p-rope:7"}))
    with pytest.raises(PosymError, match="bad reproduction setting train: .*fraction F"):
        validate_settings(bad, ("number",))


def test_cli_pe_is_stored(tmp_path):
    """``--pe`` reaches posym.json and the checkpoints (keeping it on --resume: test_variant_resumes_exactly)."""
    from posym.cli import main

    tiny = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
            "--set", "n_inner=16", "--set", "rotary_dim=16", "--no-track-heads", "--quiet"]
    run = tmp_path / "run"
    assert main(["train", "--task", "number", "--out", str(run), "--pe", "P-RoPE:0.5", *tiny]) == 0
    assert json.loads((run / "posym.json").read_text())["config"]["pe"] == "p-rope:0.5"
    ckpt = json.loads((run / "checkpoints/step-000004/config.json").read_text())
    assert (ckpt["model_type"], ckpt["posym_pe"]) == ("posym_gptj", "p-rope:0.5")
    assert resolve_model(run).model.config.posym_pe == "p-rope:0.5"


KILL_TINY = dict(steps=160, eval_every=10, n_val=64, n_test=64, checkpoint_every=30, eval_batch_size=64,
                 track_prompts=8, pe="randomized:64", model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))
KILL_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from posym.train import make_config
from posym.verbs.train import train
train(make_config("number", "quick", **{tiny!r}), sys.argv[1], resume=len(sys.argv) > 2, progress=False)
"""


@pytest.mark.integration
@pytest.mark.slow  # minutes; the exact-resume rule of every variant is test_variant_resumes_exactly (fast tier)
def test_randomized_sigkill_then_resume_gives_identical_metrics(tmp_path):
    """As tests/train/test_resume.py for RoPE: a randomized-positions run killed with SIGKILL mid-way
    and resumed writes the same metrics and head scores as an uninterrupted one."""
    from train_helpers import kill_then_resume

    kill_then_resume(tmp_path, lambda out, resume: [KILL_SCRIPT.format(tiny=KILL_TINY), str(out)]
                     + (["resume"] if resume else []), "step-0000[6-9]*")
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "killed"), rtol=0, atol=1e-6)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "full/scores.csv"), pd.read_csv(tmp_path / "killed/scores.csv"),
                                  rtol=0, atol=1e-6)
