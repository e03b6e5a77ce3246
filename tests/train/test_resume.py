"""Resume is exact: a run killed with SIGKILL and resumed writes the same metrics (SPEC §2)."""

import csv
from pathlib import Path

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.train import make_config
from posym.verbs.train import train
from train_helpers import kill_then_resume

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


@pytest.mark.integration
def test_sigkill_then_resume_gives_identical_metrics(tmp_path):
    kill_then_resume(tmp_path, lambda out, resume: [SCRIPT.format(tiny=TINY), str(out)] + (["resume"] if resume else []),
                     "step-0000[6-9]*")
    assert len(_rows(tmp_path / "killed"))
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


# train --resume checks the tables it keeps (reliability probe 4, C / N10 / N11 / T5) --------------------
SMALL = {**TINY, "steps": 40, "eval_every": 10, "checkpoint_every": 20}


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """A run as a kill at step ~35 leaves it: checkpoints up to step 20, the val rows (and scores) up to
    step 30, no test row and no results.json; plus the uninterrupted run's metrics."""

    root = tmp_path_factory.mktemp("killed")
    train(make_config("number", "quick", **SMALL), root / "full", progress=False)

    def stop(step, model, run_dir):  # after the val row and the head scores of step 30
        if step == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(make_config("number", "quick", **SMALL), root / "run", progress=False, callbacks=[stop])
    run = root / "run"
    assert not (run / "results.json").exists()
    assert sorted(pd.read_csv(run / "metrics.csv")["step"]) == [0, 10, 20, 30]
    return root


def _copy(killed_run, tmp_path):
    import shutil

    shutil.copytree(killed_run / "run", tmp_path / "run")
    return tmp_path / "run"


def _drop_row(text: str, i: int) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:i] + lines[i + 1:])


def _set_cell(text: str, row: int, col: str, value: str) -> str:
    lines = text.splitlines(keepends=True)
    header = lines[0].rstrip("\n").split(",")
    cells = lines[row].rstrip("\n").split(",")
    cells[header.index(col)] = value
    lines[row] = ",".join(cells) + "\n"
    return "".join(lines)


def test_a_resume_after_a_kill_is_whole(killed_run, tmp_path):
    run = _copy(killed_run, tmp_path)
    with open(run / "metrics.csv", "a") as f:  # a row torn by the kill, after the checkpoint: dropped
        f.write("val,40,4.9")
    train(make_config("number", "quick", **SMALL), run, resume=True, progress=False)
    a = pd.read_csv(killed_run / "full/metrics.csv").drop(columns="time_s")
    b = pd.read_csv(run / "metrics.csv").drop(columns="time_s")
    pd.testing.assert_frame_equal(a, b, atol=1e-6, rtol=0)
    assert len(pd.read_csv(run / "scores.csv")) == len(pd.read_csv(killed_run / "full/scores.csv"))


@pytest.mark.parametrize("table, damage, message", [
    ("metrics.csv", lambda t: "garbage\n", r"metrics.csv lacks the column\(s\) split, step"),
    ("metrics.csv", lambda t: pd.read_csv(__import__("io").StringIO(t)).drop(columns="acc_hop3").to_csv(index=False),
     r"metrics.csv lacks the column\(s\) acc_hop3"),
    ("metrics.csv", lambda t: t.splitlines(keepends=True)[0] + t.splitlines(keepends=True)[1] + "".join(
        t.splitlines(keepends=True)[1:]), "metrics.csv rows 1 and 2 repeat the point split val, step 0"),
    ("metrics.csv", lambda t: _set_cell(t, 2, "acc", "7.5"), r"metrics.csv row 2: acc = '7.5' is not a number in \[0, 1\]"),
    ("metrics.csv", lambda t: _set_cell(t, 2, "step", "1.5"), "metrics.csv row 2: step = '1.5' is not an integer >= 0"),
    ("metrics.csv", lambda t: _drop_row(_drop_row(t, 1), 1),
     "metrics.csv lacks the val rows of step.s. 0, 10 .written before the checkpoint of step 20"),
    ("metrics.csv", None, r"metrics.csv lacks the val rows of step\(s\) 0, 10, 20"),  # deleted
    ("scores.csv", lambda t: "garbage\n", "scores.csv lacks the column"),
    ("scores.csv", lambda t: _set_cell(t, 1, "s_pos", "7.5"), r"scores.csv row 1: s_pos = '7.5' is not a score"),
    ("scores.csv", lambda t: _drop_row(_drop_row(t, 1), 1), r"scores.csv lacks the rows of step\(s\) 0"),
])
def test_resume_refuses_a_corrupt_table_it_would_keep(killed_run, tmp_path, table, damage, message):
    run = _copy(killed_run, tmp_path)
    if damage is None:
        (run / table).unlink()
    else:
        (run / table).write_text(damage((run / table).read_text()))
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    with pytest.raises(PosymError, match=message + ".*restore it, or pass --force to start the run over"):
        train(make_config("number", "quick", **SMALL), run, resume=True, progress=False)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before  # nothing changed


def test_resume_with_a_garbage_scores_table_is_one_line(killed_run, tmp_path, capsys):
    from posym.cli import main

    run = _copy(killed_run, tmp_path)
    (run / "scores.csv").write_text("garbage\n")  # was a KeyError: 'step' traceback (T5)
    rc = main(["train", "--task", "number", "--out", str(run), "--resume", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "scores.csv lacks the column" in err[0] and "Traceback" not in err[0]
