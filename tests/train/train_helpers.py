"""Helpers shared by the training tests: a callback that interrupts training at a given step, and a
run killed with SIGKILL mid-way then resumed."""

import signal
import subprocess
import sys
import time



class Interrupt(Exception):
    """Raised by :func:`interrupt_at` to stop a training run from inside its evaluation callback."""


def interrupt_at(step):
    """An evaluation callback raising :class:`Interrupt` at ``step`` (a run killed there, for resume tests)."""
    def cb(s, model, run_dir):
        if s == step:
            raise Interrupt
    return cb


def kill_then_resume(tmp_path, script_args, step_glob: str) -> None:
    """Train ``tmp_path/full`` uninterrupted and ``tmp_path/killed`` killed with SIGKILL once a checkpoint
    matching ``step_glob`` (under ``checkpoints/``) holds its trainer state, then resumed: both
    subprocesses run ``python -c`` with ``script_args(out, resume)``; the caller compares the runs."""
    def start(out, resume=False):
        return subprocess.Popen([sys.executable, "-c", *script_args(out, resume)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)

    full = start(tmp_path / "full")
    assert full.wait(timeout=300) == 0, full.stderr.read().decode()
    victim = start(tmp_path / "killed")
    deadline = time.time() + 300
    while time.time() < deadline:  # kill once a mid-run checkpoint with trainer state exists
        ck = tmp_path / "killed/checkpoints"
        if ck.is_dir() and any((p / "trainer_state.pt").exists() for p in ck.glob(step_glob)):
            break
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    assert not (tmp_path / "killed/results.json").exists()  # really killed mid-way
    resumed = start(tmp_path / "killed", resume=True)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
