"""The head-set study's plan and statistics (docs/head_sets.md), compute only: which interventions each
cell measures on the typed set and on its K matched random controls, and the table of the effects
(SPEC §3, §7; docs/statistics.md).

A **cell** is (set, dose direction, k) at an added length, or (set, per-head intervention setting, added
length) — part ``temperature`` in the tables, whatever the intervention (``intervention_kind`` names it).
Its effect is ``untouched − intervened`` accuracy, paired over the same prompts: on the typed set with a
paired bootstrap CI (:func:`posym.stats.paired_bootstrap`), on each control (a matched random head set, or
under ``--match ids`` the same heads with k random frequency IDs dropped, :func:`id_control_draws`); the permutation p of the
typed set against its controls (:func:`posym.stats.control_p_value`: one-sided "hurts more" for the
dose cells, two-sided for the intervention part, which may rescue or harm) and Benjamini–Hochberg over every
cell of the study (:func:`posym.stats.benjamini_hochberg`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from posym.checks import check_int
from posym.errors import PosymError
from posym.heads.selection import Head, format_heads
from posym.interventions import describe, parse_intervention
from posym.stats import benjamini_hochberg, control_p_value, distinct_draws, paired_bootstrap
from posym.studies.head_sets.study import DIRECTIONS, DOSE, TEMPERATURE, prediction

#: Per-prompt outcomes of one (intervention string, added length): a table with ``correct`` and ``rank``.
Evaluate = Callable[[str, int], pd.DataFrame]
#: The head readout under one (intervention string, added length): one row per head, ``layer, head, s_pos, s_sym``
#: (SPEC §3: posym's score engine, mean over prompts).
ReadHeads = Callable[[str, int], pd.DataFrame]
NONE = "none"
#: The readout columns of a dose cell (the typed set only; controls are not read).
READOUT_COLUMNS: tuple[str, ...] = ("s_pos_none", "s_pos", "s_sym_none", "s_sym")


@dataclass(frozen=True)
class Cell:
    """One cell: ``part`` (dose | temperature: the per-head intervention part), the set, ``what`` (a
    direction, or the intervention setting's canonical string), ``k`` and the ``dropped`` IDs (dose; 0 / ()
    otherwise), the added length."""

    part: str
    set: str
    what: str
    k: int
    dropped: tuple[int, ...]
    length: int

    def intervention(self, heads: Sequence[Head], n_freq: int) -> str:
        """The intervention of this cell on ``heads`` (canonical order: ``keep`` then ``heads``)."""
        pairs = format_heads(sorted(heads))
        if self.part == DOSE:
            keep = "+".join(str(i) for i in range(1, n_freq + 1) if i not in self.dropped)
            return f"freq-mask:keep={keep},heads={pairs}"
        return describe(parse_intervention(f"{self.what},heads={pairs}"))

    @property
    def kind(self) -> str:
        """The intervention's registered name (``freq-mask`` for a dose; ``temperature``, ``ntk``, … otherwise)."""
        return "freq-mask" if self.part == DOSE else self.what.split(":", 1)[0]


def dropped_ids(direction: str, k: int, n_freq: int, seed: int) -> tuple[int, ...]:
    """The frequency IDs (1 = fastest) a dose of ``k`` drops: ``high`` 1..k, ``low`` the k largest,
    ``random`` the first k of ``numpy.random.default_rng(seed).permutation`` of 1..n_freq (sorted)."""
    if direction == "high":
        return tuple(range(1, k + 1))
    if direction == "low":
        return tuple(range(n_freq - k + 1, n_freq + 1))
    if direction == "random":
        return tuple(sorted(int(i) for i in np.random.default_rng(seed).permutation(np.arange(1, n_freq + 1))[:k]))
    raise PosymError(f"unknown direction {direction!r}; directions: {', '.join(DIRECTIONS)}")


def id_control_draws(k: int, n_freq: int, K: int, seed: int,
                     exclude: Sequence[int] | None = None) -> list[tuple[int, tuple[int, ...]]]:
    """The frequency controls of ``--match ids`` (docs/head_sets.md): K **distinct** k-subsets of the IDs
    1..n_freq ``(seed used, sorted IDs)``, the subset of seed ``seed + j`` being the first k of
    ``numpy.random.default_rng(seed + j).permutation`` of 1..n_freq (:func:`dropped_ids` ``random``; a seed
    whose subset repeats an earlier one, or equals ``exclude`` — the tested set's own dropped IDs — is
    skipped), or, when at most K such subsets exist (C(n_freq, k) − 1 with ``exclude``), **all** of them:
    the exact randomization null, p floor 1/(1 + that number) (as :func:`posym.heads.selection.control_draws`
    for heads)."""
    n_freq = check_int(n_freq, "n_freq", lo=2)
    k = check_int(k, "--doses", lo=1)
    if k >= n_freq:
        raise PosymError(f"--doses: k = {k} drops every rotary pair or more (the model has {n_freq} frequency IDs); "
                         f"give k from 1 to {n_freq - 1}")
    K, seed = check_int(K, "--controls", lo=1), check_int(seed, "--seed", lo=0)
    skip = tuple(sorted(int(i) for i in exclude)) if exclude is not None else None
    own = skip is not None and len(set(skip)) == k and all(1 <= i <= n_freq for i in skip)
    want = min(K, math.comb(n_freq, k) - int(own))
    return distinct_draws(lambda s: dropped_ids("random", k, n_freq, s), want, seed, seen=[skip] if own else [], limit=K,
                          error=f"could not draw {want} distinct sets of {k} frequency IDs; give fewer --controls")


def plan_cells(sets: Sequence[str], *, doses: Sequence[int], directions: Sequence[str], lengths: Sequence[int],
               temperature: Sequence[str], temperature_lengths: Sequence[int], n_freq: int, seed: int) -> list[Cell]:
    """Every cell of the study, sets outermost (dose cells, then temperature cells)."""
    cells: list[Cell] = []
    for s in sets:
        cells += [Cell(DOSE, s, d, int(k), dropped_ids(d, int(k), n_freq, seed), int(e))
                  for e in lengths for d in directions for k in doses]
        cells += [Cell(TEMPERATURE, s, t, 0, (), int(e)) for t in temperature for e in temperature_lengths]
    return cells


def _q(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q))


def cell_rows(cell: Cell, heads: Sequence[Head], controls: Sequence[tuple[int, Sequence[Head]]], n_freq: int,
              evaluate: Evaluate) -> tuple[dict, list[dict]]:
    """The row of one cell (statistics but BH, columns of docs/head_sets.md) and one row per control draw.
    ``controls``: ``(seed, heads)`` of each matched random set, or ``(seed, heads, dropped IDs)`` for a
    frequency control (``--match ids``: the same heads, other IDs dropped; its row gets ``dropped``)."""
    base = evaluate(NONE, cell.length)
    typed_iv = cell.intervention(heads, n_freq)
    typed = evaluate(typed_iv, cell.length)
    if len(typed) != len(base):
        raise PosymError(f"{typed_iv}: {len(typed)} prompts against {len(base)} untouched; the outcomes are not paired")
    effect, lo, hi = paired_bootstrap(base["correct"], typed["correct"], seed=0)
    ctrl_rows, ctrl_eff, ctrl_acc, ctrl_rank = [], [], [], []
    for j_seed, c_heads, *ids in controls:
        iv = (replace(cell, dropped=tuple(ids[0])) if ids else cell).intervention(c_heads, n_freq)
        out = evaluate(iv, cell.length)
        acc = float(out["correct"].mean())
        ctrl_eff.append(float(base["correct"].mean()) - acc)
        ctrl_acc.append(acc)
        ctrl_rank.append(float(out["rank"].mean()))
        ctrl_rows.append({"part": cell.part, "set": cell.set, "what": cell.what, "k": cell.k, "extra_tokens": cell.length,
                          "control_seed": j_seed, "heads": format_heads(c_heads), "intervention": iv, "acc": acc,
                          "rank": ctrl_rank[-1], "effect": ctrl_eff[-1], "n_prompts": len(out),
                          **({"dropped": "+".join(map(str, ids[0]))} if ids else {})})
    e, a, r = np.asarray(ctrl_eff), np.asarray(ctrl_acc), np.asarray(ctrl_rank)
    two = cell.part == TEMPERATURE
    rank_none = float(base["rank"].mean())
    row = {"part": cell.part, "set": cell.set, "what": cell.what, "intervention_kind": cell.kind, "k": cell.k,
           "dropped": "+".join(map(str, cell.dropped)), "extra_tokens": cell.length, "intervention": typed_iv,
           "heads": format_heads(heads), "n_heads": len(heads), "n_prompts": len(base), "n_controls": len(controls),
           "control_seeds": f"{controls[0][0]}..{controls[-1][0]}",
           "acc_none": float(base["correct"].mean()), "acc": float(typed["correct"].mean()),
           "effect": effect, "effect_lo": lo, "effect_hi": hi,
           "rank_none": float(base["rank"].mean()), "rank": float(typed["rank"].mean()),
           "ctrl_effect_mean": float(e.mean()), "ctrl_effect_sd": float(e.std(ddof=1)) if e.size > 1 else float("nan"),
           "ctrl_acc_mean": float(a.mean()), "ctrl_acc_min": float(a.min()), "ctrl_acc_max": float(a.max()),
           "ctrl_acc_q05": _q(a, 0.05), "ctrl_acc_q95": _q(a, 0.95), "ctrl_rank_mean": float(r.mean()),
           "alternative": "two-sided" if two else "greater", "p": control_p_value(effect, e, two_sided=two),
           # the answer's normalised rank (0 = first of the candidates; the reading near chance): its rise
           # against the controls' rises, the same test
           "rank_effect": float(typed["rank"].mean()) - rank_none, "ctrl_rank_effect_mean": float(r.mean()) - rank_none,
           "ctrl_rank_q05": _q(r, 0.05), "ctrl_rank_q95": _q(r, 0.95),
           "p_rank": control_p_value(float(typed["rank"].mean()) - rank_none, r - rank_none, two_sided=two)}
    return row, ctrl_rows


def set_scores(readout: pd.DataFrame, heads: Sequence[Head]) -> tuple[float, float]:
    """``(mean s_POS, mean s_SYM)`` of ``heads`` in a per-head ``readout`` (columns layer, head, s_pos, s_sym)."""
    want = {(int(a), int(b)) for a, b in heads}
    sel = [(int(a), int(b)) in want for a, b in zip(readout["layer"], readout["head"])]
    rows = readout.loc[sel]
    if len(rows) != len(want):
        raise PosymError(f"the head readout has {len(rows)} of the set's {len(want)} heads ({format_heads(sorted(want))})")
    return float(rows["s_pos"].mean()), float(rows["s_sym"].mean())


def readout_row(cell: Cell, heads: Sequence[Head], n_freq: int, read_heads: ReadHeads | None) -> dict[str, float]:
    """:data:`READOUT_COLUMNS` of one cell: the typed set's mean s_POS / s_SYM untouched and under the
    cell's intervention (dose cells; NaN for the intervention part or without ``read_heads``)."""
    if read_heads is None or cell.part != DOSE:
        return dict.fromkeys(READOUT_COLUMNS, float("nan"))
    p0, s0 = set_scores(read_heads(NONE, cell.length), heads)
    p1, s1 = set_scores(read_heads(cell.intervention(heads, n_freq), cell.length), heads)
    return {"s_pos_none": p0, "s_pos": p1, "s_sym_none": s0, "s_sym": s1}


def study_table(rows: list[dict], *, readout: str, task: str, seed: int, all_heads: dict[tuple[str, int], float],
                match: str = "layer", all_heads_rank: dict[tuple[str, int], float] | None = None) -> pd.DataFrame:
    """The study table from :func:`cell_rows`' rows: BH over every cell (``p_bh``), the readout, task and
    seeds recorded, the all-heads accuracy of each intervention cell (``acc_all_heads``: the same setting on
    every head, keyed by (setting, length); ``rank_all_heads`` from ``all_heads_rank``), the controls' ``match``
    (layer | count | ids) and the written prediction; ``p_rank_bh``: BH over the cells' rank p."""
    t = pd.DataFrame(rows)
    if t.empty:
        return t
    t["p_bh"] = benjamini_hochberg(t["p"].to_numpy())
    if "p_rank" in t.columns:
        t["p_rank_bh"] = benjamini_hochberg(t["p_rank"].to_numpy())
    for col, got in (("acc_all_heads", all_heads), ("rank_all_heads", all_heads_rank or {})):
        t[col] = [got.get((w, int(e)), float("nan")) if p == TEMPERATURE else float("nan")
                  for p, w, e in zip(t["part"], t["what"], t["extra_tokens"])]
    t["prediction"] = [prediction(s, kind if p == TEMPERATURE else w, task)
                       for s, p, w, kind in zip(t["set"], t["part"], t["what"], t["intervention_kind"])]
    t.insert(0, "task", task)
    t["readout"] = readout
    t["data_seed"] = seed
    t["match"] = match
    return t


def table_markdown(t: pd.DataFrame, null: str, window: bool = False) -> str:
    """``head_sets.md``: one line per cell (effect [CI], controls' mean effect, p, BH p; the answer's normalised
    rank's rise against the controls', its p and BH p). ``window``: the
    length column holds an LLM's target windows (SPEC §1.5), not added tokens."""
    from posym.stats import format_p

    lines = [f"Null: {null}. Effect = untouched − intervened accuracy, paired over the same prompts.", "",
             f"| part | set | what | k | {'window' if window else '+len'} | heads | n | effect [95% CI] | controls (mean ± sd) "
             "| p | p (BH) | rank rise (controls' mean) | p (rank) | p (rank, BH) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in t.itertuples(index=False):
        lines.append(f"| {r.part} | {r.set} | {r.what} | {r.k} | {r.extra_tokens} | {r.heads} | {r.n_prompts} | "
                     f"{r.effect:+.3f} [{r.effect_lo:+.3f}, {r.effect_hi:+.3f}] | {r.ctrl_effect_mean:+.3f} ± "
                     f"{r.ctrl_effect_sd:.3f} (K={r.n_controls}) | {format_p(r.p, r.n_controls)} | {r.p_bh:.3g} | "
                     f"{r.rank_effect:+.3f} ({r.ctrl_rank_effect_mean:+.3f}) | {format_p(r.p_rank, r.n_controls)} | "
                     f"{r.p_rank_bh:.3g} |")
    return "\n".join(lines) + "\n"


__all__ = ["Cell", "Evaluate", "NONE", "READOUT_COLUMNS", "ReadHeads", "cell_rows", "dropped_ids", "id_control_draws",
           "plan_cells", "readout_row", "set_scores", "study_table", "table_markdown"]
