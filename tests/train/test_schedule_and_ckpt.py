"""LR schedule (SPEC §2), checkpoint schedule and atomic checkpoint writes (DESIGN)."""

import pytest
import torch
from transformers import get_linear_schedule_with_warmup

from posym.model import build_model, model_config
from posym.train import checkpoints as ckpt
from posym.train.schedule import checkpoint_steps, eval_steps, linear_warmup_decay


def test_lr_schedule_matches_hf_trainer():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1e-4)
    sched = get_linear_schedule_with_warmup(opt, 750, 6750)
    for step in range(6751):
        assert linear_warmup_decay(step, 750, 6750) * 1e-4 == pytest.approx(sched.get_last_lr()[0], abs=1e-12)
        opt.step()
        sched.step()


def test_checkpoint_and_eval_steps():
    s = checkpoint_steps(6750)
    assert s[:11] == [0, 1, 2, 4, 8, 16, 32, 64, 128, 250, 256]
    assert 512 in s and 6500 in s and s[-1] == 6750
    assert checkpoint_steps(100, every=250, extra_every=50) == [0, 1, 2, 4, 8, 16, 32, 50, 64, 100]
    assert eval_steps(120, 50) == [0, 50, 100, 120]


def _model():
    return build_model(model_config("quick", 137, n_layer=1, n_embd=16, n_inner=32, rotary_dim=16), seed=0)


def test_killed_write_leaves_previous_checkpoint_intact(tmp_path, monkeypatch):
    m = _model()
    ckpt.save_checkpoint(tmp_path, 10, m, {"task": "number"}, {"step": 10})
    before = (tmp_path / "checkpoints/step-000010/model.safetensors").read_bytes()

    def dying_save(model, directory, meta=None):  # writes part of a checkpoint, then "dies"
        directory.mkdir(parents=True)
        (directory / "config.json").write_text("{")
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "save_model", dying_save)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(tmp_path, 20, m, {"task": "number"}, {"step": 20})
    with pytest.raises(KeyboardInterrupt):  # re-writing an existing step must not damage it either
        ckpt.save_checkpoint(tmp_path, 10, m, {"task": "number"}, {"step": 10})
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [10]
    assert ckpt.latest_resumable(tmp_path)[0] == 10
    assert (tmp_path / "checkpoints/step-000010/model.safetensors").read_bytes() == before
    ckpt.clean_temporaries(tmp_path)
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000010"]


def test_trainer_state_kept_only_on_newest(tmp_path):
    m = _model()
    for step in (1, 2, 4):
        ckpt.save_checkpoint(tmp_path, step, m, {}, {"step": step, "x": torch.ones(2)})
    has_state = [s for s, p in ckpt.list_checkpoints(tmp_path) if (p / ckpt.TRAINER_STATE).exists()]
    assert has_state == [4]
    state = ckpt.load_trainer_state(ckpt.latest_resumable(tmp_path)[1])
    assert state["step"] == 4 and torch.equal(state["x"], torch.ones(2))
