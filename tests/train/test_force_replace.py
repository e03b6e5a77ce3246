"""``train --force`` replaces only a whole run, and only once the new run is complete: the old run
stays intact through a failure or a SIGKILL of the new one (docs/reliability.md)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.runs.layout import LOCK, staging_dir
from posym.train import loop
from posym.train.config import TrainConfig
from posym.train.select import select_final_model

TINY = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
        "--set", "n_inner=16", "--set", "rotary_dim=16", "--track-prompts", "8", "--quiet"]
CLI = [sys.executable, "-c", "import sys; from posym.cli import main; sys.exit(main(sys.argv[1:]))"]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("force") / "run"
    assert main(["train", "--task", "number", "--out", str(out), *TINY]) == 0
    return out


@pytest.fixture
def old_run(tiny_run, tmp_path) -> Path:
    import shutil

    run = tmp_path / "old"
    shutil.copytree(tiny_run, run)
    return run


@pytest.mark.integration
@pytest.mark.parametrize("inner", ["checkpoints/step-000004", "checkpoints/best", "checkpoints"])
def test_force_never_replaces_a_checkpoint_or_anything_inside_a_run(old_run, inner):
    before = _snapshot(old_run)
    cfg = TrainConfig(task="number", steps=1)
    with pytest.raises(PosymError, match="checkpoint folder|lies inside the run"):
        loop.train(cfg, old_run / inner, force=True, progress=False)
    assert _snapshot(old_run) == before


@pytest.mark.integration
def test_a_failing_new_run_leaves_the_old_run_as_it_was(old_run):
    before = _snapshot(old_run)

    def fail(step, model, run_dir):
        assert run_dir == staging_dir(old_run)  # the new run is built beside the old one
        raise RuntimeError("disk on fire")

    cfg = TrainConfig.from_dict({**json.loads((old_run / "posym.json").read_text())["config"], "seed": 3})
    with pytest.raises(RuntimeError, match="disk on fire"):
        loop.train(cfg, old_run, force=True, progress=False, callbacks=[fail])
    assert _snapshot(old_run) == before and not staging_dir(old_run).exists()


@pytest.mark.integration
def test_sigkill_during_force_leaves_the_old_run_and_the_lock_holds(old_run):
    before = _snapshot(old_run)
    args = ["train", "--task", "number", "--out", str(old_run), "--force", *TINY[:-1], "--steps", "100000",
            "--eval-every", "10", "--checkpoint-every", "10", "--threads", "1", "--quiet"]
    victim = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        t0 = time.time()
        while not (staging_dir(old_run) / "checkpoints" / "step-000010").is_dir():
            assert victim.poll() is None and time.time() - t0 < 300, victim.stderr.read()
            time.sleep(0.05)
        second = subprocess.run(CLI + ["train", "--task", "number", "--out", str(old_run), "--resume"],
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "in use by process" in second.stderr  # one writer, as before
    finally:
        victim.send_signal(signal.SIGKILL)
        assert victim.wait() == -signal.SIGKILL
    after = _snapshot(old_run)
    assert {k: v for k, v in after.items() if k != LOCK} == before  # the old run, byte for byte
    # the next --force clears the partial new run and completes
    assert main(["train", "--task", "number", "--out", str(old_run), "--force", *TINY, "--seed", "1"]) == 0
    assert not staging_dir(old_run).exists() and not (old_run / LOCK).exists()
    assert json.loads((old_run / "posym.json").read_text())["config"]["seed"] == 1


@pytest.mark.integration
def test_select_onto_its_own_run_is_refused_before_anything_is_deleted(tiny_run, tmp_path):
    derived = tmp_path / "derived"
    select_final_model(tiny_run, derived, "best", progress=False)
    before = _snapshot(derived)
    for out in (derived, derived / "sub", tmp_path):
        with pytest.raises(PosymError, match="overlaps the run"):
            select_final_model(derived, out, "best", force=True, progress=False)
    assert _snapshot(derived) == before
    assert os.path.islink(derived / "checkpoints")
