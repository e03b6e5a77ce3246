"""One writer per directory: an exclusive lock file for a run or a reproduction directory.

``DirLock(path)`` creates ``path/.posym.lock`` atomically (``O_CREAT | O_EXCL``) holding the holder's
pid, host, start time and command. A second writer finds the file and gets a PosymError naming the
holder; a lock whose holder is gone (same host, no such process) is *stale* and is taken over. The
file is removed on release (normal exit, exception or Ctrl-C); after a SIGKILL it stays behind and
is detected as stale by the next writer.

**Slurm jobs hold locks too.** A lock taken inside a Slurm job records the job id, and a submission
(``posym reproduce --launcher slurm``) names the jobs it submitted (:meth:`DirLock.hold_for_jobs`).
A submission's lock is live while ``squeue`` lists one of its jobs, whether or not the submitting
process still runs (``--detach``), and stale once every job has ended (completed, failed, cancelled
or lost with its node); a lock taken in a job is live while its process lives (same host) or, asked
from another host, while its job does. When ``squeue`` cannot be asked, the lock counts as live.

**One writer per table, too.** :meth:`DirLock.for_file` is the same lock for one file: ``.NAME.lock``
beside ``NAME`` (``posym lengthgen`` holds it on its table while it measures and saves, ``posym llm
eval`` on its ``answers.jsonl``), so a second writer of one table is refused in one line, and a lock
left by a killed writer is stale and taken over, as for a directory.

Readers check it too: an analysis never writes into a run that a live writer holds
(:func:`refuse_live_outputs`), and says so when it analyses one (:func:`in_progress_note`).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType

from posym.errors import PosymError
from posym.files import write_text_atomic
from posym.runs.jobs import job_id, queued
from posym.runs.layout import LOCK as LOCK_FILE, enclosing_run, is_run_dir


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def read_lock(directory: str | os.PathLike, name: str = LOCK_FILE) -> dict | None:
    """The holder record of ``directory``'s lock (the file ``name`` in it), ``{}`` if unreadable, None if
    there is no lock."""
    path = Path(directory) / name
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}


def _is_stale(holder: dict) -> bool:
    jobs = holder.get("slurm_jobs") or []
    if jobs and holder.get("submission"):  # a submission's lock: live while squeue lists one of its jobs
        live = queued(jobs)
        return live is not None and not live  # (None: squeue cannot be asked, assume live)
    try:
        pid: int | None = int(holder.get("pid", -1))
    except (TypeError, ValueError):
        pid = None
    if holder.get("host") == socket.gethostname() and pid is not None:
        return not _alive(pid)
    if jobs:  # taken inside a Slurm job on another host: live while the job is (its node may have died)
        live = queued(jobs)
        return live is not None and not live
    return False  # another machine (shared file system) and no job to ask: assume it is live


class DirLock:
    """Context manager holding ``directory/.posym.lock`` (the directory is created if needed).

    ``what`` names the directory in messages ("run", "reproduction"); ``name`` is the lock file's name
    in it and ``subject`` what a refusal says is in use (:meth:`for_file`). Re-entrant within a process:
    a lock this process already holds is accepted (a reproduction run in-process trains into its
    own sub-directories, each with its own lock, so this only matters for nested use of one path).
    """

    _held: dict[str, int] = {}

    def __init__(self, directory: str | os.PathLike, what: str = "run", *, name: str = LOCK_FILE,
                 subject: str | None = None):
        self.directory = Path(directory)
        self.name = name
        self.path = self.directory / name
        self.what = what
        self.subject = subject or f"{what} directory {self.directory}"
        self._owner = False
        self._tidy = False  # remove the folders the lock created, if still empty, on release (for_file)
        self._made: Path | None = None

    @classmethod
    def for_file(cls, path: str | os.PathLike, what: str = "table") -> "DirLock":
        """One writer per file: the lock ``.NAME.lock`` beside ``path`` (its folder is created when the
        lock is taken), refused while another live process holds it, taken over when it is stale."""
        real = Path(os.path.realpath(path))  # one lock for every spelling of the path (and a symlink's target)
        lock = cls(real.parent, what, name=f".{real.name}.lock", subject=f"{what} {path}")
        lock._tidy = True  # a refused or failed call leaves no empty folder behind
        return lock

    def _held_key(self) -> str:
        """The key of this lock in :attr:`_held` (the lock file's real path once its folder exists)."""
        return str(self.path.resolve()) if self.directory.exists() else str(self.path.absolute())

    def acquire(self) -> "DirLock":
        key = self._held_key()
        if DirLock._held.get(key):
            DirLock._held[key] += 1
            self._key = key
            return self
        made = self.directory
        while not made.parent.exists() and made.parent != made:
            made = made.parent
        self._made = None if made.exists() else made
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PosymError(f"cannot write to {self.directory}: {exc.strerror or exc}") from exc
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                  "command": " ".join(sys.argv)[:500]}
        if job_id():  # inside a Slurm job: the lock lives as long as the job (even if its node dies)
            record["slurm_jobs"] = [job_id()]
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = read_lock(self.directory, self.name)
                if holder is None:
                    continue  # released meanwhile: try again
                if holder and _is_stale(holder):
                    # take a stale lock over atomically: only one contender's rename succeeds
                    trash = self.path.with_name(f"{self.name}.stale-{uuid.uuid4().hex[:8]}")
                    try:
                        os.replace(self.path, trash)
                        trash.unlink()
                    except FileNotFoundError:
                        pass
                    continue
                raise self._refusal(holder) from None
            except OSError as exc:
                raise PosymError(f"cannot write to {self.directory}: {exc.strerror or exc}") from exc
            with os.fdopen(fd, "w") as fh:
                json.dump(record, fh)
            self._owner = True
            DirLock._held[key] = 1
            self._key = key
            return self
        raise PosymError(f"could not lock {self.directory}: the lock file keeps changing; try again")

    def _refusal(self, holder: dict) -> PosymError:
        """The one-line error for a lock that the live ``holder`` has."""
        since = holder.get("started")
        when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
        who = f"process {holder.get('pid', '?')} on {holder.get('host', '?')}{when}" if holder else "another process"
        jobs = holder.get("slurm_jobs") or []
        if jobs and holder.get("submission"):
            shown = ",".join(map(str, jobs[:6])) + (",…" if len(jobs) > 6 else "")
            return PosymError(f"{self.subject} is in use by Slurm jobs {shown} (submitted by {who}); wait for them "
                              f"(posym status {self.directory}) or scancel them")
        return PosymError(f"{self.subject} is in use by {who}; wait for it to finish (or, if that process is gone, "
                          f"delete {self.path})")

    def check_free(self) -> "DirLock":
        """PosymError (the refusal :meth:`acquire` would give) when another live process holds the lock
        now; creates nothing. For a check before slow work that comes before the lock is taken."""
        holder = read_lock(self.directory, self.name)
        key = self._held_key()
        if holder is not None and not DirLock._held.get(key) and not (holder and _is_stale(holder)):
            raise self._refusal(holder)
        return self

    def hold_for_jobs(self, jobs: list[str], **fields: object) -> None:
        """Name the Slurm ``jobs`` that write for this holder (and ``fields``, e.g. a submission id) in
        the lock record, rewritten atomically: the lock then stays live while any of them is queued or
        running, also after this process exits (module docstring)."""
        if not self._owner:
            raise PosymError(f"{self.path} is not held by this process")
        record = {**(read_lock(self.directory, self.name) or {}), **fields, "slurm_jobs": [str(j) for j in jobs]}
        write_text_atomic(self.path, json.dumps(record), mkdir=False)

    def release(self) -> None:
        """Remove the lock file (the last release in this process), unless Slurm jobs named by
        :meth:`hold_for_jobs` still run: then they hold it."""
        key = getattr(self, "_key", None)
        if key is None:
            return
        DirLock._held[key] -= 1
        if DirLock._held[key] > 0:
            return
        del DirLock._held[key]
        if self._owner:
            holder = read_lock(self.directory, self.name)
            if holder and holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
                jobs = [j for j in holder.get("slurm_jobs") or [] if j != job_id()]
                if not jobs or queued(jobs) == {}:
                    self.path.unlink(missing_ok=True)
            self._owner = False
            if self._tidy and self._made is not None:
                self._remove_empty_folders()

    def _remove_empty_folders(self) -> None:
        """rmdir the folders :meth:`acquire` created (``directory`` up to ``_made``) that are empty."""
        d = self.directory
        while True:
            try:
                d.rmdir()  # only an empty folder
            except OSError:
                return
            if d == self._made or d.parent == d:
                return
            d = d.parent

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def live_holder(directory: str | os.PathLike) -> dict | None:
    """The holder record of ``directory``'s lock when a live process other than this one holds it
    (``{}`` for a lock being written or unreadable), else None (no lock, a stale one, or ours)."""
    holder = read_lock(directory)
    if holder is None or (holder and _is_stale(holder)):
        return None
    if holder and holder.get("host") == socket.gethostname() and holder.get("pid") == os.getpid():
        return None
    return holder


def _run_containing(path: Path) -> Path | None:
    return path if is_run_dir(path) else enclosing_run(path)


def _training(run: Path, holder: dict) -> str:
    return f"run {run} is still training (process {holder.get('pid', '?')})"


def refuse_live_outputs(paths: "list[str | os.PathLike]") -> None:
    """PosymError (before any work) if an output file would land in a run directory, or under one,
    whose writer is still running: an analysis never writes into a run in progress."""
    for d in dict.fromkeys(Path(p).parent for p in paths):
        run = _run_containing(d)
        holder = live_holder(run) if run is not None else None
        if holder is not None:
            raise PosymError(f"{_training(run, holder)}; analyse a finished run, or pass --out elsewhere")


def in_progress_note(path: str | os.PathLike, step: int | None) -> str:
    """A line for an analysis summary when the run of ``path`` (a run or checkpoint folder) is still
    being trained: the result is of checkpoint ``step``, not of the finished run ("" otherwise)."""
    run = _run_containing(Path(path))
    holder = live_holder(run) if run is not None else None
    if holder is None:
        return ""
    at = f"step {step}" if step is not None else "its newest checkpoint"
    return f"note: {_training(run, holder)}; this analysed {at}, not the finished run"


__all__ = ["DirLock", "LOCK_FILE", "in_progress_note", "live_holder", "read_lock", "refuse_live_outputs"]
