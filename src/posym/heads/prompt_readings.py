"""Per-prompt readings of the head scores (SPEC §7).

A mean s_POS of 0.5 over prompts is, for most heads, a head that is positional on half of the
prompts and something else on the rest — per-prompt scores rarely lie strictly between 0.05 and
0.95. :func:`per_prompt_kinds` therefore reads each (prompt, layer, head) with SPEC §3's purity rule
(:func:`posym.heads.dynamics.classify`) and reports, per head, the fraction of prompts on which it is

* ``positional``: ``s_POS >= 1 - γ`` and ``s_SYM <= γ``;
* ``symbolic``: ``s_SYM >= 1 - γ`` and ``s_POS <= γ``;
* ``uninformative``: the query's attention on the swapped keys or blocks (``swap_mass``) is below
  ``min_mass`` — the score is read on almost nothing — or the score is undefined (NaN) (checked first);
* ``mixed``: everything else (``frac_*`` sum to 1),

with the means of ``s_pos``, ``s_sym``, ``entropy`` and ``swap_mass`` over all prompts, and a
percentile bootstrap 95 % interval over prompts for every one of them (``*_lo``, ``*_hi``: prompts
resampled with replacement ``n_boot`` times, the 2.5 % and 97.5 % quantiles of the resampled
statistic).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from posym.checks import check_gamma, check_int, check_positive_int
from posym.constants import GAMMA
from posym.errors import PosymError
from posym.heads.dynamics import classify
from posym.heads.llm_heads import check_min_mass
from posym.heads.scores import HeadScores

#: The per-prompt kinds, in table order.
KINDS: tuple[str, ...] = ("positional", "symbolic", "mixed", "uninformative")
#: Statistics of :func:`per_prompt_kinds` that get a bootstrap interval, in table order.
STATS: tuple[str, ...] = tuple(f"frac_{k}" for k in KINDS) + ("s_pos", "s_sym", "entropy", "swap_mass")
#: Two-sided level of the bootstrap intervals.
CI_LEVEL = 0.95


def prompt_kinds(s_pos: np.ndarray, s_sym: np.ndarray, swap_mass: np.ndarray | None = None, *, gamma: float = GAMMA,
                 min_mass: float = 0.0) -> np.ndarray:
    """The kind of every entry (module doc): object array of :data:`KINDS`, the shape of ``s_pos``."""
    out = classify(s_pos, s_sym, check_gamma(gamma))
    out[np.isnan(np.asarray(s_pos, float)) | np.isnan(np.asarray(s_sym, float))] = "uninformative"  # no swap
    if check_min_mass(min_mass) > 0:
        if swap_mass is None:
            raise PosymError("min_mass needs the swap mass of each prompt; these scores carry none")
        out[np.asarray(swap_mass) < min_mass] = "uninformative"
    return out


def bootstrap_means(values: np.ndarray, n_boot: int = 1000, seed: int = 0,
                    level: float = CI_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean over axis 0 (prompts) of ``values`` [B, ...] ->
    ``(lo, hi)`` [...]: ``n_boot`` resamples of the B prompts with replacement (one set of resamples
    for every column, so columns stay paired)."""
    x = np.asarray(values, dtype=float)
    B = x.shape[0]
    flat = x.reshape(B, -1)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(B, np.full(B, 1.0 / B), size=n_boot).astype(float)  # [n_boot, B]
    means = counts @ flat / B  # [n_boot, cols]
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a], axis=0)
    return lo.reshape(x.shape[1:]), hi.reshape(x.shape[1:])


def per_prompt_kinds(scores: HeadScores, *, gamma: float = GAMMA, min_mass: float = 0.0, tau_index: int = 0,
                     n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Per (layer, head): the fraction of prompts on which the head is positional, symbolic, mixed or
    uninformative, the mean scores, and bootstrap 95 % intervals over prompts (module doc).

    scores: per-prompt :class:`posym.heads.scores.HeadScores` (token or block scores); ``tau_index``
    picks the τ (default the first). ``swap_mass`` is the mass on the swapped keys, or on the blocks
    for block scores. Columns ``layer, head, tau, n_prompts, gamma, min_mass`` then each of
    :data:`STATS` followed by its ``_lo`` and ``_hi``.
    """
    if not isinstance(scores, HeadScores):
        raise PosymError(f"per_prompt_kinds needs HeadScores (from scores_fast & co.), got {type(scores).__name__}")
    gamma = check_gamma(gamma)
    min_mass = check_min_mass(min_mass)
    n_boot = check_positive_int(n_boot, "n_boot")
    seed = check_int(seed, "seed")
    K = len(scores.taus)
    k = check_int(tau_index, "tau_index")
    if k >= K:
        raise PosymError(f"tau_index {k} out of range: the scores hold {K} τ ({', '.join(f'{t:g}' for t in scores.taus)})")
    sp, ss = scores.s_pos[..., k], scores.s_sym[..., k]  # [B, L, H]
    B, L, H = sp.shape
    mass = scores.swap_mass if scores.swap_mass is not None else np.full((B, L, H), np.nan)
    kinds = prompt_kinds(sp, ss, scores.swap_mass, gamma=gamma, min_mass=min_mass)
    values = {f"frac_{c}": (kinds == c).astype(float) for c in KINDS}
    values.update(s_pos=sp, s_sym=ss, entropy=scores.entropy, swap_mass=mass)
    stacked = np.stack([values[s] for s in STATS], axis=-1)  # [B, L, H, n_stats]
    lo, hi = bootstrap_means(stacked, n_boot, seed)
    mean = stacked.mean(0)
    out: dict[str, Any] = {
        "layer": np.repeat(np.asarray(scores.layers), H), "head": np.tile(np.arange(H), L),
        "tau": np.full(L * H, float(scores.taus[k])), "n_prompts": np.full(L * H, B, dtype=np.int64),
        "gamma": np.full(L * H, gamma), "min_mass": np.full(L * H, min_mass),
    }
    for c, s in enumerate(STATS):
        out[s] = mean[..., c].ravel()
        out[f"{s}_lo"] = lo[..., c].ravel()
        out[f"{s}_hi"] = hi[..., c].ravel()
    return pd.DataFrame(out)


__all__ = ["CI_LEVEL", "KINDS", "STATS", "bootstrap_means", "per_prompt_kinds", "prompt_kinds"]
