"""The worker processes of ``posym reproduce``: run a stage without raising, start workers that die
with their parent (even after SIGKILL), and an in-process stand-in for ``jobs=1``."""

from __future__ import annotations

import os
import sys
import time
import traceback
from concurrent.futures import Future
from typing import Any, Callable

from posym.errors import PosymError
from posym.progress import LineProgress, set_bar_position


def call_stage(fn: Callable[..., dict], ctx: Any, args: tuple) -> dict:
    """Run ``fn(ctx, *args)`` (one stage); never raises (the error, with its traceback, comes back in the
    result). ``ctx.threads`` sets the torch threads of a worker."""
    t0 = time.perf_counter()
    try:
        if getattr(ctx, "threads", None):
            import torch

            torch.set_num_threads(ctx.threads)
        info = fn(ctx, *args)
        return {"ok": True, "info": info, "seconds": time.perf_counter() - t0}
    except BaseException as exc:  # reported by the parent, which decides
        if isinstance(exc, KeyboardInterrupt):
            raise
        user_error = isinstance(exc, PosymError)
        msg = str(exc) if user_error else f"{type(exc).__name__}: {exc}"
        return {"ok": False, "error": msg, "traceback": "" if user_error else traceback.format_exc(),
                "seconds": time.perf_counter() - t0}


def _die_with_parent(parent: int) -> None:
    """Make this worker exit when the reproduce process that started it dies, even by SIGKILL: the
    kernel's parent-death signal where available (Linux), and a watchdog thread everywhere."""
    import signal
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="posym-parent-watch", daemon=True).start()


def worker_init(counter, tty: bool, parent: int | None = None) -> None:
    """Worker process start: die with the parent; give its tqdm bars their own terminal line (when
    stderr is a terminal), else make them plain progress lines (:class:`posym.progress.LineProgress`)."""
    if parent is not None:
        _die_with_parent(parent)
    import threading

    from tqdm import tqdm

    # a thread lock for this process's bars: tqdm's default creates a multiprocessing lock (a named
    # semaphore), which a worker terminated on Ctrl-C leaves behind ("leaked semaphore" warnings)
    tqdm.set_lock(threading.RLock())
    with counter.get_lock():
        idx = counter.value
        counter.value += 1
    if tty:
        set_bar_position(idx)  # (TQDM_POSITION would be read too late: tqdm is imported by now)
    elif not isinstance(sys.stderr, LineProgress):
        sys.stderr = LineProgress(sys.stderr)  # type: ignore[assignment]


class Inline:
    """A stand-in executor running each job at submit time, in this process."""

    def submit(self, fn, *args) -> Future:
        f: Future = Future()
        try:
            f.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001
            f.set_exception(exc)
        return f

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def terminate_workers(pool: Any) -> None:
    """Terminate the worker processes of a ``ProcessPoolExecutor`` (no-op for :class:`Inline`)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    for proc in procs:
        try:
            proc.terminate()
        except (OSError, AttributeError):  # already gone
            pass
    for proc in procs:
        proc.join(timeout=5)


__all__ = ["Inline", "call_stage", "terminate_workers", "worker_init"]
