"""Defects that lost data or gave wrong numbers silently (reliability probe D1–D6), each reproduced.

D1 ``train --force`` deleted any directory; D2 checkpoints with missing tensors loaded with random
weights; D3 two writers on one run / reproduction; D4 ``reproduce`` workers outlived a SIGKILLed
parent; D5 ``reproduce --set`` values were checked only when their stage ran, and a corrected
re-run was refused; D6 ``scores --model RUN_DIR`` dropped the step column.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from ctrl_c import default_sigint
from safetensors.torch import load_file, save_file

from posym.cli import main
from posym.runs.lock import LOCK_FILE, DirLock
from posym.errors import PosymError

TINY = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
        "--set", "n_inner=16", "--set", "rotary_dim=16", "--track-prompts", "8", "--quiet"]


def _posym(args, capsys) -> tuple[int, str]:
    rc = main([str(a) for a in args])
    err = capsys.readouterr().err
    return rc, err


def _one_error_line(err: str) -> str:
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("posym: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "tiny"
    assert main(["train", "--task", "number", "--out", str(out), *TINY]) == 0
    return out


# D1 -----------------------------------------------------------------------------------------------
def test_force_never_deletes_a_folder_that_is_not_a_run(tmp_path, capsys, monkeypatch):
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "thesis.txt").write_text("years of work")
    rc, err = _posym(["train", "--task", "number", "--out", precious, "--force", *TINY], capsys)
    assert rc == 2 and "not a posym run" in _one_error_line(err)
    assert (precious / "thesis.txt").read_text() == "years of work" and len(list(precious.iterdir())) == 1
    # the current directory, even when it is a run, is never removed
    monkeypatch.chdir(precious)
    (precious / "posym.json").write_text("{}")
    rc, err = _posym(["train", "--task", "number", "--out", ".", "--force", *TINY], capsys)
    assert rc == 2 and "current directory" in _one_error_line(err)
    assert (precious / "thesis.txt").is_file()


def test_force_replaces_a_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--task", "number", "--out", str(run), *TINY]) == 0
    (run / "checkpoints" / "step-000099").mkdir()  # something the new run will not write
    assert main(["train", "--task", "number", "--out", str(run), "--force", *TINY]) == 0
    assert not (run / "checkpoints" / "step-000099").exists() and not (run / LOCK_FILE).exists()


# D2 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["drop", "rename"])
def test_checkpoints_with_missing_tensors_are_refused(tiny_run, tmp_path, capsys, damage):
    ckpt = tmp_path / "partial"
    import shutil

    shutil.copytree(tiny_run / "checkpoints" / "step-000004", ckpt)
    w = load_file(str(ckpt / "model.safetensors"))
    if damage == "drop":
        w = {k: v for k, v in w.items() if ".h.1." not in k}
    else:
        w = {k.replace(".h.1.", ".h.7."): v for k, v in w.items()}
    save_file(w, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    rc, err = _posym(["scores", "--model", ckpt, "--out", tmp_path / "s.csv", "--n", "4"], capsys)
    line = _one_error_line(err)
    assert rc == 2 and "missing weight tensor" in line and "transformer.h.1." in line
    if damage == "rename":
        assert "unexpected" in line
    rc, err = _posym(["lengthgen", ckpt, "--task", "number", "--grid", "0", "--n", "4", "--out", tmp_path / "l.csv"],
                     capsys)
    assert rc == 2 and "missing weight tensor" in _one_error_line(err)
    assert not (tmp_path / "s.csv").exists() and not (tmp_path / "l.csv").exists()


# D3 -----------------------------------------------------------------------------------------------
def test_lock_refuses_a_live_holder_and_takes_over_a_stale_one(tmp_path):
    d = tmp_path / "run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        d.mkdir()
        (d / LOCK_FILE).write_text(json.dumps({"pid": sleeper.pid, "host": os.uname().nodename, "started": 0}))
        with pytest.raises(PosymError, match=f"in use by process {sleeper.pid}"):
            DirLock(d).acquire()
    finally:
        sleeper.kill()
        sleeper.wait()
    with DirLock(d) as lock:  # the holder is gone: stale, taken over
        assert json.loads(lock.path.read_text())["pid"] == os.getpid()
    assert not (d / LOCK_FILE).exists()


def test_a_file_lock_refuses_a_live_holder_takes_over_a_stale_one_and_tidies_up(tmp_path):
    """``DirLock.for_file``: one writer per table (``.NAME.lock`` beside it; probe 4, A)."""
    with DirLock.for_file(tmp_path / "new/sub/t.csv", "length table") as lock:
        assert lock.path == tmp_path / "new/sub/.t.csv.lock" and lock.path.is_file()
    assert not (tmp_path / "new").exists()  # the folders the lock created, left empty, are removed
    table = tmp_path / "keep" / "t.csv"
    table.parent.mkdir()
    path = DirLock.for_file(table).path
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path.write_text(json.dumps({"pid": sleeper.pid, "host": os.uname().nodename, "started": 0}))
        code = f"from posym.runs.lock import DirLock; DirLock.for_file({str(table)!r}, 'length table').acquire()"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert r.returncode != 0 and f"length table {table} is in use by process {sleeper.pid}" in r.stderr
        with pytest.raises(PosymError, match=f"in use by process {sleeper.pid}"):  # the path spelled otherwise
            DirLock.for_file(tmp_path / "keep/../keep/t.csv", "length table").check_free()
    finally:
        sleeper.kill()
        sleeper.wait()
    with DirLock.for_file(table) as taken:  # its holder is gone: stale, taken over
        assert json.loads(taken.path.read_text())["pid"] == os.getpid()
    assert not path.exists() and table.parent.is_dir()  # a folder that was there stays


def _wait_for(pred, timeout=300.0):
    """Poll ``pred`` until true; the bound is generous (CI runs two test workers on 2 cores beside these processes)."""
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(0.05)


@pytest.mark.integration
def test_second_writer_of_a_training_run_exits_2(tmp_path):
    run = tmp_path / "run"
    args = ["train", "--task", "number", "--out", str(run), *TINY[:-1], "--steps", "100000", "--eval-every", "10",
            "--checkpoint-every", "20", "--threads", "1", "--quiet"]
    cmd = [sys.executable, "-c", "import sys; from posym.cli import main; sys.exit(main(sys.argv[1:]))"]
    first = subprocess.Popen(cmd + args, stderr=subprocess.PIPE, text=True,
                             preexec_fn=default_sigint)
    try:
        _wait_for(lambda: (run / "checkpoints" / "step-000020").is_dir())
        # 300 s: on a loaded machine the second process once needed over 120 s to refuse
        for second_args in (["train", "--task", "number", "--out", str(run), "--resume"], args):
            second = subprocess.run(cmd + second_args, capture_output=True, text=True, timeout=300)
            assert second.returncode == 2, second.stderr
            assert "in use by process" in _one_error_line(second.stderr)
        assert first.poll() is None  # the first writer was not disturbed
    finally:
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=300) == 130, first.stderr.read()
    m = pd.read_csv(run / "metrics.csv")
    assert not m[m.split == "val"].step.duplicated().any()
    assert not (run / LOCK_FILE).exists()  # released on Ctrl-C


# D4 + D3 for reproduce ----------------------------------------------------------------------------
def _descendants_alive(pgid: int) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[2]) == pgid and stat[0] != "Z":
                pids.append(int(p.name))
    return pids


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the worker processes")
def test_reproduce_workers_die_with_their_parent_and_a_rerun_is_correct(tmp_path):
    out = tmp_path / "rk"
    cmd = [sys.executable, "-c", "import sys; from posym.cli import main; sys.exit(main(sys.argv[1:]))",
           "reproduce", "--preset", "tiny", "--no-llm", "--quiet", "--jobs", "2", "--out", str(out),
           "--set", "train.steps=400", "--set", "train.checkpoint_every=20"]
    parent = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for(lambda: (out / "number" / "seed0" / "checkpoints" / "step-000020").is_dir())
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # a second reproduction
        assert second.returncode == 2 and "in use by process" in _one_error_line(second.stderr)
        assert len(_descendants_alive(parent.pid)) >= 2  # parent + workers
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        _wait_for(lambda: not _descendants_alive(parent.pid), timeout=30)  # the workers are gone too
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-2000:]
    for task in ("number", "letter"):
        m = pd.read_csv(out / task / "seed0" / "metrics.csv")
        assert (m.split == "test").sum() == 1 and not m[m.split == "val"].step.duplicated().any()
        assert sorted(m[m.split == "val"].step) == list(range(0, 401, 10))


# D5 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["lengthgen_grid=0,,abc", "lengthgen_n=-5", "train.steps=-5", "train.bogus=1",
                                 "gammas=[5]", "ablation_n=0", 'llm={"n": 0}', "discrepancy.n_max=abc",
                                 "train.model_overrides.n_head=0"])
def test_reproduce_settings_are_checked_before_any_stage(tmp_path, capsys, bad):
    out = tmp_path / "r"
    rc, err = _posym(["reproduce", "--preset", "tiny", "--no-llm", "--quiet", "--out", out, "--set", bad], capsys)
    assert rc == 2 and "bad reproduction setting" in _one_error_line(err)
    assert not out.exists()


def test_a_failed_stage_reruns_with_corrected_settings(repro_copy, monkeypatch):
    from posym.runs.layout import read_marker
    from posym.verbs.reproduce import reproduce

    def boom(*a, **k):
        raise PosymError("injected: bad lengthgen settings")

    for p in (repro_copy / "stages").glob("lengthgen-*.done"):
        p.unlink()
    monkeypatch.setattr("posym.verbs.lengthgen.lengthgen", boom)
    with pytest.raises(PosymError, match="lengthgen"):
        reproduce("tiny", out=repro_copy, seeds=2, jobs=1, llm=False, progress=False)
    monkeypatch.undo()
    before = {p.name: p.stat().st_mtime_ns for p in (repro_copy / "stages").glob("train-*.done")}
    reproduce("tiny", out=repro_copy, seeds=2, jobs=1, llm=False, progress=False, overrides={"lengthgen_n": 9})
    assert {p.name: p.stat().st_mtime_ns for p in (repro_copy / "stages").glob("train-*.done")} == before
    assert pd.read_csv(repro_copy / "number" / "seed0" / "lengthgen.csv").n.unique().tolist() == [9]
    assert read_marker(repro_copy, "lengthgen-letter-s1") is not None
    assert json.loads((repro_copy / "reproduce.json").read_text())["settings"]["lengthgen_n"] == 9


# D6 -----------------------------------------------------------------------------------------------
def test_scores_model_on_a_run_keeps_the_step(tiny_run, tmp_path, capsys):
    rc, _ = _posym(["scores", "--model", tiny_run, "--out", tmp_path / "s.csv", "--n", "4"], capsys)
    assert rc == 0
    df = pd.read_csv(tmp_path / "s.csv")
    assert "step" in df and sorted(df.step.unique()) == [0, 1, 2, 4]
    assert not df.duplicated(["step", "layer", "head", "tau"]).any()


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc to find the worker processes")
def test_sigint_to_the_reproduce_parent_alone_stops_its_workers(tmp_path):
    """A SIGINT to the parent only (not its process group) ends the reproduction promptly with 130 and
    its workers, instead of waiting for the running stages."""
    out = tmp_path / "ri"
    cmd = [sys.executable, "-c", "import sys; from posym.cli import main; sys.exit(main(sys.argv[1:]))",
           "reproduce", "--preset", "tiny", "--no-llm", "--quiet", "--jobs", "2", "--out", str(out),
           "--set", "train.steps=100000", "--set", "train.checkpoint_every=20"]
    parent = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              preexec_fn=default_sigint)
    try:
        _wait_for(lambda: (out / "number" / "seed0" / "checkpoints" / "step-000020").is_dir())
        os.kill(parent.pid, signal.SIGINT)
        assert parent.wait(timeout=300) == 130
        _wait_for(lambda: not _descendants_alive(parent.pid), timeout=30)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
