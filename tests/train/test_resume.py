"""Resume is exact: a run killed with SIGKILL and resumed writes the same metrics (SPEC §2)."""

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.train import make_config
from posym.verbs.train import train

TINY = dict(steps=240, eval_every=10, n_val=64, n_test=64, checkpoint_every=30, eval_batch_size=64,
            model_overrides=dict(n_layer=2, n_embd=32, n_inner=64, rotary_dim=32, resid_pdrop=0.1,
                                 embd_pdrop=0.1, attn_pdrop=0.1))

SCRIPT = """
import sys, torch
torch.set_num_threads(1)
from posym.train import make_config
from posym.verbs.train import train
cfg = make_config("letter", "quick", **{tiny!r})
train(cfg, sys.argv[1], resume=len(sys.argv) > 2, progress=False)
"""


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _run(out: Path, resume: bool = False) -> subprocess.Popen:
    args = [sys.executable, "-c", SCRIPT.format(tiny=TINY), str(out)] + (["resume"] if resume else [])
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.mark.integration
def test_sigkill_then_resume_gives_identical_metrics(tmp_path):
    full = _run(tmp_path / "full")
    assert full.wait(timeout=300) == 0, full.stderr.read().decode()

    victim = _run(tmp_path / "killed")
    deadline = time.time() + 300
    while time.time() < deadline:  # kill once a mid-run checkpoint with trainer state exists
        ck = tmp_path / "killed/checkpoints"
        if ck.is_dir() and any((p / "trainer_state.pt").exists() for p in ck.glob("step-0000[6-9]*")):
            break
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL  # really killed mid-way, not finished
    assert not any(r["split"] == "test" for r in _rows(tmp_path / "killed"))

    resumed = _run(tmp_path / "killed", resume=True)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()

    a, b = _rows(tmp_path / "full"), _rows(tmp_path / "killed")
    assert [(r["split"], r["step"]) for r in a] == [(r["split"], r["step"]) for r in b]
    assert len(a) == TINY["steps"] // TINY["eval_every"] + 2
    for ra, rb in zip(a, b):
        for key in ra:
            if key in ("split", "step", "time_s"):
                continue
            x, y = float(ra[key]), float(rb[key])
            assert (x != x and y != y) or abs(x - y) <= 1e-6, (ra["step"], key, x, y)
    # head tracking (on by default) resumes exactly too
    sa = pd.read_csv(tmp_path / "full/scores.csv")
    sb = pd.read_csv(tmp_path / "killed/scores.csv")
    assert len(sa) == (TINY["steps"] // TINY["eval_every"] + 1) * 2  # 2 layers x 1 head x 1 tau per eval
    pd.testing.assert_frame_equal(sa, sb, atol=1e-6, rtol=0)


def test_head_tracking_does_not_change_training(tmp_path):
    small = {**TINY, "steps": 20, "eval_every": 10}
    with_t = train(make_config("number", "quick", **small), tmp_path / "a", progress=False)
    without = train(make_config("number", "quick", track_heads=False, **small), tmp_path / "b", progress=False)
    assert with_t.test == without.test
    assert (tmp_path / "a/scores.csv").is_file() and not (tmp_path / "b/scores.csv").exists()
    ma = pd.read_csv(tmp_path / "a/metrics.csv").drop(columns="time_s")
    mb = pd.read_csv(tmp_path / "b/metrics.csv").drop(columns="time_s")
    pd.testing.assert_frame_equal(ma, mb)


def test_resume_errors(tmp_path):
    cfg = make_config("number", "quick", **TINY)
    with pytest.raises(PosymError, match="not a posym run directory"):
        train(cfg, tmp_path / "nothing", resume=True, progress=False)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("precious")
    with pytest.raises(PosymError, match="already exists"):
        train(cfg, tmp_path / "run", progress=False)
    assert (tmp_path / "run" / "keep.txt").read_text() == "precious"
