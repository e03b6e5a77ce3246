"""Δ(n) and the attention weight on the correct key of the Index and Retrieval constructions under an
inference-time intervention (SPEC §4; Paper A Thm. 3.2, Lemma F.1; docs/interventions.md "Theory").

Each construction (:mod:`posym.theory.constructions`) is one 2-D RoPE plane with one angle ``θ``. An
intervention reaches this module as plain numbers (:class:`Effect`; the verb builds it from the
canonical string), never as a model change:

* ``logit_scale`` ``s(n)``: the query's logits times ``s(n)`` (temperature);
* ``base``: another RoPE base ``b′`` (rope-base, ntk). The construction's ``θ`` stands for the RoPE
  frequency ID ``i`` of a rotary dim ``d`` at base ``b`` whose angle ``b^(−2(i−1)/d)`` is closest to
  ``θ`` (log scale, :func:`frequency_id`); that frequency moves to ``b′^(−2(i−1)/d)``, so the RoPE
  angle per unit of distance becomes ``r·θ`` with ``r = (b′/b)^(−2(i−1)/d)`` (:func:`rope_ratio`);
* ``position_scale`` ``c(n)``: positions times ``c`` (interpolation), so a distance ``s`` rotates by
  ``s·c·θ`` (``r = c``);
* ``freq_ratio`` ``r_i``: the angle of frequency ID ``i`` times ``r_i`` (YaRN's per-frequency blend
  of ×1 and ×1/F), so a distance ``s`` rotates by ``s·r_i·θ``;
* ``keep``: the kept frequency IDs (freq-mask). If ``i`` is dropped the plane contributes nothing:
  every logit is 0 (``Δ = 0``, uniform attention).

**Only the rotation moves; what the weights encode stays.** Index's integer query ``v′`` is the weight
vector ``u(−v′θ)`` (a rotation by the construction's own ``θ``), so with ``r ≠ 1`` the logit of the key
at distance ``s`` is ``cos((s·r − v′)θ)``: the correct key (``s = v′``) falls to ``cos(v′(r − 1)θ)`` and
another key can win. Retrieval's weights encode letters only (angles ``mω``), so its logit
``cos(mω + s·rθ)`` is the untouched construction with ``θ′ = rθ``.

**Δ(n)** is the worst case over valid inputs of length ``n`` (as the ``delta`` column of
:func:`~posym.theory.discrepancy.discrepancy_table`) of the *signed* margin of the correct key: its
logit minus the largest other logit (negative: some input makes the head prefer a wrong key). Where the
correct key is the unique arg-max (every untouched case that table covers) this is the discrepancy
``Δ``, and identity parameters reproduce the table's value bit for bit. Temperature gives exactly
``s(n)·Δ`` (``s ≥ 0``; to rounding): the floored log form (the default, ``s ≥ 1``) and SSMax
always, the unfloored one (``floor=0``) where ``1 + β·ln(n/n_train) ≥ 0``. Index enumerates the query offsets ``v′ = 0..n−1`` (as
:func:`~posym.theory.discrepancy.index_deltas`), Retrieval the match distance with the worst letter
at every other distance (as :func:`~posym.theory.discrepancy.retrieval_deltas`; no ``θ < ω/(2n)``
restriction here: past it the margin turns negative).

**Weight** is the worst case over the same inputs of the softmax weight on the correct key at inverse
temperature ``β`` (logits × ``s(n)`` × ``β``); by default ``β`` is the construction's own Lemma F.1 rule
at the training length ``n0`` (17 for posym runs): ``lemma_f1_beta(Δ(n0), n0, eps*)`` with ``eps* = 1/4`` (Index) and
``1/8`` (Retrieval) (:func:`construction_beta`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from posym.errors import PosymError
from posym.model.rope import angles
from posym.theory.constructions import IndexConstruction, RetrievalConstruction, lemma_f1_beta
from posym.theory.discrepancy import check_parameters, index_delta, retrieval_delta

MECHANISMS: tuple[str, ...] = ("index", "retrieval")
#: Lengths of :func:`intervened_table` by default: the training length 17 to +5,000 (log-spaced) with
#: the added lengths +0, +100, +1,000, +5,000 of Fig. 5B.
DEFAULT_LENGTHS: tuple[int, ...] = tuple(sorted({int(x) for x in np.unique(np.round(np.geomspace(17, 5017, 40)))}
                                                | {17, 117, 1017, 5017}))
_CHUNK = 1 << 21  # logits per block of the Index enumeration (16 MB of float64)

Scale = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Effect:
    """An intervention in plain numbers: ``logit_scale(n)`` and ``position_scale(n)`` map lengths
    ``[N]`` to factors ``[N]`` (None = 1), ``base`` a new RoPE base, ``keep`` the kept frequency IDs
    (None = all), ``freq_ratio(i)`` the factor on the angle of frequency ID ``i`` (None = 1; YaRN)."""

    logit_scale: Scale | None = None
    position_scale: Scale | None = None
    base: float | None = None
    keep: tuple[int, ...] | None = None
    freq_ratio: Callable[[int], float] | None = None


def frequency_id(theta: float, rotary_dim: int, base: float) -> int:
    """The RoPE frequency ID ``i`` (1 = fastest) of rotary dim ``d`` at ``base`` whose angle
    ``base^(−2(i−1)/d)`` is closest to ``theta`` on a log scale."""
    if not (theta > 0 and math.isfinite(theta)):
        raise PosymError(f"theta must be positive and finite to map it to a RoPE frequency, got {theta}")
    g = angles(int(rotary_dim), float(base)).numpy()
    return int(np.argmin(np.abs(np.log(g) - math.log(theta)))) + 1


def rope_ratio(freq_id: int, rotary_dim: int, base: float, new_base: float) -> float:
    """``θ_i′ / θ_i = (new_base / base)^(−2(i−1)/d)``: how a base change scales frequency ID ``i``
    (exactly 1 for ``new_base == base`` and for ``i = 1``)."""
    if not (new_base > 0 and math.isfinite(new_base) and base > 0 and math.isfinite(base)):
        raise PosymError(f"RoPE bases must be positive and finite, got base={base}, new base={new_base}")
    return float((new_base / base) ** (-2.0 * (freq_id - 1) / rotary_dim))


def construction_beta(mechanism: str, theta: float, alphabet: int, n0: int) -> float:
    """The construction's own inverse temperature at the training length ``n0`` (Lemma F.1 rule, module doc)."""
    if mechanism == "index":
        return lemma_f1_beta(index_delta(n0, theta), n0, IndexConstruction.EPS)
    if mechanism == "retrieval":
        return lemma_f1_beta(retrieval_delta(n0, theta, alphabet), n0, RetrievalConstruction.EPS)
    raise PosymError(f"unknown mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}")


def _lse(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=axis, keepdims=True))).squeeze(axis)


def index_under(n: int, theta: float, *, logit_scale: float = 1.0, rope_scale: float = 1.0, kept: bool = True,
                beta: float = 1.0, max_offset: int | None = None) -> tuple[float, float]:
    """Index at length ``n``: ``(Δ, weight)`` — worst signed margin of the correct key and worst softmax
    weight on it at inverse temperature ``beta`` over query offsets ``v′ = 0..n−1`` (or ``..max_offset``:
    the number task's integers stop at 16); the key at distance ``s`` has logit
    ``logit_scale·cos((s·rope_scale − v′)θ)`` (0 if not ``kept``)."""
    if n < 2:
        raise PosymError(f"length must be >= 2, got {n}")
    s = np.arange(n - 1, -1, -1)  # distance of key j = 0..n-1 (the order of index_query_logits)
    vmax = n if max_offset is None else min(n, int(max_offset) + 1)
    rows = max(1, _CHUNK // n)
    worst_delta, worst_weight = math.inf, math.inf
    for v0 in range(0, vmax, rows):
        v = np.arange(v0, min(vmax, v0 + rows))[:, None]
        logits = logit_scale * np.cos((s * rope_scale - v) * theta) if kept else np.zeros((len(v), n))
        correct = n - 1 - v  # column of the key at distance v'
        c = np.take_along_axis(logits, correct, 1)[:, 0]
        others = logits.copy()
        np.put_along_axis(others, correct, -np.inf, 1)
        worst_delta = min(worst_delta, float((c - others.max(1)).min()))
        x = beta * logits
        worst_weight = min(worst_weight, float(np.exp(beta * c - _lse(x)).min()))
    return worst_delta, worst_weight


def retrieval_under(n: int, theta: float, alphabet: int = 8, *, logit_scale: float = 1.0, rope_scale: float = 1.0,
                    kept: bool = True, beta: float = 1.0) -> tuple[float, float]:
    """Retrieval at length ``n``: ``(Δ, weight)`` over match distances ``s* = 1..n−1`` with the worst
    letter ``m ≠ 0`` at every other distance; logit ``logit_scale·cos(mω + s·rope_scale·θ)`` (0 if not ``kept``)."""
    if n < 2:
        raise PosymError(f"Retrieval needs length >= 2 (a match and the query), got {n}")
    omega = 2 * math.pi / alphabet
    s = np.arange(n, dtype=np.float64)
    m = np.arange(1, alphabet, dtype=np.float64)
    if kept:
        comp = (logit_scale * np.cos(m[None, :] * omega + (s * rope_scale)[:, None] * theta)).max(1)
        star = np.arange(1, n)
        match = logit_scale * np.cos((star * rope_scale) * theta)
    else:
        comp, match = np.zeros(n), np.zeros(n - 1)
    # the largest competitor outside s*: the top of comp unless s* is its arg-max, then the second
    order = np.argsort(comp)[::-1]
    top, second = comp[order[0]], comp[order[1]]
    rival = np.where(np.arange(1, n) == order[0], second, top)
    delta = float((match - rival).min())
    # log of the competitors' softmax mass outside s*: prefix/suffix log-sum-exp (stable, O(n))
    x = beta * comp
    pre = np.logaddexp.accumulate(np.concatenate(([-np.inf], x)))[:-1]  # pre[k] = lse(x[:k])
    suf = np.logaddexp.accumulate(np.concatenate(([-np.inf], x[::-1])))[:-1][::-1]  # suf[k] = lse(x[k+1:])
    rest = np.logaddexp(pre, suf)[1:]  # s* = 1..n-1
    with np.errstate(over="ignore"):  # a wrong key far ahead: weight 0
        weight = 1.0 / (1.0 + np.exp(rest - beta * match))
    return delta, float(weight.min())


def _scale(f: Scale | None, ns: np.ndarray, what: str) -> np.ndarray:
    if f is None:
        return np.ones(len(ns))
    out = np.asarray(f(ns), dtype=np.float64).reshape(-1)
    if out.shape != ns.shape or not np.isfinite(out).all():
        raise PosymError(f"{what} must give one finite factor per length")
    return out


def check_lengths(ns: Iterable[int]) -> np.ndarray:
    """Lengths as a sorted int array; one-line PosymError unless every one is an integer >= 2."""
    try:
        arr = np.array(sorted({int(n) for n in ns}), dtype=np.int64)
    except (TypeError, ValueError):
        raise PosymError(f"lengths must be integers >= 2, got {ns!r}") from None
    if arr.size == 0 or arr[0] < 2:
        raise PosymError(f"lengths must be integers >= 2 (a query and a key), got {arr.tolist()}")
    return arr


def check_frame(theta_index: float, theta_retrieval: float, alphabet: int, n0: int, rotary_dim: int,
                base: float) -> tuple[dict[str, float], dict[str, int], dict[str, float]]:
    """Each construction's ``θ``, frequency ID and inverse temperature (module doc), or a one-line
    PosymError for parameters :func:`intervened_table` cannot use (cheap: call it before any work)."""
    check_parameters(theta_index, theta_retrieval, alphabet, n0, n0)
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim % 2:
        raise PosymError(f"rotary dim must be a positive even integer, got {rotary_dim!r}")
    thetas = {"index": float(theta_index), "retrieval": float(theta_retrieval)}
    ids = {k: frequency_id(t, rotary_dim, base) for k, t in thetas.items()}
    betas = {k: construction_beta(k, t, alphabet, n0) for k, t in thetas.items()}
    return thetas, ids, betas


def intervened_table(effects: Mapping[str, Effect], lengths: Iterable[int] = DEFAULT_LENGTHS, *,
                     rotary_dim: int, base: float, theta_index: float = 0.8, theta_retrieval: float = 0.0027,
                     alphabet: int = 8, n0: int, index_max_offset: int | None = None,
                     progress: bool = False) -> pd.DataFrame:
    """Tidy table of both constructions under each named effect: ``intervention`` (the name),
    ``mechanism``, ``n``, ``delta`` (worst signed margin of the correct key), ``weight`` (worst softmax
    weight on it), ``logit_scale`` ``s(n)``, ``rope_scale`` ``r`` (angle per distance = ``r·θ``),
    ``kept``, ``freq_id`` (the ID of ``θ`` in rotary dim ``rotary_dim`` at ``base``), ``theta``, ``beta``.
    ``n0``: the training length where each construction's ``β`` is set (17 for posym runs);
    ``index_max_offset`` bounds Index's query offsets (default: every ``v′ < n``, as Δ(n))."""
    from tqdm.auto import tqdm

    ns = check_lengths(lengths)
    thetas, ids, betas = check_frame(theta_index, theta_retrieval, alphabet, n0, rotary_dim, base)
    rows = []
    work = [(name, e, k) for name, e in effects.items() for k in MECHANISMS]
    for name, effect, mech in tqdm(work, desc="theory under interventions", disable=not progress):
        s = _scale(effect.logit_scale, ns, f"{name}: the logit scale")
        c = _scale(effect.position_scale, ns, f"{name}: the position scale")
        ratio = 1.0 if effect.base is None else rope_ratio(ids[mech], rotary_dim, base, effect.base)
        if effect.freq_ratio is not None:
            ratio *= float(effect.freq_ratio(ids[mech]))
        kept = effect.keep is None or ids[mech] in effect.keep
        for n, sn, cn in zip(ns.tolist(), s, c):
            r = ratio * cn
            kw = dict(logit_scale=float(sn), rope_scale=float(r), kept=kept, beta=betas[mech])
            d, w = (index_under(n, thetas[mech], max_offset=index_max_offset, **kw) if mech == "index"
                    else retrieval_under(n, thetas[mech], alphabet, **kw))
            rows.append((name, mech, n, d, w, float(sn), float(r), kept, ids[mech], thetas[mech], betas[mech]))
    return pd.DataFrame(rows, columns=["intervention", "mechanism", "n", "delta", "weight", "logit_scale",
                                       "rope_scale", "kept", "freq_id", "theta", "beta"])


__all__ = ["MECHANISMS", "DEFAULT_LENGTHS", "Effect", "frequency_id", "rope_ratio", "construction_beta",
           "index_under", "retrieval_under", "check_lengths", "check_frame", "intervened_table"]
