"""The authors' training semantics as options (SPEC §2): global batch / epochs, best-checkpoint
selection (HF ``load_best_model_at_end``), fp16 with loss scaling, the letter distractor rule —
each recorded in ``posym.json`` and honoured on ``--resume``."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from train_helpers import Interrupt, interrupt_at
from posym.runs.resolve import resolve_checkpoint, resolve_model
from posym.tasks import make_split
from posym.train import make_config
from posym.verbs.train import train
from posym.train.config import TrainConfig, steps_for_epochs
from posym.train.evaluate import evaluate

TINY = dict(steps=16, eval_every=2, n_val=64, n_test=64, eval_batch_size=64, track_prompts=8, warmup=2,
            checkpoint_every=8, model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32))


def _metrics(run) -> pd.DataFrame:
    return pd.read_csv(run / "metrics.csv").drop(columns="time_s")


def test_epochs_give_the_paper_step_counts():
    assert steps_for_epochs(1, 64) == 6750 and steps_for_epochs(3, 192) == 6750
    cfg = make_config("number", "paper", batch_size=192, epochs=3)
    assert cfg.steps == 6750 and cfg.epochs == 3 and cfg.warmup == 750
    authors = make_config("letter", "authors")
    assert (authors.batch_size, authors.steps, authors.final_model, authors.distractors) == (192, 6750, "best", "pool")
    with pytest.raises(PosymError, match="steps or epochs"):
        make_config("number", "paper", steps=100, epochs=1)
    with pytest.raises(PosymError, match="final_model"):
        make_config("number", "paper", final_model="middle")
    with pytest.raises(PosymError, match="distractor"):
        make_config("letter", "paper", distractors="chain")


def test_old_run_configs_read_as_the_old_letter_data():
    d = make_config("letter", "paper").to_dict()
    assert TrainConfig.from_dict(d).distractors == "pool"
    del d["distractors"]  # a posym.json written before the option existed
    assert TrainConfig.from_dict(d).distractors == "uniform"


def test_best_checkpoint_is_the_first_maximum_and_analyses_use_it(tmp_path):
    torch.manual_seed(0)
    run = tmp_path / "run"
    cfg = make_config("letter", "quick", final_model="best", **{**TINY, "lr": 3e-3})
    res = train(cfg, run, progress=False)
    m = pd.read_csv(run / "metrics.csv")
    val = m[m.split == "val"]
    first_max = int(val.step[val.acc == val.acc.max()].iloc[0])
    assert first_max < cfg.steps or val.acc.iloc[-1] > val.acc.iloc[:-1].max()
    out = json.loads((run / "results.json").read_text())
    assert out["final_model"] == "best" and out["best_step"] == first_max == out["final_step"]
    assert out["best_val_acc"] == pytest.approx(val.acc.max())
    assert int(m[m.split == "test"].step.iloc[0]) == first_max
    # every analysis resolves the run to that checkpoint; "last" and ints still reach the others
    assert resolve_checkpoint(run).name == "best"
    r = resolve_model(run)
    assert r.step == first_max
    assert resolve_model(run, step="last").step == cfg.steps
    test = make_split("letter", "test", seed=0, n=TINY["n_test"])
    assert evaluate(r.model, test)["acc"] == pytest.approx(res.test["acc"])
    # the same run with final_model="last" keeps the best checkpoint too, but stands for its last step
    other = tmp_path / "last"
    train(make_config("letter", "quick", **{**TINY, "lr": 3e-3}), other, progress=False)
    assert resolve_model(other).step == cfg.steps and resolve_model(other, step="best").step == first_max
    with pytest.raises(PosymError, match="bad step"):
        resolve_checkpoint(other, "middle")


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_options_survive_resume_exactly(tmp_path, precision):
    """batch size, best selection, distractor rule and fp16 loss scaling continue identically after a kill."""
    cfg = make_config("letter", "quick", precision=precision, batch_size=24, final_model="best",
                      distractors="uniform", **{**TINY, "lr": 3e-3})
    train(cfg, tmp_path / "full", progress=False)
    with pytest.raises(Interrupt):  # dies at the step-12 evaluation: newest trainer state is step 8
        train(cfg, tmp_path / "cut", progress=False, callbacks=[interrupt_at(12)])
    train(make_config("letter", "quick"), tmp_path / "cut", resume=True, progress=False)  # the stored config wins
    pd.testing.assert_frame_equal(_metrics(tmp_path / "full"), _metrics(tmp_path / "cut"), rtol=0, atol=1e-7)
    stored = json.loads((tmp_path / "cut/posym.json").read_text())["config"]
    assert (stored["precision"], stored["batch_size"], stored["final_model"], stored["distractors"]) == \
        (precision, 24, "best", "uniform")
    a = json.loads((tmp_path / "full/results.json").read_text())
    b = json.loads((tmp_path / "cut/results.json").read_text())
    assert a["best_step"] == b["best_step"] and a["test"] == b["test"]


def test_fp16_trains_close_to_fp32(tmp_path):
    """fp16 autocast + GradScaler on the CPU: the CPU can test the mechanics (loss scaling, skipped
    steps, resume), not CUDA's fp16 numerics."""
    torch.set_num_threads(1)
    small = {**TINY, "track_heads": False}
    train(make_config("number", "quick", **small), tmp_path / "fp32", progress=False)
    train(make_config("number", "quick", precision="fp16", **small), tmp_path / "fp16", progress=False)
    a, b = _metrics(tmp_path / "fp32"), _metrics(tmp_path / "fp16")
    va = a[a.split == "val"].dropna(subset=["train_loss"])
    vb = b[b.split == "val"].dropna(subset=["train_loss"])
    np.testing.assert_allclose(vb.train_loss, va.train_loss, rtol=3e-2)
    assert not np.array_equal(va.train_loss, vb.train_loss)  # autocast really was on


def test_distractor_rule_reaches_the_training_data(tmp_path):
    small = {**TINY, "steps": 2, "track_heads": False}
    train(make_config("letter", "quick", distractors="uniform", **small), tmp_path / "u", progress=False)
    train(make_config("letter", "quick", **small), tmp_path / "p", progress=False)
    a, b = _metrics(tmp_path / "u"), _metrics(tmp_path / "p")
    assert not np.allclose(a.loss, b.loss)  # different validation data under the two rules


def test_select_derives_the_best_model_run(tmp_path):
    """posym select: a finished last-step run seen as if trained with final_model="best" — same
    test accuracy and test row as the run trained with that option, scores up to the best step."""
    from posym.cli import main

    kw = {**TINY, "lr": 3e-3}
    train(make_config("letter", "quick", **kw), tmp_path / "last", progress=False)
    train(make_config("letter", "quick", final_model="best", **kw), tmp_path / "best", progress=False)
    assert main(["select", str(tmp_path / "last"), "--out", str(tmp_path / "sel")]) == 0
    sel = json.loads((tmp_path / "sel/results.json").read_text())
    ref = json.loads((tmp_path / "best/results.json").read_text())
    assert sel["final_step"] == ref["final_step"] and sel["test"] == ref["test"]
    a, b = pd.read_csv(tmp_path / "sel/metrics.csv"), pd.read_csv(tmp_path / "best/metrics.csv")
    assert a[a.split == "test"].drop(columns=["time_s", "lr"]).reset_index(drop=True).equals(
        b[b.split == "test"].drop(columns=["time_s", "lr"]).reset_index(drop=True))
    assert pd.read_csv(tmp_path / "sel/scores.csv").step.max() == sel["final_step"]
    assert resolve_model(tmp_path / "sel").step == sel["final_step"]
    assert main(["select", str(tmp_path / "last"), "--out", str(tmp_path / "sel")]) == 2  # exists: --force
    assert main(["select", str(tmp_path / "last"), "--out", str(tmp_path / "best"), "--force"]) == 2  # a real run
