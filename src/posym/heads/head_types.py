"""Head types side by side: positional/symbolic scores joined with the classic detectors
(SPEC §7).

* :func:`join_head_types` — one row per (layer, head): the scores table (s_POS, s_SYM, entropy, swap
  or block mass, ...), the detector scores of :func:`posym.heads.detectors.detector_scores`, the
  per-prompt fractions of :func:`posym.heads.prompt_readings.per_prompt_kinds` (optional) and two
  labels:

  - ``classic_type`` (:func:`classic_types`): the detector with the highest score among
    previous_token, induction, duplicate_token (ties in that order) when it is ``>= 0.5`` (most of
    the attention on that detector's targets where the prompt has them, the ``rows="target"``
    scale); else ``sink`` when ``first_token >= 0.5`` (most of the attention on the start token);
    else ``none``. The patterns come first because an induction or duplicate-token head has targets
    only in the second half of a repeated sequence and typically rests on the start token in the
    first half (SmolLM2-135M's induction heads: induction 0.74–0.87, first_token 0.51–0.60);
  - ``posym_type`` (:func:`posym_types`): ``uninformative`` when the mass on the swapped keys/blocks
    is below ``min_mass`` (the score is read on almost nothing); ``diffuse`` when both scores are
    ``>= 1 − γ`` (the (1, 1) corner of uniform attention) or the normalised entropy is
    ``>= max_entropy``; else SPEC §3's purity rule on the means over prompts: ``positional`` /
    ``symbolic``, or ``mixed`` — and a head pure on the mean is typed pure only when it is pure *of
    that kind* on at least ``pure_fraction`` of the prompts (:data:`PURE_FRACTION`, 0.9; its
    ``purity_fraction`` below), else ``mixed``. ``pure_fraction=0`` types on the means alone (the
    reading before this rule; ``mean_type`` keeps it either way).

  and beside the labels:

  - ``is_sink``: ``first_token >= sink_share`` (:data:`SINK_SHARE`, 0.5: most of the head's attention
    on the start token) — the rule of the ``sink`` classic type, shown for *every* head whatever type
    wins (an induction head resting on the start token is an induction head and a sink);
  - ``mean_type``: the posym type on the means alone (``pure_fraction=0``);
  - ``purity_fraction``: for a head whose ``mean_type`` is ``positional`` (``symbolic``), the share of
    prompts on which its per-prompt (s_POS, s_SYM) pair is positional (symbolic) at the same γ with at
    least ``min_mass`` on the swapped keys: the ``frac_positional`` (``frac_symbolic``) of
    :func:`posym.heads.prompt_readings.per_prompt_kinds`; NaN for the other heads.

* :func:`type_correlations` — per detector, Spearman's ρ across heads between the detector score and
  ``s_SYM − s_POS`` (+1: the detector's heads read symbolic), with a percentile bootstrap 95 %
  interval over heads and a two-sided permutation p-value (the detector column shuffled against the
  scores ``n_null`` times; ``p = (1 + #{|ρ_null| >= |ρ|}) / (1 + n_null)``). When no shuffle reaches
  |ρ| (``p_at_floor``), p is the floor ``1 / (1 + n_null)`` of the test, not an estimate:
  :func:`posym.stats.format_p` prints it ``< 1/n_null`` (``< 0.001`` for 1,000 shuffles).
* :func:`contingency` — counts of classic type × posym type, with the sink flag and the purity
  fractions beside them; :func:`sink_counts` and :func:`pure_counts` — the printed summary's lines.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import pandas as pd

from posym.checks import check_gamma, check_int, check_positive_int, require_columns
from posym.constants import GAMMA
from posym.errors import PosymError
from posym.heads.detectors import DETECTORS
from posym.heads.dynamics import classify
from posym.heads.llm_heads import check_min_mass
from posym.reading import MIN_MASS
from posym.stats import format_p  # its home: posym.stats (re-exported for the callers of this module)

if TYPE_CHECKING:
    from posym.heads.scores import HeadScores

#: Classic types, in table order (``none``: no detector reaches the threshold).
CLASSIC_TYPES: tuple[str, ...] = ("previous_token", "induction", "duplicate_token", "sink", "none")
#: posym types, in table order.
POSYM_TYPES: tuple[str, ...] = ("positional", "symbolic", "mixed", "diffuse", "uninformative")
#: A head is a sink when at least this share of its attention goes to the first token.
SINK_SHARE = 0.5
#: A head is of a detector's type when at least this share of its attention goes to the targets.
CLASSIC_THRESHOLD = 0.5
#: Normalised attention entropy from which a head reads ``diffuse``.
DIFFUSE_ENTROPY = 0.9
#: A head pure on the mean is typed pure when it is pure of that kind on at least this share of prompts.
PURE_FRACTION = 0.9
#: The pure kinds and the per-prompt fraction column of each.
_PURE_FRAC = {"positional": "frac_positional", "symbolic": "frac_symbolic"}
#: Slack of the fraction comparison (k/N computed as a float mean).
_EPS = 1e-9
#: The pattern detectors that name a classic type, in tie-break order.
_PATTERN_TYPES = ("previous_token", "induction", "duplicate_token")
_KEYS = ["layer", "head"]
#: Columns of :func:`type_correlations`.
CORRELATION_COLUMNS = ("detector", "n_heads", "rho", "rho_lo", "rho_hi", "p_value", "p_at_floor", "n_boot", "n_null")


def _share(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 <= float(v) <= 1:
        raise PosymError(f"{name} must be a number in [0, 1], got {v!r}")
    return float(v)


def _one_row_per_head(table: pd.DataFrame, what: str) -> None:
    if table.duplicated(_KEYS).any():
        raise PosymError(f"{what} has several rows per (layer, head); select one τ / prompt set first")


def mass_column(table: pd.DataFrame) -> str:
    """The mass column of a scores table: ``swap_mass`` (token scores) or ``block_mass`` (``llm heads``)."""
    for c in ("swap_mass", "block_mass"):
        if c in table.columns:
            return c
    raise PosymError("the scores table has no swap_mass or block_mass column")


def classic_types(detectors: pd.DataFrame, *, sink_share: float = SINK_SHARE,
                  threshold: float = CLASSIC_THRESHOLD) -> np.ndarray:
    """The ``classic_type`` of each row of a detector table (module doc) -> object array."""
    require_columns(detectors.columns, DETECTORS, "the detector table")
    sink_share, threshold = _share(sink_share, "sink_share"), _share(threshold, "threshold")
    scores = detectors[list(_PATTERN_TYPES)].to_numpy(float)
    filled = np.where(np.isnan(scores), -np.inf, scores)
    best = filled.argmax(1)  # first maximum: the tie-break order
    top = filled[np.arange(len(filled)), best]
    sink = detectors["first_token"].to_numpy(float) >= sink_share
    out = np.where(sink, "sink", "none").astype(object)
    typed = top >= threshold
    out[typed] = np.asarray(_PATTERN_TYPES, dtype=object)[best[typed]]
    return out


def check_pure_fraction(v: Any) -> float:
    """The purity threshold: a share of prompts in [0, 1] (0: the means alone decide; ``None``: the
    default :data:`PURE_FRACTION`)."""
    return PURE_FRACTION if v is None else _share(v, "pure_fraction")


def sink_flags(detectors: pd.DataFrame, *, sink_share: float = SINK_SHARE) -> np.ndarray:
    """``is_sink`` of each row of a detector table: ``first_token >= sink_share`` (module doc) -> bool array."""
    require_columns(detectors.columns, ["first_token"], "the detector table")
    return detectors["first_token"].to_numpy(float) >= _share(sink_share, "sink_share")


def purity_fractions(table: pd.DataFrame, mean_type: Any) -> np.ndarray:
    """``purity_fraction`` of each row (module doc): ``frac_positional`` where ``mean_type`` is
    positional, ``frac_symbolic`` where it is symbolic, NaN elsewhere (and where the column is missing)."""
    mean_type = np.asarray(mean_type, dtype=object)
    out = np.full(len(table), np.nan)
    for kind, col in _PURE_FRAC.items():
        if col in table.columns:
            sel = mean_type == kind
            out[sel] = table[col].to_numpy(float)[sel]
    return out


def _mean_types(table: pd.DataFrame, gamma: float, min_mass: float, max_entropy: float | None) -> np.ndarray:
    require_columns(table.columns, ["s_pos", "s_sym"], "the scores table")
    sp, ss = table["s_pos"].to_numpy(float), table["s_sym"].to_numpy(float)
    out = classify(sp, ss, gamma)
    diffuse = (sp >= 1 - gamma) & (ss >= 1 - gamma)
    if max_entropy is not None:
        max_entropy = _share(max_entropy, "max_entropy")
        require_columns(table.columns, ["entropy"], "the scores table")
        diffuse |= table["entropy"].to_numpy(float) >= max_entropy
    out[diffuse] = "diffuse"
    silent = np.isnan(sp) | np.isnan(ss)
    if min_mass > 0:
        mass = table[mass_column(table)].to_numpy(float)
        if np.isnan(mass).all():
            raise PosymError("the scores table holds no swap mass; pass min_mass=0 to type the heads without it")
        silent |= ~(mass >= min_mass)
    out[silent] = "uninformative"
    return out


def posym_types(table: pd.DataFrame, *, gamma: float = GAMMA, min_mass: float = MIN_MASS,
                max_entropy: float | None = DIFFUSE_ENTROPY, pure_fraction: float | None = PURE_FRACTION) -> np.ndarray:
    """The ``posym_type`` of each row of a scores table (module doc) -> object array.

    Needs ``s_pos, s_sym``; ``entropy`` when ``max_entropy`` is set; the mass column when
    ``min_mass > 0``; ``frac_positional`` and ``frac_symbolic`` (the per-prompt fractions of
    :func:`posym.heads.prompt_readings.per_prompt_kinds`, read at the same γ and mass floor) when
    ``pure_fraction > 0``. A row with a NaN score (no swap) is ``uninformative``.
    """
    gamma, min_mass = check_gamma(gamma), check_min_mass(min_mass)
    pure_fraction = check_pure_fraction(pure_fraction)
    out = _mean_types(table, gamma, min_mass, max_entropy)
    if pure_fraction > 0:
        missing = [c for c in _PURE_FRAC.values() if c not in table.columns]
        if missing:
            raise PosymError(f"pure_fraction={pure_fraction:g} needs the per-prompt fractions {missing} "
                             "(join the readings of per_prompt_kinds), or pass pure_fraction=0 to type on the means alone")
        frac = purity_fractions(table, out)
        out[np.isin(out, list(_PURE_FRAC)) & ~(frac >= pure_fraction - _EPS)] = "mixed"
    return out


def join_head_types(scores_table: pd.DataFrame, detectors: pd.DataFrame, readings: pd.DataFrame | None = None, *,
                    gamma: float = GAMMA, min_mass: float = MIN_MASS, max_entropy: float | None = DIFFUSE_ENTROPY,
                    sink_share: float = SINK_SHARE, threshold: float = CLASSIC_THRESHOLD,
                    pure_fraction: float | None = PURE_FRACTION) -> pd.DataFrame:
    """One row per (layer, head): scores, detector scores, per-prompt fractions and the two labels.

    scores_table: one τ (and prompt set) of :meth:`HeadScores.to_frame` or of ``posym llm heads``'
    table (``layer, head, s_pos, s_sym, entropy`` and ``swap_mass`` or ``block_mass``).
    detectors: :func:`posym.heads.detectors.detector_scores`. readings (optional):
    :func:`posym.heads.prompt_readings.per_prompt_kinds`; its ``frac_*`` columns (and intervals) are
    added; they are needed unless ``pure_fraction=0`` (the means alone decide) and must be read with
    this ``gamma`` and ``min_mass`` (their ``gamma`` / ``min_mass`` columns). Heads missing from the
    detector table are an error. Columns: the scores table's, the detector columns, the ``frac_*``
    columns, ``classic_type``, ``is_sink``, ``mean_type``, ``purity_fraction``, ``posym_type``
    (module doc for the rules); sorted by layer and head.
    """
    require_columns(scores_table.columns, _KEYS + ["s_pos", "s_sym"], "the scores table")
    require_columns(detectors.columns, _KEYS + list(DETECTORS), "the detector table")
    _one_row_per_head(scores_table, "the scores table")
    _one_row_per_head(detectors, "the detector table")
    det_cols = [c for c in detectors.columns if c not in _KEYS and c not in scores_table.columns]
    out = scores_table.merge(detectors[_KEYS + det_cols], on=_KEYS, how="left", validate="one_to_one")
    if out[list(DETECTORS)].isna().all(axis=1).any():
        miss = out.loc[out[list(DETECTORS)].isna().all(axis=1), _KEYS].head(3).to_dict("records")
        raise PosymError(f"the detector table lacks heads of the scores table (e.g. {miss}); "
                         f"run the detectors on the same model and layers")
    if readings is not None:
        require_columns(readings.columns, _KEYS, "the readings table")
        _one_row_per_head(readings, "the readings table")
        frac = [c for c in readings.columns if c.startswith("frac_")]
        if not frac:
            raise PosymError("the readings table has no frac_* column (use per_prompt_kinds)")
        for name, want in (("gamma", check_gamma(gamma)), ("min_mass", check_min_mass(min_mass))):
            got = readings[name].dropna().unique() if name in readings.columns else []
            if len(got) and not np.allclose(got, want, rtol=0, atol=1e-12):
                raise PosymError(f"the readings were read with {name} {', '.join(f'{g:g}' for g in got)} and the "
                                 f"heads are typed with {name} {want:g}: pass the same {name} to per_prompt_kinds "
                                 "and join_head_types")
        out = out.merge(readings[_KEYS + frac], on=_KEYS, how="left", validate="one_to_one")
    out["classic_type"] = classic_types(out, sink_share=sink_share, threshold=threshold)
    out["is_sink"] = sink_flags(out, sink_share=sink_share)
    out["mean_type"] = posym_types(out, gamma=gamma, min_mass=min_mass, max_entropy=max_entropy, pure_fraction=0)
    out["purity_fraction"] = purity_fractions(out, out["mean_type"])
    out["posym_type"] = posym_types(out, gamma=gamma, min_mass=min_mass, max_entropy=max_entropy,
                                    pure_fraction=pure_fraction)
    return out.sort_values(_KEYS, kind="stable").reset_index(drop=True)


def _spearman_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of each row pair of x, y [R, n] (average ranks for ties; NaN when a row is constant)."""
    rx = pd.DataFrame(x).rank(axis=1).to_numpy()
    ry = pd.DataFrame(y).rank(axis=1).to_numpy()
    rx = rx - rx.mean(1, keepdims=True)
    ry = ry - ry.mean(1, keepdims=True)
    den = np.sqrt((rx ** 2).sum(1) * (ry ** 2).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(1) / np.where(den > 0, den, 1.0), np.nan)


def spearman(x: Any, y: Any) -> float:
    """Spearman's rank correlation of two equal-length vectors (average ranks for ties)."""
    return float(_spearman_rows(np.asarray(x, float)[None], np.asarray(y, float)[None])[0])


def type_correlations(join: pd.DataFrame, *, n_boot: int = 1000, n_null: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Spearman ρ of each detector with ``s_SYM − s_POS`` across heads, bootstrap 95 % interval over
    heads and a permutation p-value (module doc).

    join: :func:`join_head_types` (filter it first, e.g. to informative heads). Rows with a NaN
    detector or score are left out. Columns :data:`CORRELATION_COLUMNS` (``p_at_floor``: no shuffle
    reached |ρ|, so ``p_value`` is the floor ``1 / (1 + n_null)``), one row per detector present (``sink``
    included when the join has it).
    """
    require_columns(join.columns, ["s_pos", "s_sym"], "the join")
    n_boot, n_null = check_positive_int(n_boot, "n_boot"), check_positive_int(n_null, "n_null")
    rng = np.random.default_rng(check_int(seed, "seed"))
    rows = []
    for d in [c for c in (*DETECTORS, "sink") if c in join.columns]:
        x = join[d].to_numpy(float)
        y = (join["s_sym"] - join["s_pos"]).to_numpy(float)
        ok = ~(np.isnan(x) | np.isnan(y))
        x, y = x[ok], y[ok]
        n = len(x)
        rho = spearman(x, y) if n >= 2 else float("nan")
        lo = hi = p = float("nan")
        floor = False
        if n >= 3 and not np.isnan(rho):
            idx = rng.integers(0, n, size=(n_boot, n))
            boot = _spearman_rows(x[idx], y[idx])
            lo, hi = np.nanquantile(boot, [0.025, 0.975]) if np.isfinite(boot).any() else (np.nan, np.nan)
            perm = np.argsort(rng.random((n_null, n)), axis=1)
            null = _spearman_rows(np.broadcast_to(x, (n_null, n)), y[perm])
            hits = int((np.abs(null) >= abs(rho) - 1e-12).sum())
            p, floor = (1 + hits) / (1 + n_null), hits == 0
        rows.append({"detector": d, "n_heads": n, "rho": rho, "rho_lo": float(lo), "rho_hi": float(hi),
                     "p_value": p, "p_at_floor": bool(floor), "n_boot": n_boot, "n_null": n_null})
    return pd.DataFrame(rows, columns=list(CORRELATION_COLUMNS))


def contingency(join: pd.DataFrame) -> pd.DataFrame:
    """Counts of heads by classic type (rows, :data:`CLASSIC_TYPES` order) × posym type (columns,
    :data:`POSYM_TYPES` order), every type present (zeros included), with ``total`` row and column,
    and beside them (when the join has the columns of :func:`join_head_types`):

    * ``positional_purity``, ``symbolic_purity``: the mean ``purity_fraction`` of the heads counted
      as positional (symbolic) in that row — the share of prompts on which they are pure (NaN: none);
    * ``positional_mean_only``, ``symbolic_mean_only``: heads pure on the mean over prompts but pure on
      fewer than ``pure_fraction`` of the prompts (counted as ``mixed``);
    * ``sink_flagged``: heads of the row with ``is_sink`` (most attention on the start token),
      whatever their classic type."""
    require_columns(join.columns, ["classic_type", "posym_type"], "the join")
    unknown = (set(join["classic_type"]) - set(CLASSIC_TYPES)) | (set(join["posym_type"]) - set(POSYM_TYPES))
    if unknown:
        raise PosymError(f"unknown head type(s) {sorted(map(str, unknown))} in the join")
    tab = pd.crosstab(pd.Categorical(join["classic_type"], categories=CLASSIC_TYPES),
                      pd.Categorical(join["posym_type"], categories=POSYM_TYPES), dropna=False)
    tab = tab.reindex(index=list(CLASSIC_TYPES), columns=list(POSYM_TYPES), fill_value=0).astype(np.int64)
    tab["total"] = tab.sum(axis=1)
    tab.loc["total"] = tab.sum(axis=0)
    rows = [(c, join["classic_type"] == c) for c in CLASSIC_TYPES] + [("total", pd.Series(True, index=join.index))]
    extra: dict[str, list[float]] = {}
    if "purity_fraction" in join.columns:
        for kind in _PURE_FRAC:
            extra[f"{kind}_purity"] = [float(join.loc[r & (join["posym_type"] == kind), "purity_fraction"].mean())
                                       if (r & (join["posym_type"] == kind)).any() else float("nan") for _, r in rows]
    if "mean_type" in join.columns:
        for kind in _PURE_FRAC:
            extra[f"{kind}_mean_only"] = [int((r & (join["mean_type"] == kind) & (join["posym_type"] != kind)).sum())
                                          for _, r in rows]
    if "is_sink" in join.columns:
        extra["sink_flagged"] = [int((r & join["is_sink"].astype(bool)).sum()) for _, r in rows]
    for c, v in extra.items():
        tab[c] = v
    tab.index.name, tab.columns.name = "classic_type", "posym_type"
    return tab


def format_contingency(tab: pd.DataFrame) -> str:
    """The contingency table as printed (narrow): positional / symbolic cells ``count (purity)`` with
    the mean purity fraction of the heads counted, ``+pos/+sym`` the heads pure on the mean only, and
    ``sink-flag`` the heads with most attention on the start token (:func:`contingency`)."""
    out = pd.DataFrame(index=tab.index)
    for c in POSYM_TYPES + ("total",):
        col = tab[c].astype(int).astype(str)
        if f"{c}_purity" in tab.columns:
            f = tab[f"{c}_purity"]
            col = pd.Series([n if np.isnan(x) else f"{n} ({x:.2f})" for n, x in zip(col, f)], index=tab.index)
        out["uninform." if c == "uninformative" else c] = col
    if "positional_mean_only" in tab.columns:
        out["mean-only +pos/+sym"] = [f"+{a}/+{b}" for a, b in zip(tab["positional_mean_only"], tab["symbolic_mean_only"])]
    if "sink_flagged" in tab.columns:
        out["sink-flag"] = tab["sink_flagged"].astype(int)
    out.index.name = None
    return out.to_string()


def sink_counts(join: pd.DataFrame) -> dict[str, Any]:
    """The sink heads of a join (``is_sink``: first-token share >= :data:`SINK_SHARE`; by
    ``classic_type == "sink"`` for a join without the flag) and how they read: how many are typed
    ``sink`` and how many by a pattern (per type), and how many read pure symbolic — the reading that
    the start-token exclusion is for (docs/llm.md) — or pure positional."""
    require_columns(join.columns, ["classic_type", "posym_type"], "the join")
    flag = join["is_sink"].astype(bool) if "is_sink" in join.columns else join["classic_type"] == "sink"
    sinks = join[flag]
    by = {t: int((sinks["classic_type"] == t).sum()) for t in _PATTERN_TYPES}
    return {"sink_heads": len(sinks), "sink_typed_sink": int((sinks["classic_type"] == "sink").sum()),
            "sink_typed_pattern": {t: n for t, n in by.items() if n},
            "sink_pure_symbolic": int((sinks["posym_type"] == "symbolic").sum()),
            "sink_pure_positional": int((sinks["posym_type"] == "positional").sum())}


def _mean_or_none(v: pd.Series, how: str = "mean") -> float | None:
    v = v.dropna()
    return float(getattr(v, how)()) if len(v) else None


def pure_counts(join: pd.DataFrame) -> dict[str, Any]:
    """Per pure kind: heads typed pure, the mean and smallest ``purity_fraction`` among them, and the
    heads pure on the mean only (``mean_type`` pure, ``posym_type`` not) with their mean fraction
    (``None`` where there is none: the dict goes into ``head_types.json``)."""
    require_columns(join.columns, ["posym_type"], "the join")
    out: dict[str, Any] = {}
    for kind in _PURE_FRAC:
        typed = join[join["posym_type"] == kind]
        pf = typed["purity_fraction"] if "purity_fraction" in join.columns else pd.Series(dtype=float)
        only = (join[(join["mean_type"] == kind) & (join["posym_type"] != kind)] if "mean_type" in join.columns
                else join.iloc[:0])
        opf = only["purity_fraction"] if "purity_fraction" in join.columns else pd.Series(dtype=float)
        out[kind] = {"heads": len(typed), "purity_mean": _mean_or_none(pf), "purity_min": _mean_or_none(pf, "min"),
                     "mean_only": len(only), "mean_only_purity_mean": _mean_or_none(opf)}
    return out


# ------------------------------------------------------------------------------------------------
# the scores of one prompt source, and the correlations over all and over informative heads
# ------------------------------------------------------------------------------------------------
def concat_scores(parts: Sequence["HeadScores"]) -> "HeadScores":
    """One :class:`posym.heads.scores.HeadScores` of several (prompts stacked in order)."""
    if len(parts) == 1:
        return parts[0]
    cat = lambda name: np.concatenate([getattr(p, name) for p in parts])  # noqa: E731
    blocks = {}
    for p in parts:
        blocks.update(p.blocks)
    return dataclasses.replace(parts[0], s_pos=cat("s_pos"), s_sym=cat("s_sym"), entropy=cat("entropy"),
                               swap_mass=cat("swap_mass"), query_pos=cat("query_pos"), blocks=blocks)


def source_scores(lm: Any, source: str, ids: np.ndarray | None, prompts: Sequence[Any] | None, tau: float,
                  exclude: tuple[int, ...], batch_size: int) -> "HeadScores":
    """Per-prompt scores (SPEC §3, fast exact path) of one prompt source: token swaps on ``ids``
    (``repeated``), else Paper B's block swaps over the exact blocks of ``prompts`` (prompts sharing
    length and blocks scored together, returned in the prompts' own order)."""
    import torch

    from posym.heads.scores import scores_blocks_fast, scores_fast
    from posym.tasks.llm_prompts import group_prompts

    dev = next(lm.parameters()).device
    with torch.no_grad():
        if source == "repeated":
            return scores_fast(lm, torch.as_tensor(ids, device=dev), tau, batch_size=batch_size, exclude_keys=exclude)
        parts, order = [], []
        for (_, blocks), idx in group_prompts(prompts).items():
            batch = torch.tensor([prompts[i].input_ids for i in idx], device=dev)
            parts.append(scores_blocks_fast(lm, batch, blocks=list(blocks), taus=tau, batch_size=batch_size,
                                            exclude_keys=exclude))
            order.extend(idx)
    res = concat_scores(parts)
    inv = np.argsort(np.asarray(order))  # back to the prompts' own order
    return dataclasses.replace(res, s_pos=res.s_pos[inv], s_sym=res.s_sym[inv], entropy=res.entropy[inv],
                               swap_mass=res.swap_mass[inv], query_pos=res.query_pos[inv])


def informative_correlations(join: pd.DataFrame, min_mass: float, *, n_boot: int, n_null: int,
                             seed: int) -> pd.DataFrame:
    """:func:`type_correlations` over all heads (``heads = "all"``) and over the heads with
    ``swap_mass >= min_mass`` (``"informative"``: scored on enough attention)."""
    kept = join[join[mass_column(join)] >= min_mass]
    parts = [type_correlations(j, n_boot=n_boot, n_null=n_null, seed=seed).assign(heads=h)
             for h, j in (("all", join), ("informative", kept))]
    out = pd.concat(parts, ignore_index=True)
    return out[["detector", "heads", *[c for c in out.columns if c not in ("detector", "heads")]]]


__all__ = [
    "concat_scores",
    "informative_correlations",
    "source_scores",
    "CLASSIC_THRESHOLD",
    "CLASSIC_TYPES",
    "DIFFUSE_ENTROPY",
    "CORRELATION_COLUMNS",
    "POSYM_TYPES",
    "PURE_FRACTION",
    "SINK_SHARE",
    "check_pure_fraction",
    "classic_types",
    "contingency",
    "format_contingency",
    "format_p",
    "join_head_types",
    "mass_column",
    "posym_types",
    "pure_counts",
    "purity_fractions",
    "sink_counts",
    "sink_flags",
    "spearman",
    "type_correlations",
]
