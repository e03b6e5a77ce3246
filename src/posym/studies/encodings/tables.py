"""Training-time positional encodings side by side (docs/encodings.md;
the variants are defined in SPEC §2.1).

A *variant* is a reproduction directory (``posym reproduce --set train.pe=…``) all of whose runs were
trained with one ``--pe`` value, read from each run's ``posym.json`` (:func:`variant_pe`). Per variant
and task, over its seeds (mean ± sample sd; the per-seed values come from the reproduction's own
aggregation, :mod:`posym.report.aggregate`):

* test accuracy, and the first validation step at which each hop's accuracy reaches 0.9 (the
  milestones of Fig. 2);
* pure positional / symbolic heads at the end of training (γ = 0.1, SPEC §3);
* the dominant frequency IDs of all heads and of the pure positional ones (``freq_table.csv``), over
  rotating pairs only: a pair with angle 0 (p-RoPE's slow pairs, every pair under NoPE) carries no
  position, so a head whose most used pair has angle 0 is counted as such and gets no frequency ID;
  beside it the share of the heads' frequency use on angle-0 pairs (``freq_use.csv``);
* Fig. 5B at Paper A's points and the largest added length with accuracy >= 0.9 there and at every
  shorter grid point (the reach, per model).

Every quantity is of the untouched model: of a table that holds rows of several inference-time
interventions (an ``intervention`` column) only the ``none`` rows are read, unless ``intervention``
selects another for Fig. 5B and the reach; the study then names it (row :data:`Q_INTERVENTION`).

:func:`goal_line` states the goal of the study: the number task's mean reach >= 10 × that of the
``rope`` variant, with mean test accuracy >= 0.99. :func:`pure_count_curves` /
:func:`plot_pure_count_curves` draw Fig. 2's pure-head counts over training of every variant.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import Path
from typing import Mapping

import pandas as pd

from posym.constants import GAMMA, REACH_THRESHOLD
from posym.errors import PosymError
from posym.report import paper
from posym.report.aggregate import (check_runs_alike, curve_reach, lengthgen_interventions, lengthgen_summary,
                                    purity_counts, read_lengthgen_summary, read_untouched, run_arch, run_pe, shown_note,
                                    training_summary)
from posym.report.format import mean_sd
from posym.runs import layout
from posym.runs.tables import INTERVENTION, NO_INTERVENTION
from posym.studies._kit import cell, check_variant_paths
from posym.studies.encodings.study import (BASELINE_PE, COLUMNS, GOAL_ACCURACY, GOAL_FACTOR, Q_DOMINANT,
                                           Q_DOMINANT_POSITIONAL, Q_INTERVENTION, Q_REACH, Q_SEEDS, Q_TEST, Q_UNROTATED,
                                           q_accuracy, q_milestone, q_pure)


# ------------------------------------------------------------------------------------------------
# the variants
# ------------------------------------------------------------------------------------------------
def variant_pe(name: str, directory: str | os.PathLike) -> str:
    """The canonical ``--pe`` value of every run of a reproduction directory (``posym.json``'s
    ``config.pe``; a run written before the setting existed is ``rope``); PosymError when the
    directory holds no finished run or its runs disagree."""
    runs = layout.find_runs(directory)
    if not runs:
        raise PosymError(f"variant {name!r}: {directory} holds no finished run (<task>/seed<k>/ with "
                         f"{layout.RESULTS}); give a posym reproduce directory")
    seen: dict[str, Path] = {}
    for seeds in runs.values():
        for run in seeds.values():
            seen.setdefault(run_pe(run), run)
    if len(seen) > 1:
        (a, run_a), (b, run_b) = list(seen.items())[:2]
        raise PosymError(f"variant {name!r}: its runs disagree on the positional encoding ({run_a}: {a}, "
                         f"{run_b}: {b}); give one reproduction directory per --pe value")
    return next(iter(seen))


def check_variants(variants: Mapping[str, str | os.PathLike]) -> dict[str, str]:
    """Each variant's ``--pe`` value (:func:`variant_pe`); PosymError for a missing directory, one given
    under two names (:func:`posym.studies._kit.check_variant_paths`), runs that disagree or variants of
    different architectures."""
    variants = check_variant_paths(variants)
    pes = {name: variant_pe(name, Path(value)) for name, value in variants.items()}
    archs = {name: {run_arch(r) for seeds in layout.find_runs(v).values() for r in seeds.values()}
             for name, v in variants.items()}
    found = sorted(set().union(*archs.values()))
    if len(found) > 1:
        a, b = found[:2]
        who = lambda arch: next(n for n, s in archs.items() if arch in s)
        raise PosymError(f"the variants mix architectures (variant {who(a)!r}: {a}, variant {who(b)!r}: {b}); the "
                         "encodings study compares encodings of one architecture: give each architecture its own study")
    return pes


# ------------------------------------------------------------------------------------------------
# per-quantity helpers (hand-made tables in the tests)
# ------------------------------------------------------------------------------------------------
def dominant_ids(tables: list[pd.DataFrame]) -> tuple[Counter, int, int]:
    """Over every head of ``freq_table`` tables: how many heads have each dominant frequency ID among
    the rotating pairs (``dominant_angle`` > 0), how many have their most used pair at angle 0 (not a
    frequency: that pair does not rotate) and how many use no pair at all (NaN angle)."""
    ids: Counter = Counter()
    unrotated = unused = 0
    for t in tables:
        for _, r in t.iterrows():
            angle = float(r["dominant_angle"])
            if not math.isfinite(angle):
                unused += 1
            elif angle > 0:
                ids[int(r["dominant_id"])] += 1
            else:
                unrotated += 1
    return ids, unrotated, unused


def dominant_text(ids: Counter, unrotated: int, unused: int = 0, top: int = 3) -> str:
    """``ID 37 ×9, 38 ×4, 12 ×2, … ; 4 heads on angle-0 pairs``: the ``top`` most common dominant IDs
    (ties: smaller ID first), then the heads whose most used pair does not rotate."""
    parts = []
    if ids:
        common = sorted(ids.items(), key=lambda kv: (-kv[1], kv[0]))
        parts.append("ID " + ", ".join(f"{k} ×{c}" for k, c in common[:top]) + (", …" if len(common) > top else ""))
    if unrotated:
        parts.append(f"{unrotated} head{'s' if unrotated != 1 else ''} on angle-0 pairs")
    if unused:
        parts.append(f"{unused} without frequency use")
    return "; ".join(parts) if parts else "—"


def unrotated_share(use: pd.DataFrame) -> float:
    """Share of the frequency use (``freq_use.csv``'s ``use``, summed over heads) on terms with angle 0
    (non-rotating pairs and the non-rotary term); NaN without use."""
    total = float(use["use"].sum())
    return float(use.loc[use["angle"] == 0, "use"].sum()) / total if total > 0 else math.nan


def seed_reaches(summaries: list[pd.DataFrame]) -> tuple[list[float], int, int, int]:
    """Per model's ``lengthgen_summary``: its reach (largest added length with accuracy >= 0.9 at it and
    every shorter point), the models below 0.9 already at +0 (left out of the list), the models still
    >= 0.9 at their grid's end (their reach is a lower bound), and the smallest grid end."""
    reaches, never, at_end, grid_end = [], 0, 0, math.inf
    for s in summaries:
        end = int(s["extra_tokens"].max())
        grid_end = min(grid_end, end)
        r = curve_reach(s)
        if math.isnan(r):
            never += 1
            continue
        reaches.append(r)
        at_end += r >= end
    return reaches, never, at_end, int(grid_end) if math.isfinite(grid_end) else -1


# ------------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------------
def _cell(mean: float, sd: float, n: int, digits: int) -> str:
    """A cell of the table: ``digits`` decimals, whole numbers (steps, lengths) thousands separated."""
    return cell(mean, sd, n, digits, integer=digits == 0)


def _of_models(n: int, total: int) -> str:
    """" (n of total models)" when a length table exists for only some of a variant's models, else ""."""
    return f" ({n} of {total} models)" if 0 < n < total else ""


def _read(path: Path) -> pd.DataFrame | None:
    """A run's table (None when absent), the untouched model's rows only."""
    return read_untouched(path)


def variant_rows(name: str, pe: str, directory: str | os.PathLike, lengthgen: str = layout.LENGTHGEN,
                 intervention: str = NO_INTERVENTION) -> list[dict]:
    """The study rows of one variant (:data:`COLUMNS`), task by task in the order number, letter;
    Fig. 5B and the reach from the ``intervention`` rows (default the untouched model's) of each run's
    ``lengthgen`` table, named in a :data:`Q_INTERVENTION` row when the tables hold several or it is
    not ``none``."""
    runs = layout.find_runs(directory)
    check_runs_alike(runs)
    training, pure = training_summary(runs), purity_counts(runs, GAMMA)
    curves = lengthgen_summary(runs, lengthgen, intervention)
    rows: list[dict] = []

    def add(task: str, quantity: str, mean: float, sd: float, n: int, cell: str, n_missing: int = 0,
            grid_end: int = -1) -> None:
        rows.append(dict(variant=name, pe=pe, task=task, quantity=quantity, mean=mean, sd=sd, n=n,
                         n_missing=n_missing, grid_end=grid_end, cell=cell))

    def from_summary(task: str, table: pd.DataFrame, source: str, quantity: str, digits: int, what: str) -> None:
        """The row of ``table`` whose quantity is ``source`` (pure heads: ``source (of N)``)."""
        names = table["quantity"].astype(str) if len(table) else None
        r = table[(table["task"] == task) & ((names == source) | names.str.startswith(source + " (of "))] \
            if len(table) else table
        if not len(r):
            add(task, quantity, math.nan, math.nan, 0, "—")
            return
        r = r.iloc[0]
        cell = _cell(r["mean"], r["sd"], int(r["n"]), digits)
        if "(of " in str(r["quantity"]):  # pure heads: out of the model's heads
            cell += " (" + str(r["quantity"]).rsplit("(", 1)[1]
        if r["n_missing"]:
            cell += f" ({int(r['n_missing'])} {what})"
        add(task, quantity, float(r["mean"]), float(r["sd"]), int(r["n"]), cell, int(r["n_missing"]))

    for task, seeds in runs.items():
        add(task, Q_SEEDS, float(len(seeds)), math.nan, len(seeds), f"{len(seeds)} ({', '.join(map(str, seeds))})")
        from_summary(task, training, "test acc", Q_TEST, 3, "not tested")
        for h in range(1, 5):
            from_summary(task, training, f"first step acc_hop{h} >= {REACH_THRESHOLD:g}", q_milestone(h), 0, "never")
        for kind in ("positional", "symbolic"):
            from_summary(task, pure, f"{kind} heads", q_pure(kind), 1, "without dynamics")
        freq = {s: t for s, t in ((s, _read(d / layout.FREQ_TABLE)) for s, d in seeds.items()) if t is not None}
        ids, unrot, unused = dominant_ids(list(freq.values()))
        add(task, Q_DOMINANT, math.nan, math.nan, len(freq), dominant_text(ids, unrot, unused) if freq else "—")
        positional = []  # the freq_table rows of each seed's pure positional heads (the Index heads of Paper A)
        for s, t in freq.items():
            kinds = _read(seeds[s] / layout.purity(GAMMA))
            if kinds is not None:
                keep = kinds.loc[kinds["kind"] == "positional", ["layer", "head"]]
                positional.append(t.merge(keep, on=["layer", "head"]))
        ids, unrot, unused = dominant_ids(positional)
        add(task, Q_DOMINANT_POSITIONAL, math.nan, math.nan, len(positional),
            (dominant_text(ids, unrot, unused) if ids or unrot or unused else "no such heads") if positional else "—")
        shares = [unrotated_share(t) for t in (_read(d / layout.FREQ_USE) for d in seeds.values()) if t is not None]
        m, s, n = mean_sd(shares)
        add(task, Q_UNROTATED, m, s, n, _cell(m, s, n, 2))
        curve = curves[curves["task"] == task] if len(curves) else curves
        shown = shown_note(intervention, lengthgen_interventions({task: seeds}, lengthgen))
        if shown:
            add(task, Q_INTERVENTION, math.nan, math.nan, 0, shown)
        for extra in paper.LENGTHGEN[task]:
            r = curve[curve["extra_tokens"] == extra] if len(curve) else curve
            if len(r):
                m, s, n = float(r["acc_mean"].iloc[0]), float(r["acc_sd"].iloc[0]), int(r["n_seeds"].iloc[0])
                add(task, q_accuracy(extra), m, s, n, _cell(m, s, n, 2) + _of_models(n, len(seeds)))
            else:
                add(task, q_accuracy(extra), math.nan, math.nan, 0, "— (not on the grid)" if len(curve) else "—")
        summaries = [t for t in (read_lengthgen_summary(layout.summary_path(d / lengthgen), intervention)
                                 for d in seeds.values()) if t is not None and len(t)]
        reaches, never, at_end, end = seed_reaches(summaries)
        m, s, n = mean_sd(reaches)
        cell = "+" + _cell(m, s, n, 0) if n else ("never" if never else "—")
        notes = ([f"{never} never"] if never and n else []) + ([f"{at_end} at the grid end +{end:,}"] if at_end else [])
        add(task, Q_REACH, m, s, n, cell + (f" ({'; '.join(notes)})" if notes else "")
            + _of_models(len(summaries), len(seeds)), never, end)
    return rows


def study_table(variants: Mapping[str, str | os.PathLike], pes: Mapping[str, str] | None = None,
                lengthgen: str = layout.LENGTHGEN, intervention: str = NO_INTERVENTION) -> pd.DataFrame:
    """Long table (:data:`COLUMNS`): one row per (variant, task, quantity); ``cell`` is the text shown.
    ``lengthgen``: the length-generalization table inside each run that Fig. 5B and the reach read;
    ``intervention``: whose rows of it (default the untouched model's)."""
    pes = dict(pes) if pes is not None else check_variants(variants)
    rows = [r for name, d in variants.items() for r in variant_rows(name, pes[name], d, lengthgen, intervention)]
    return pd.DataFrame(rows, columns=COLUMNS)


def study_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The study as header + rows: task, quantity, one cell per variant; the first row the ``--pe`` value
    each variant's runs were trained with."""
    variants = list(dict.fromkeys(table["variant"]))
    pe = table.drop_duplicates("variant").set_index("variant")["pe"]
    rows = [["", "--pe (posym.json)", *[str(pe[v]) for v in variants]]]
    for task, q in dict.fromkeys(zip(table["task"], table["quantity"])):
        sel = table[(table["task"] == task) & (table["quantity"] == q)].set_index("variant")["cell"]
        rows.append([task, q, *[str(sel[v]) if v in sel.index else "—" for v in variants]])
    return ["task", "quantity", *variants], rows


def study_markdown(table: pd.DataFrame, goal: str | None = None) -> str:
    """The study as one Markdown table (quantity rows, one column per variant), then the goal line."""
    header, rows = study_rows(table)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines + ([f"\n{goal}"] if goal else []))


def goal_line(table: pd.DataFrame, factor: float = GOAL_FACTOR, min_accuracy: float = GOAL_ACCURACY) -> str:
    """Whether a variant reaches the goal on the number task: mean test accuracy >= ``min_accuracy`` and
    mean reach >= ``factor`` × the mean reach of the first variant trained with ``--pe rope``."""
    num = table[table["task"] == "number"]

    def value(v: str, q: str) -> float:
        r = num[(num["variant"] == v) & (num["quantity"] == q)]["mean"]
        return float(r.iloc[0]) if len(r) else math.nan

    head = f"goal (number task: test accuracy ≥ {min_accuracy:g} and reach ≥ {factor:g} × rope's)"
    base = [v for v in dict.fromkeys(num["variant"]) if (num[num["variant"] == v]["pe"] == BASELINE_PE).any()]
    if not base:
        return f"{head}: not evaluated — no variant's number-task runs were trained with --pe {BASELINE_PE}"
    b = base[0]
    reach_b = value(b, Q_REACH)
    if not reach_b > 0:
        return f"{head}: not evaluated — the {b} variant's reach is {'+0' if reach_b == 0 else 'undefined'}"
    target = factor * reach_b
    head = (f"goal (number task: test accuracy ≥ {min_accuracy:g} and reach ≥ {factor:g} × {b}'s +{reach_b:,.0f} "
            f"= +{target:,.0f})")
    others = [v for v in dict.fromkeys(num["variant"]) if v != b]
    met, short = [], []
    for v in others:
        acc, reach = value(v, Q_TEST), value(v, Q_REACH)
        text = f"{v} (reach +{reach:,.0f}, accuracy {acc:.3f})" if math.isfinite(reach) else f"{v} (no reach, accuracy {acc:.3f})"
        (met if acc >= min_accuracy and reach >= target else short).append((v, reach, acc, text))
    if met:
        return f"{head}: met by " + ", ".join(t for *_, t in met)
    learned = [x for x in short if x[2] >= min_accuracy and math.isfinite(x[1])]
    if not learned:
        return f"{head}: not met — no other variant keeps test accuracy ≥ {min_accuracy:g}"
    v, reach, _, text = max(learned, key=lambda x: x[1])
    ends = num[(num["variant"] == v) & (num["quantity"] == Q_REACH)]["grid_end"]
    end = int(ends.iloc[0]) if len(ends) else -1
    tail = (f"; its grid ends at +{end:,}, below the bar: measure it on a longer grid"
            if 0 <= end < target and reach >= end else "")
    return f"{head}: not met — the largest reach with accuracy ≥ {min_accuracy:g} is {text}{tail}"


# ------------------------------------------------------------------------------------------------
# the figures' tables
# ------------------------------------------------------------------------------------------------
def pure_count_curves(variants: Mapping[str, str | os.PathLike], gamma: float = GAMMA) -> pd.DataFrame:
    """Fig. 2's pure-head counts over training of every variant (``pure_counts_gamma{γ}.csv`` of each
    run): variant, task, step, positional_mean, positional_sd, symbolic_mean, symbolic_sd, n_seeds."""
    cols = ["variant", "task", "step", "positional_mean", "positional_sd", "symbolic_mean", "symbolic_sd", "n_seeds"]
    frames = []
    for name, d in variants.items():
        for task, seeds in layout.find_runs(d).items():
            parts = [t.assign(seed=s) for s, t in ((s, _read(r / layout.pure_counts_csv(gamma))) for s, r in seeds.items())
                     if t is not None]
            if not parts:
                continue
            g = pd.concat(parts, ignore_index=True).groupby("step")
            out = pd.DataFrame({"variant": name, "task": task, "step": sorted(g.groups)})
            for kind in ("positional", "symbolic"):
                out[f"{kind}_mean"] = g[kind].mean().to_numpy(float)
                out[f"{kind}_sd"] = g[kind].std(ddof=1).to_numpy(float)
            out["n_seeds"] = g["seed"].nunique().to_numpy()
            frames.append(out)
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def fig5b_curves(variants: Mapping[str, str | os.PathLike], lengthgen: str = layout.LENGTHGEN,
                 intervention: str = NO_INTERVENTION) -> pd.DataFrame:
    """Fig. 5B of every variant, mean ± sd over its seeds (:func:`posym.report.aggregate.lengthgen_summary`
    of the ``intervention`` rows of its runs' ``lengthgen`` tables): variant, task, intervention,
    extra_tokens, acc_mean, acc_sd, n_seeds — what :func:`posym.studies._figures.plot_variant_curves` draws."""
    cols = ["variant", "task", INTERVENTION, "extra_tokens", "acc_mean", "acc_sd", "n_seeds"]
    frames = [lengthgen_summary(layout.find_runs(d), lengthgen, intervention).assign(variant=name)
              for name, d in variants.items()]
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


__all__ = ["check_variants", "dominant_ids", "dominant_text", "fig5b_curves", "goal_line", "pure_count_curves",
           "seed_reaches", "study_markdown", "study_rows", "study_table", "unrotated_share", "variant_pe", "variant_rows"]
