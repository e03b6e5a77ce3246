"""A full disk during training (reliability): the checkpoint being written fails cleanly with one
error line, the previous checkpoint still loads, and ``--resume`` after freeing space gives the same
run as an uninterrupted one. Needs a small tmpfs (``mount -t tmpfs``: root with CAP_SYS_ADMIN)."""

from __future__ import annotations

import os
import subprocess

import pandas as pd
import pytest

from posym.cli import main
from posym.model import load_model
from posym.runs.layout import list_checkpoints

ARGS = ["--task", "number", "--steps", "40", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2",
        "--set", "n_embd=16", "--set", "n_inner=16", "--set", "rotary_dim=16", "--no-track-heads", "--quiet"]


@pytest.fixture
def small_disk(tmp_path):
    d = tmp_path / "disk"
    d.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=320k", "tmpfs", str(d)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root with CAP_SYS_ADMIN)")
    yield d
    subprocess.run(["umount", "-l", str(d)], capture_output=True)  # lazy: never leave a mount behind


@pytest.mark.integration
def test_disk_full_then_resume(small_disk, tmp_path, capsys):
    run = small_disk / "run"
    rc = main(["train", *ARGS, "--out", str(run)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and line.startswith("posym")]
    assert rc == 2 and len(lines) == 1 and "No space left on device" in lines[0], err
    assert "Traceback" not in err
    ckpts = list_checkpoints(run)
    assert ckpts and ckpts[-1][0] < 40
    load_model(ckpts[-1][1])  # the newest complete checkpoint still loads
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.startswith(".tmp-")]
    # free space, resume: identical to an uninterrupted run
    assert subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], capture_output=True).returncode == 0
    assert main(["train", *ARGS, "--out", str(run), "--resume"]) == 0
    assert main(["train", *ARGS, "--out", str(tmp_path / "ref")]) == 0
    a = pd.read_csv(run / "metrics.csv").drop(columns="time_s")
    b = pd.read_csv(tmp_path / "ref" / "metrics.csv").drop(columns="time_s")
    pd.testing.assert_frame_equal(a, b, rtol=0, atol=0)
