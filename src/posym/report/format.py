"""One home for the numbers of every table and page: ``mean ± sd`` over seeds or models (one sentinel:
sd is NaN below two values, printed "n/a") and the number formats of the report and the study pages."""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np


def is_finite(v: Any) -> bool:
    """True for a real, finite number (None, text and NaN are not)."""
    try:
        return v is not None and not isinstance(v, bool) and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def mean_sd(values: Iterable) -> tuple[float, float, int]:
    """``(mean, sd, n)`` over the finite values; sd with ddof = 1, NaN when n < 2; mean NaN when n = 0."""
    v = np.array([float(x) if x is not None else np.nan for x in values], dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return math.nan, math.nan, 0
    return float(v.mean()), float(v.std(ddof=1)) if n > 1 else math.nan, n


def fmt_num(v: Any, digits: int = 3, integer: bool = False) -> str:
    """A number with ``digits`` decimals (``integer``: rounded, thousands separated); "—" if missing."""
    if not is_finite(v):
        return "—"
    return f"{float(v):,.0f}" if integer else f"{float(v):.{digits}f}"


def fmt_ms(mean: Any, sd: Any, n: int | None = None, digits: int = 3, integer: bool = False) -> str:
    """``mean ± sd``; sd "n/a" with one seed (or none); "—" without a value; `` (n=N)`` when N > 1."""
    if not is_finite(mean):
        return "—"
    s = fmt_num(sd, digits, integer) if is_finite(sd) else "n/a"
    return f"{fmt_num(mean, digits, integer)} ± {s}" + (f" (n={n})" if n is not None and n > 1 else "")


__all__ = ["fmt_ms", "fmt_num", "is_finite", "mean_sd"]
