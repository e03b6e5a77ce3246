"""Discrepancy of attention logits (SPEC §4; Paper A Theorem 3.2, Fig. 5A).

``Δ(σ)`` = largest logit − largest logit outside the arg-max set (of the query at the last position
``n-1`` of an input ``σ`` of length ``n``; keys ``0..n-1``, the query included, as in causal attention).
It is the margin that Lemma F.1 needs: the smaller ``Δ``, the larger the inverse temperature a softmax
head needs to act like hard attention.

**Which max over inputs (our interpretation).** SPEC writes ``Δ(n) = max over inputs of length n``.
Read literally (the *best* margin any input achieves) Theorem 3.2 is false for Retrieval: an input whose
non-matching keys all carry letters opposite to the query has a margin near 2 (see ``delta_best`` in
:func:`discrepancy_table`). The theorem bounds the margin the construction must live with, i.e. the
*worst case* over valid inputs of length ``n``; we therefore report

* ``Δ(n) = min over valid inputs of length n of Δ(σ)`` (column ``delta``), and
* ``max over valid inputs`` (column ``delta_best``) for reference.

**Exact computation.**

* Index: every key is the same vector, so the last query's logits depend only on ``n`` and the query
  offset ``v'`` (``v' = 0`` for a letter query, ``1..n-1`` for an integer pointing inside): logit of the
  key at distance ``s = n-1-j`` is ``cos((s - v')θ)``. Enumerating ``v' = 0..n-1`` therefore enumerates
  every input up to equal logit vectors. (Worst case: ``min_{1<=d<=n-1} (1 - cos dθ)``, from ``v' = 0``.)
* Retrieval (valid letter-letter query ``(l, r)``, ``l != r``, unique earlier match at distance
  ``s* in 1..n-1``): the logit at distance ``s`` is ``cos(m_s ω + sθ)`` with ``m_s = φ(left_s) - φ(r)``
  (mod ``A``); ``m_{s*} = 0`` and every other ``m_s`` can be any of ``1..A-1`` independently (earlier
  tokens can be letter-number tokens with any left letter ``!= r``; the query's own key has ``l != r``).
  Under ``θ < ω/(2n)`` the match is the unique arg-max, so
  ``min Δ = min_{s*} [cos(s*θ) - max_{s != s*} max_{m != 0} cos(mω + sθ)]`` and
  ``max Δ = max_{s*} [cos(s*θ) - max_{s != s*} min_{m != 0} cos(mω + sθ)]`` — a closed form over
  ``(s*, s, m)`` that the tests compare with brute-force enumeration of all inputs for small alphabets.

**Bounds (Theorem 3.2).** ``Δ_Index(n) <= min{1 - cos θ, 2π²/n²}`` and, with ``ω = 2π/A`` and
``θ < ω/(2 n0)``, ``Δ_Retrieval(n) <= 1 - cos(ω - nθ)``. With SPEC's convention (length ``n``, query at
``n-1``, largest key distance ``n-1``) the Index bound holds for every ``n``; the Retrieval bound is off
by one: the exact worst case is about ``cos((n-2)θ) - cos(ω-(n-1)θ)``, which exceeds ``1 - cos(ω - nθ)``
by up to ``≈ 2θ·sin ω`` for small ``n`` (until ``(n-2)²θ/2 >~ sin(ω - nθ)``: ``n <= 24`` at θ = 0.0027,
``|ALPH| = 8``), and satisfies ``Δ_Retrieval(n) <= 1 - cos(ω - (n-1)θ)`` for ``n >= 3``, i.e. the theorem
holds exactly when ``n`` counts the tokens *before* the query (largest key distance ``n``). Ties (an
Index ``θ`` with ``dθ ≡ 0 mod 2π`` for some ``d < n``) are put in the arg-max set, as the definition says;
the construction then fails (see ``IndexConstruction``).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from posym.errors import PosymError


def discrepancy_of_logits(logits, mask=None, tol: float = 1e-12):
    """``Δ`` over the last dim of ``logits [..., n]``: max − (largest logit more than ``tol`` below it).

    Entries that are ``-inf``/NaN or where ``mask`` is False are ignored (e.g. a causal mask). Returns
    ``+inf`` where every kept logit ties with the max (empty complement of the arg-max set) and NaN
    where nothing is kept. Accepts numpy arrays or torch tensors; returns the same kind, shape ``[...]``.
    For a trained head pass the query's pre-softmax logits (``scale`` included).
    """
    is_torch = isinstance(logits, torch.Tensor)
    x = logits.detach().double().cpu().numpy() if is_torch else np.asarray(logits, dtype=np.float64)
    keep = np.isfinite(x)
    if mask is not None:
        m = mask.detach().cpu().numpy() if isinstance(mask, torch.Tensor) else np.asarray(mask)
        keep = keep & np.broadcast_to(m.astype(bool), x.shape)
    xk = np.where(keep, x, -np.inf)
    top = xk.max(axis=-1, keepdims=True)
    rest = np.where(keep & (xk < top - tol), xk, -np.inf).max(axis=-1)
    top = top[..., 0]
    with np.errstate(invalid="ignore"):
        out = np.where(np.isfinite(rest), top - rest, np.inf)
    out = np.where(keep.any(axis=-1), out, np.nan)
    return torch.from_numpy(out) if is_torch else out


# ---- Index ----------------------------------------------------------------------------------------


def index_query_logits(n: int, theta: float, max_offset: int | None = None) -> np.ndarray:
    """Logits of the last query over keys ``j = 0..n-1`` for each query offset ``v' = 0..V``:
    ``[V+1, n]`` with row ``v'`` = ``cos((n-1-j-v')θ)`` (``v' = 0``: letter query; ``V = n-1`` or ``max_offset``)."""
    if n < 1:
        raise PosymError(f"length must be >= 1, got {n}")
    vmax = n - 1 if max_offset is None else min(int(max_offset), n - 1)
    v = np.arange(vmax + 1)[:, None]
    s = (n - 1 - np.arange(n))[None, :]
    return np.cos((s - v) * float(theta))


def index_deltas(n: int, theta: float, max_offset: int | None = None) -> np.ndarray:
    """``Δ`` of the last query for every offset ``v' = 0..`` (``[V+1]``; v' = 0 is a letter query)."""
    return discrepancy_of_logits(index_query_logits(n, theta, max_offset))


def index_delta(n: int, theta: float, worst: bool = True, max_offset: int | None = None) -> float:
    """Exact ``Δ_Index(n)``: min (``worst``) or max over valid inputs of length ``n`` (enumerates ``v'``)."""
    d = index_deltas(n, theta, max_offset)
    return float(d.min() if worst else d.max())


def index_bound(n: int, theta: float) -> float:
    """Theorem 3.2: ``min{1 - cos θ, 2π²/n²}``."""
    return min(1.0 - math.cos(theta), 2 * math.pi**2 / n**2)


# ---- Retrieval ------------------------------------------------------------------------------------


def _retrieval_check(n: int, theta: float, n_letters: int) -> float:
    if n < 2:
        raise PosymError(f"Retrieval needs length >= 2 (a match and the query), got {n}")
    if n_letters < 2:
        raise PosymError(f"Retrieval needs at least 2 letters, got {n_letters}")
    omega = 2 * math.pi / n_letters
    if not 0 <= theta < omega / (2 * n):
        raise PosymError(f"Retrieval needs 0 <= theta < ω/(2n) = {omega / (2 * n):.6g} (n={n}), got {theta}")
    return omega


def retrieval_deltas(n: int, theta: float, n_letters: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Per match distance ``s* = 1..n-1``: ``(worst Δ, best Δ)`` over the other keys' letters (closed form)."""
    omega = _retrieval_check(n, theta, n_letters)
    s = np.arange(n, dtype=np.float64)  # distance of key j = n-1-s from the query
    m = np.arange(1, n_letters, dtype=np.float64)
    comp = np.cos(m[None, :] * omega + s[:, None] * theta)  # [s, m]
    hi, lo = comp.max(1), comp.min(1)  # worst / best letter for a competitor at distance s
    star = np.arange(1, n)
    match = np.cos(star * theta)
    others = np.arange(n)[None, :] != star[:, None]  # [s*, s]
    worst = match - np.where(others, hi[None, :], -np.inf).max(1)
    best = match - np.where(others, lo[None, :], -np.inf).max(1)
    return worst, best


def retrieval_delta(n: int, theta: float, n_letters: int = 8, worst: bool = True) -> float:
    """Exact ``Δ_Retrieval(n)``: min (``worst``) or max over valid inputs of length ``n`` (closed form)."""
    w, b = retrieval_deltas(n, theta, n_letters)
    return float(w.min() if worst else b.max())


def retrieval_bound(n: int, theta: float, n_letters: int = 8) -> float:
    """Theorem 3.2: ``1 - cos(ω - nθ)``, ``ω = 2π/|ALPH|``."""
    return 1.0 - math.cos(2 * math.pi / n_letters - n * theta)


# ---- table, run -----------------------------------------------------------------------------------


def check_parameters(theta_index: float, theta_retrieval: float, alphabet: int, n_max: int, n_min: int = 2) -> None:
    """Refuse (PosymError) parameters :func:`discrepancy_table` cannot use, before any work: finite
    angles, ``2 <= n_min <= n_max`` and Retrieval's ``0 <= θ < ω/(2 n_max)`` (Theorem 3.2)."""
    for name, v in (("theta_index", theta_index), ("theta_retrieval", theta_retrieval)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise PosymError(f"{name} must be a finite number, got {v!r}")
    if n_min < 2 or n_max < n_min:
        raise PosymError(f"need 2 <= n_min <= n_max, got n_min={n_min}, n_max={n_max}")
    _retrieval_check(n_max, theta_retrieval, alphabet)


def discrepancy_table(theta_index: float = 0.8, theta_retrieval: float = 0.0027, alphabet: int = 8,
                      n_max: int = 100, n_min: int = 2) -> pd.DataFrame:
    """Tidy table: ``mechanism`` (index / retrieval), ``n``, ``delta`` (worst case), ``bound``
    (Theorem 3.2), ``delta_best`` (best case over inputs), ``theta``, ``alphabet`` (Retrieval's |ALPH|)."""
    check_parameters(theta_index, theta_retrieval, alphabet, n_max, n_min)
    rows = []
    for n in range(n_min, n_max + 1):
        d = index_deltas(n, theta_index)
        rows.append(("index", n, float(d.min()), index_bound(n, theta_index), float(d.max()), theta_index, np.nan))
    for n in range(n_min, n_max + 1):
        w, b = retrieval_deltas(n, theta_retrieval, alphabet)
        rows.append(("retrieval", n, float(w.min()), retrieval_bound(n, theta_retrieval, alphabet), float(b.max()),
                     theta_retrieval, alphabet))
    return pd.DataFrame(rows, columns=["mechanism", "n", "delta", "bound", "delta_best", "theta", "alphabet"])


__all__ = [
    "check_parameters",
    "discrepancy_of_logits",
    "index_query_logits",
    "index_deltas",
    "index_delta",
    "index_bound",
    "retrieval_deltas",
    "retrieval_delta",
    "retrieval_bound",
    "discrepancy_table",
]
