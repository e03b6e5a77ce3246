"""Resources: sizes checked before allocation (a clear error with the estimate instead of an
out-of-memory kill), and the measured cost of the quick reproduction."""

from __future__ import annotations

import os

from posym.errors import PosymError


#: What ``posym reproduce --preset quick`` costs (the README and ``reproduce --help`` quote this text).
#: Measured: 966 CPU-seconds (Dec 2026, /usr/bin/time, on a 2-core machine shared at load average
#: 9–12, where it took 49 min wall); 16 min 15 s wall on an idle 2-core CPU before the log-likelihood
#: stage (≈ 2 min more) was added (docs/reproduction.md).
QUICK_REPRODUCTION_TIME = "≈ 16 CPU-minutes; ≈ 18 min wall on an idle 2-core CPU, longer on a loaded one"


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (``MemAvailable`` on Linux), or None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _fmt(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def require_memory(nbytes: float, what: str, fraction: float = 0.8, hint: str = "use smaller sizes",
                   available: int | None = None) -> None:
    """PosymError if ``what`` needs more than ``fraction`` of the available memory (estimate ``nbytes``;
    ``available``: bytes free where it runs, default this machine's :func:`available_memory`, e.g. a
    GPU's free memory instead); ``hint`` ends the message (what to do)."""
    avail = available_memory() if available is None else available
    if avail is not None and nbytes > fraction * avail:
        raise PosymError(f"{what} needs about {_fmt(nbytes)} of memory, more than this machine has free "
                         f"({_fmt(avail)}); {hint}")


__all__ = ["QUICK_REPRODUCTION_TIME", "available_memory", "require_memory"]
