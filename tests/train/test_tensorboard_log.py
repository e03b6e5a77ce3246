"""posym train --log tensorboard: loss, accuracy per hop and head scores, read back from the event files."""

from __future__ import annotations

import pytest

from train_helpers import Interrupt, interrupt_at
from posym.errors import PosymError
from posym.train import make_config
from posym.verbs.train import train

pytest.importorskip("tensorboard", reason="the [tensorboard] extra is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TINY = dict(steps=12, eval_every=4, n_val=64, n_test=64, eval_batch_size=64, track_prompts=8, warmup=2,
            checkpoint_every=4, model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))


def _scalars(run):
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_event_files_hold_the_training_values(tmp_path):
    cfg = make_config("number", "quick", log="tensorboard", **TINY)
    assert cfg.log == ("tensorboard",) and cfg.to_dict()["log"] == ["tensorboard"]
    train(cfg, tmp_path / "run", progress=False)
    s = _scalars(tmp_path / "run")
    assert {"val/loss", "val/acc", "val/acc_hop1", "val/acc_hop4", "train/loss", "train/lr",
            "heads/s_pos/layer_0", "heads/s_sym/layer_1", "heads/pure_positional", "heads/pure_symbolic"} <= set(s)
    assert [st for st, _ in s["val/acc"]] == [0, 4, 8, 12]
    import pandas as pd

    m = pd.read_csv(tmp_path / "run/metrics.csv")
    val = m[m.split == "val"]
    assert [round(v, 6) for _, v in s["val/acc"]] == [round(v, 6) for v in val["acc"]]


def test_resume_purges_events_after_the_checkpoint(tmp_path):
    cfg = make_config("number", "quick", log=["tensorboard"], **{**TINY, "steps": 16, "checkpoint_every": 8})
    with pytest.raises(Interrupt):  # logged step 12, then died at step 16: the newest trainer state is step 8
        train(cfg, tmp_path / "run", progress=False, callbacks=[interrupt_at(16)])
    assert [st for st, _ in _scalars(tmp_path / "run")["val/acc"]] == [0, 4, 8, 12]
    train(make_config("number", "quick"), tmp_path / "run", resume=True, progress=False)  # stored config: log kept
    steps = [st for st, _ in _scalars(tmp_path / "run")["val/acc"]]
    assert steps == [0, 4, 8, 12, 16]  # step 12 was evaluated again and is not there twice


def test_unknown_logger_is_refused():
    with pytest.raises(PosymError, match="unknown logger"):
        make_config("number", "quick", log=["wandb"])
