"""Statistics of head-level effects (issue 37; docs/statistics.md): every effect is paired over the
same prompts against its matched random control.

* :func:`paired_bootstrap` — the mean per-prompt difference ``a − b`` (``a``: the outcome of each prompt
  under the typed head set's intervention, ``b``: the same prompt under its matched random set, or
  the untouched model) with a percentile bootstrap interval over prompts (Efron & Tibshirani 1993,
  ch. 13). Pairing removes the between-prompt variance the two conditions share.
* :func:`control_p_value` — the permutation p-value of an observed effect against the effects of
  ``K`` matched random head sets (each drawn with as many heads per layer as the typed set: a
  permutation test stratified, "clustered", by layer): ``p = (1 + #{null ≥ observed}) / (1 + K)``
  (one-sided: the typed set's effect larger than its controls'; Phipson & Smyth 2010, never 0).
  Its floor is ``1 / (1 + K)``: with 99 random sets no p can be below 0.01, whatever the effect.
* :func:`benjamini_hochberg` / :func:`bh_reject` — the step-up false-discovery-rate correction over
  the cells of a study (Benjamini & Hochberg 1995): adjusted ``p_(i) = min_{j ≥ i} m·p_(j) / j``,
  capped at 1; a cell is a discovery at level ``q`` when its adjusted p is ``≤ q``.
* :func:`fisher_combined` — one p from the p-values of independent replicates (Fisher 1932: ``X = −2 Σ ln p_i``,
  χ² with ``2m`` degrees of freedom under the null); valid, conservative, for permutation p-values (which are
  super-uniform: ``P(p ≤ u) ≤ u``).
* :func:`format_p` — a permutation p as printed (``< 1/K`` at the floor).

NumPy only; floor 2 (docs/architecture.md), above the ``checks`` it uses. Bad input is one :class:`~posym.errors.PosymError` line.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Hashable, Iterable, TypeVar

import numpy as np

from posym.checks import check_float, check_int, check_positive_int
from posym.errors import PosymError

#: Bootstrap resamples drawn per chunk (bounds the ``[chunk, n]`` index array in memory).
_BOOT_CHUNK = 256
#: Absolute slack of ``null ≥ observed`` (effects computed as float means of the same counts tie exactly
#: in exact arithmetic; the same slack as :func:`posym.heads.head_types.type_correlations`).
_TIE = 1e-12


def _vector(x: Any, name: str) -> np.ndarray:
    """``x`` as a finite float64 1-D array with at least one value; PosymError otherwise."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise PosymError(f"{name} must be a 1-D array of numbers") from None
    if arr.ndim != 1 or arr.size == 0:
        raise PosymError(f"{name} must be a non-empty 1-D array (one value per prompt), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise PosymError(f"{name} holds NaN or inf: drop those prompts from both conditions first")
    return arr


def paired_bootstrap(a: Any, b: Any, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Mean paired difference and its percentile bootstrap interval over prompts.

    ``a``, ``b``: ``[n]`` per-prompt outcomes of the two conditions on the *same* prompts (correct 0/1,
    the answer's rank, a logit), prompt ``i`` at index ``i`` in both. Resamples the ``n`` differences
    ``a − b`` with replacement ``n_boot`` times (seeded) and returns ``(mean_diff, lo, hi)``: the mean of
    ``a − b`` and the ``(1 − level)/2`` and ``(1 + level)/2`` quantiles of the resampled means. With one
    prompt the interval is the point (Efron & Tibshirani 1993, ch. 13).
    """
    a, b = _vector(a, "a"), _vector(b, "b")
    if a.shape != b.shape:
        raise PosymError(f"paired outcomes need one value per prompt in both conditions, got {a.size} and {b.size}")
    n_boot = check_positive_int(n_boot, "n_boot")
    level = check_float(level, "level", 0.0, 1.0, lo_open=True)
    if level >= 1.0:
        raise PosymError(f"level={level!r} must be below 1 (e.g. 0.95)")
    d = a - b
    rng = np.random.default_rng(check_int(seed, "seed"))
    means = np.empty(n_boot)
    for start in range(0, n_boot, _BOOT_CHUNK):
        stop = min(start + _BOOT_CHUNK, n_boot)
        means[start:stop] = d[rng.integers(0, d.size, size=(stop - start, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(d.mean()), float(lo), float(hi)


def control_p_value(observed: float, null: Any, *, two_sided: bool = False) -> float:
    """Permutation p-value of ``observed`` against ``null`` ``[K]``, the same effect measured on ``K``
    matched random head sets (as many heads per layer as the typed set, drawn from the other heads).

    One-sided (default): ``(1 + #{null ≥ observed}) / (1 + K)`` — is the typed set's effect larger than
    its controls'? (Orient the effect so that larger means "the set matters more", e.g. the accuracy
    drop.) ``two_sided``: ``min(1, 2·min(p_≥, p_≤))`` with ``p_≤ = (1 + #{null ≤ observed}) / (1 + K)``,
    which does not assume a null symmetric about 0. The smallest p is ``1 / (1 + K)`` (:func:`format_p`).
    """
    if isinstance(observed, bool) or not isinstance(observed, numbers.Real) or not np.isfinite(float(observed)):
        raise PosymError(f"observed must be a finite number, got {observed!r}")
    obs = float(observed)
    null = _vector(null, "null")
    k = null.size
    upper = (1 + int((null >= obs - _TIE).sum())) / (1 + k)
    if not two_sided:
        return upper
    lower = (1 + int((null <= obs + _TIE).sum())) / (1 + k)
    return min(1.0, 2 * min(upper, lower))


def _pvalues(pvalues: Any) -> np.ndarray:
    try:
        p = np.asarray(pvalues, dtype=np.float64)
    except (TypeError, ValueError):
        raise PosymError("p-values must be numbers in [0, 1] (NaN for a missing one)") from None
    if p.ndim != 1:
        raise PosymError(f"p-values must be a 1-D array (one per cell), got shape {p.shape}")
    ok = ~np.isnan(p)
    if ((p[ok] < 0) | (p[ok] > 1)).any():
        raise PosymError(f"p-values must be in [0, 1], got {p[ok][(p[ok] < 0) | (p[ok] > 1)][:3].tolist()}")
    return p


def benjamini_hochberg(pvalues: Any) -> np.ndarray:
    """Benjamini–Hochberg (1995) adjusted p-values ``[m]`` of ``pvalues`` ``[m]``, in the input order.

    With the ``m`` non-NaN p-values sorted, ``p̃_(i) = min(1, min_{j ≥ i} m·p_(j) / j)`` (the step-up
    rule: monotone in ``p``); NaN stays NaN and does not count in ``m``. Rejecting every cell with
    ``p̃ ≤ q`` controls the false discovery rate at ``q`` for independent (or positively dependent)
    tests — the same cells as :func:`bh_reject`.
    """
    p = _pvalues(pvalues)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    scaled = p[order] * m / np.arange(1, m + 1)
    out[order] = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    return out


def bh_reject(pvalues: Any, q: float = 0.05) -> np.ndarray:
    """The cells ``[m]`` (bool) that Benjamini–Hochberg rejects at false discovery rate ``q`` in (0, 1):
    adjusted p ``≤ q`` (:func:`benjamini_hochberg`); NaN is never rejected."""
    q = check_float(q, "q", 0.0, 1.0, lo_open=True)
    adj = benjamini_hochberg(pvalues)
    return ~np.isnan(adj) & (adj <= q)


def fisher_combined(pvalues: Any) -> float:
    """Fisher's (1932) combined p of ``m`` independent p-values ``[m]`` (NaN ignored; NaN when none): the
    upper tail of χ² with ``2m`` degrees of freedom at ``X = −2 Σ ln p_i``, in closed form
    ``exp(−X/2) Σ_{i<m} (X/2)^i / i!`` (an even number of degrees of freedom). A p of 0 gives 0."""
    p = _pvalues(pvalues)
    p = p[~np.isnan(p)]
    if p.size == 0:
        return float("nan")
    if (p == 0).any():
        return 0.0
    half = -np.log(p).sum()  # X / 2
    term, total = 1.0, 1.0
    for i in range(1, p.size):
        term *= half / i
        total += term
    return float(min(1.0, np.exp(-half) * total))


def format_p(p: float, n_null: int, at_floor: bool | None = None) -> str:
    """A permutation p as printed: ``< 1/n_null`` (e.g. ``< 0.001`` for 1,000 shuffles) when no shuffle
    reached the statistic (``at_floor``; default: ``p`` equals the floor ``1 / (1 + n_null)``), else
    ``p`` to 3 significant digits; ``nan`` for a missing p."""
    if p is None or not np.isfinite(p):
        return "nan"
    if at_floor is None:
        at_floor = abs(float(p) * (1 + int(n_null)) - 1) < 1e-9
    return f"< {1 / int(n_null):.3g}" if at_floor else f"{float(p):.3g}"


H = TypeVar("H", bound=Hashable)


def distinct_draws(draw: Callable[[int], H], want: int, seed: int, *, seen: Iterable[H] = (), limit: int | None = None,
                   error: str = "could not draw enough distinct controls") -> list[tuple[int, H]]:
    """The first ``want`` distinct values of ``draw(seed), draw(seed + 1), …``, each with the seed that drew it
    (a value in ``seen`` or drawn before is skipped): the controls of a matched-control test, which must be
    distinct so that the p floor is the exact one (:func:`control_p_value`). One-line PosymError ``error`` after
    ``1000·max(limit or want, 10)`` seeds (a guard: unreachable when ``want`` is at most the number of values)."""
    out: list[tuple[int, H]] = []
    taken = set(seen)
    s = seed
    while len(out) < want:
        value = draw(s)
        if value not in taken:
            taken.add(value)
            out.append((s, value))
        s += 1
        if s - seed > 1000 * max(limit or want, 10):
            raise PosymError(error)
    return out


__all__ = ["benjamini_hochberg", "bh_reject", "control_p_value", "distinct_draws", "fisher_combined", "format_p",
           "paired_bootstrap"]
