"""Slurm jobs as ``squeue`` sees them: which of some job ids are still queued or running.

The one-writer lock (:mod:`posym.runs.lock`) asks this for a lock held by Slurm jobs (a reproduction
submitted with ``--launcher slurm``, or a run trained inside a job); the launcher
(:mod:`posym.launch.slurm`) for its progress display. Plain ``squeue``, no accounting database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Iterable

#: Seconds one ``squeue`` call may take before it counts as unanswered.
SQUEUE_TIMEOUT = 30.0


def job_id() -> str | None:
    """The id of the Slurm job this process runs in (``SLURM_JOB_ID``), None outside Slurm."""
    return os.environ.get("SLURM_JOB_ID") or None


def queued(ids: Iterable[str]) -> dict[str, dict[str, str]] | None:
    """``{id: {"state": ..., "reason": ..., "name": ...}}`` for each of ``ids`` that ``squeue`` still lists
    (pending, running, completing, ...); jobs that ended are absent. None when ``squeue`` cannot be
    asked (not installed, no controller): the caller cannot tell whether the jobs live."""
    ids = [str(i) for i in ids if str(i).strip()]
    if not ids:
        return {}
    exe = shutil.which("squeue")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-h", "-j", ",".join(ids), "-o", "%i|%T|%r|%j"], capture_output=True,
                              text=True, timeout=SQUEUE_TIMEOUT)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
        return None
    out: dict[str, dict[str, str]] = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|", 3)
        if len(parts) == 4 and parts[0] in ids:
            out[parts[0]] = {"state": parts[1], "reason": parts[2], "name": parts[3]}
    return out


__all__ = ["SQUEUE_TIMEOUT", "job_id", "queued"]
