"""Sensitivity of Paper A's numbers to training choices, and whether head discrepancy predicts
length extrapolation (a first step).

A *variant* is a reproduction directory (``DIR/<task>/seed<k>/`` run directories plus
``DIR/aggregate/``, as ``posym reproduce`` writes) trained or selected with one documented setting —
or, for a variant that changes only how Fig. 5B is measured (e.g. another extra-token rule on the same
models), one or more ``posym lengthgen --out X.csv`` tables (comma-separated ``.csv`` paths; their
``X_summary.csv`` beside them), which give only the Fig. 5B rows and no models to predict from. Each
table is one model (several tables of one task: mean ± sd over them, as over seeds; one file twice,
or two tables of the same model and task, are refused); every table is value-checked when read.

Rows of different inference-time interventions are never averaged or put side by side under one
name: Fig. 5B shows the untouched model (``intervention == "none"``), or the one ``intervention``
selects for the Fig. 5B-only variants, and :func:`intervention_notes` says which when the tables
hold others (the ``intervention`` column of the tables).

* :func:`sensitivity_table` lines up the paper-vs-posym rows (Fig. 2 milestones, pure heads at
  γ = 0.1, Fig. 5B) of every variant: one row per (variant, task, quantity), mean ± sd over seeds.
* :func:`extrapolation_prediction` measures, for every model of every variant, the discrepancy Δ
  (SPEC §4: largest logit minus the largest logit outside the arg-max set) of its last-query logits
  at the training length, averaged over its pure positional and over its pure symbolic heads, and
  pairs it with the largest added length at which the model's accuracy stays >= 0.9 (Fig. 5B).
  :func:`rank_correlation` is Spearman's rho with an exact permutation p-value (Monte Carlo above 8
  models).
* :func:`variant_curves` — Fig. 5B of every variant side by side (drawn by
  :func:`posym.studies._figures.plot_variant_curves`: one panel per task, Paper A's points as markers).
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from posym import checks
from posym.constants import GAMMA
from posym.errors import PosymError
from posym.report.aggregate import (SUMMARY_REMEDY, check_one_curve, fig5b_rows, curve_reach,
                                    read_lengthgen_summary, read_untouched, shown_note)
from posym.runs import layout
from posym.runs.tables import INTERVENTION, NO_INTERVENTION, RUN_TABLES, check_rows
from posym.studies._kit import cell, check_variant_paths

#: The rows of the paper-vs-posym table the study compares (sections and quantity prefixes).
STUDY_ROWS: tuple[tuple[str, str], ...] = (
    ("Fig. 2 (training)", "first step"),
    ("Fig. 2 (training)", "test acc"),
    ("Pure heads (γ = 0.1)", ""),
    ("Fig. 5B (length generalization)", ""),
)


def lengthgen_tables(value: str | os.PathLike) -> list[Path] | None:
    """The ``posym lengthgen`` tables of a Fig. 5B-only variant (``a.csv[,b.csv…]``), else None."""
    parts = [x for x in str(value).split(",") if x]
    return [Path(x) for x in parts] if parts and all(x.endswith(".csv") for x in parts) else None


def _variant_dirs(variants: Mapping[str, str | os.PathLike]) -> dict[str, Path]:
    """The reproduction directories among ``variants`` (the Fig. 5B-only ones are left out)."""
    out = {}
    for name, d in variants.items():
        if lengthgen_tables(d) is not None:
            continue
        p = Path(d)
        if not layout.aggregate_table(p, "paper_vs_posym").is_file():
            raise PosymError(f"variant {name}: {p} has no aggregate/paper_vs_posym.csv (run posym reproduce or "
                             "posym report on it first)")
        out[name] = p
    return out


def check_table_list(name: str, tables: list[Path]) -> None:
    """PosymError when a Fig. 5B-only variant lists one table twice (its rows would count twice)."""
    seen: dict[Path, Path] = {}
    for p in tables:
        key = p.resolve()
        if key in seen:
            also = f" (also as {seen[key]})" if str(seen[key]) != str(p) else ""
            raise PosymError(f"variant {name!r} lists {p} twice{also}; give each table once")
        seen[key] = p


def check_variants(variants: Mapping[str, str | os.PathLike]) -> dict[str, str | os.PathLike]:
    """``variants`` checked: no table listed twice in one variant (:func:`check_table_list`), then
    :func:`posym.studies._kit.check_variant_paths` (every folder and ``lengthgen`` table present, none
    given under two names)."""
    what = "reproduction directory or lengthgen table(s)"
    for name, value in checks.check_variants(variants, what).items():
        listed = lengthgen_tables(value)
        if listed is not None:
            check_table_list(name, listed)
    return check_variant_paths(variants, what, lengthgen_tables)


def _lengthgen_curve(name: str, path: Path, intervention: str = NO_INTERVENTION
                     ) -> tuple[str, pd.DataFrame, str, list[str]]:
    """Task, Fig. 5B curve of ``intervention`` (``X_summary.csv``, one model: n_seeds = 1), the model's
    weights digest ("" if the table has none) and every intervention the summary holds, of one table of
    a Fig. 5B-only variant; both files value-checked (``posym.runs.tables.check_rows``); PosymError
    naming the variant when a file is missing, holds several tasks or no rows of ``intervention``."""
    summary = layout.summary_path(path)
    if not (path.is_file() and summary.is_file()):
        raise PosymError(f"variant {name}: no lengthgen table {path} with its {summary.name} (run posym "
                         f"lengthgen RUN --out {path})")
    table = check_rows(path, RUN_TABLES["lengthgen"], SUMMARY_REMEDY)
    tasks = table["task"].unique()
    if len(tasks) != 1:
        raise PosymError(f"variant {name}: {path} holds tasks {list(tasks)}; give one table per task")
    weights = ",".join(sorted(map(str, table["weights"].dropna().unique()))) if "weights" in table else ""
    every = read_lengthgen_summary(summary, None)
    present = list(dict.fromkeys(every[INTERVENTION]))
    curve = every[every[INTERVENTION] == intervention].reset_index(drop=True)
    if not len(curve):
        raise PosymError(f"variant {name}: {summary} holds no rows of intervention {intervention!r} (it holds "
                         f"{', '.join(present) or 'no rows'}); choose one of those with --intervention")
    return str(tasks[0]), curve.assign(n_seeds=1), weights, present


def _lengthgen_curves(name: str, tables: list[Path], intervention: str = NO_INTERVENTION
                      ) -> tuple[dict[str, pd.DataFrame], dict[str, list[float]], list[str]]:
    """Per task of a Fig. 5B-only variant: its Fig. 5B curve (one model per table: mean ± sd over the
    tables of the task, ``n_seeds`` the tables with the point), each table's reach, and every
    intervention the tables hold. PosymError for one table twice or two tables of one model."""
    check_table_list(name, tables)
    by_task: dict[str, list[pd.DataFrame]] = {}
    reaches: dict[str, list[float]] = {}
    models: dict[tuple[str, str], Path] = {}
    present: dict[str, None] = {}
    for path in tables:
        task, curve, weights, ivs = _lengthgen_curve(name, path, intervention)
        present.update(dict.fromkeys(ivs))
        if weights and (task, weights) in models:
            raise PosymError(f"variant {name!r}: {models[task, weights]} and {path} measure the same {task} model "
                             f"(weights {weights}); give one table per model")
        models[task, weights] = path
        check_one_curve(curve, str(path))
        by_task.setdefault(task, []).append(curve.assign(model=len(by_task.get(task, []))))
        reaches.setdefault(task, []).append(curve_reach(curve))
    curves = {}
    for task, parts in by_task.items():
        df = pd.concat(parts, ignore_index=True)
        g = df.groupby("extra_tokens")
        out = pd.DataFrame({INTERVENTION: intervention, "extra_tokens": sorted(df["extra_tokens"].unique())})
        out["acc_mean"] = g["acc_mean"].mean().to_numpy()
        out["acc_sd"] = g["acc_mean"].std(ddof=1).to_numpy()  # over models (tables); one model: NaN
        out["n_seeds"] = g["model"].nunique().to_numpy()
        curves[task] = out
    return curves, reaches, list(present)


def _lengthgen_rows(name: str, tables: list[Path], intervention: str = NO_INTERVENTION) -> pd.DataFrame:
    """The Fig. 5B rows of a Fig. 5B-only variant: one model per table (n = the tables of the task)."""
    curves, reaches, present = _lengthgen_curves(name, tables, intervention)
    note = shown_note(intervention, present)
    rows = [r for task, curve in curves.items() for r in fig5b_rows(task, curve, reaches[task], note)]
    return pd.DataFrame(rows).assign(variant=name, **{INTERVENTION: intervention})


def intervention_notes(variants: Mapping[str, str | os.PathLike], intervention: str = NO_INTERVENTION
                       ) -> dict[str, str]:
    """Per Fig. 5B-only variant whose tables hold other interventions than the one shown (or when that
    is not ``none``): which intervention its Fig. 5B rows show (:func:`posym.report.aggregate.shown_note`)."""
    notes = {}
    for name, value in variants.items():
        tables = lengthgen_tables(value)
        if tables is not None:
            note = shown_note(intervention, _lengthgen_curves(name, tables, intervention)[2])
            if note:
                notes[name] = note
    return notes


def sensitivity_table(variants: Mapping[str, str | os.PathLike], intervention: str = NO_INTERVENTION) -> pd.DataFrame:
    """Long table: variant, section, task, quantity, paper_text, posym_mean, posym_sd, n, intervention
    (whose rows: ``intervention`` for the Fig. 5B-only variants, the untouched model for the
    reproductions' paper-vs-posym rows)."""
    dirs = _variant_dirs(variants)
    frames = []
    for name, value in variants.items():
        tables = lengthgen_tables(value)
        if tables is not None:
            frames.append(_lengthgen_rows(name, tables, intervention))
            continue
        pv = pd.read_csv(layout.aggregate_table(dirs[name], "paper_vs_posym"))
        keep = np.zeros(len(pv), dtype=bool)
        for section, prefix in STUDY_ROWS:
            keep |= (pv["section"] == section) & pv["quantity"].astype(str).str.startswith(prefix)
        frames.append(pv[keep].assign(variant=name, **{INTERVENTION: NO_INTERVENTION}))
    cols = ["variant", "section", "task", "quantity", "paper_text", "posym_mean", "posym_sd", "n", INTERVENTION]
    return pd.concat(frames, ignore_index=True)[cols]


def variant_curves(variants: Mapping[str, str | os.PathLike], intervention: str = NO_INTERVENTION) -> pd.DataFrame:
    """Fig. 5B of every variant: variant, task, intervention, extra_tokens, acc_mean, acc_sd, n_seeds (a
    reproduction's ``aggregate/lengthgen.csv``, mean ± sd over its seeds, untouched model; a Fig. 5B-only
    variant's tables, one model per table, ``intervention``'s rows)."""
    dirs = _variant_dirs(variants)
    frames = []
    for name, value in variants.items():
        tables = lengthgen_tables(value)
        if tables is None:
            t = read_untouched(layout.aggregate_table(dirs[name], "lengthgen"))  # the untouched rows
            if t is not None:
                frames.append(t.assign(variant=name, **{INTERVENTION: NO_INTERVENTION}))
            continue
        for task, curve in _lengthgen_curves(name, tables, intervention)[0].items():
            frames.append(curve.assign(variant=name, task=task))
    cols = ["variant", "task", INTERVENTION, "extra_tokens", "acc_mean", "acc_sd", "n_seeds"]
    return pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)


def _cell(mean: float, sd: float, n: int, quantity: str = "") -> str:
    """One variant's cell: head counts with one decimal, numbers >= 10 whole, else two decimals."""
    return cell(mean, sd, n, 1 if "heads" in quantity else (0 if abs(mean) >= 10 else 2))


def sensitivity_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The study as header + rows: task, quantity, Paper A's value, then one cell (mean ± sd over
    seeds) per variant."""
    variants = list(dict.fromkeys(table["variant"]))
    rows_out = []
    for task, q in dict.fromkeys(zip(table["task"], table["quantity"])):
        rows = table[(table["task"] == task) & (table["quantity"] == q)]
        paper = rows["paper_text"].dropna().astype(str)
        cells = []
        for v in variants:
            r = rows[rows["variant"] == v]
            cells.append(_cell(float(r["posym_mean"].iloc[0]), float(r["posym_sd"].iloc[0]), int(r["n"].iloc[0]), q)
                         if len(r) else "—")
        rows_out.append([task, q, paper.iloc[0] if len(paper) else "—", *cells])
    return ["task", "quantity", "Paper A", *variants], rows_out


def sensitivity_markdown(table: pd.DataFrame) -> str:
    """The study as one Markdown table: quantity rows, one column per variant, and Paper A's value."""
    header, rows = sensitivity_rows(table)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


def extrapolation_prediction(variants: Mapping[str, str | os.PathLike], gamma: float = GAMMA, n: int = 256,
                             progress: bool = True, done: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """One row per model: variant, task, seed, delta_positional, delta_symbolic (mean Δ at +0 over the
    model's pure heads of each kind; NaN without such heads), n_positional, n_symbolic, largest_09.

    ``done``: variant name -> its rows measured before with the same ``n`` (a Slurm job's
    :func:`read_prediction_rows`); taken as they are, in that variant's place, when they hold exactly
    its models (task, seed), else the variant is measured again."""
    from posym.runs.resolve import resolve_model  # looked up at call time (tests replace it)
    from posym.theory.trained import trained_discrepancy

    models = [(name, task, seed, run, run / layout.purity(gamma), layout.summary_path(run / layout.LENGTHGEN))
              for name, d in _variant_dirs(variants).items()
              for task, seeds in layout.find_runs(d).items() for seed, run in seeds.items()]
    reach = {}
    for *_, run, purity_path, lg_path in models:  # every model checked before the first is loaded
        if not (purity_path.is_file() and lg_path.is_file()):
            raise PosymError(f"{run} lacks {purity_path.name} or {lg_path.name} (run its analyses first)")
        reach[run] = curve_reach(read_lengthgen_summary(lg_path))  # the untouched model's reach, value-checked
    done = {name: rows for name, rows in (done or {}).items()
            if sorted(zip(rows["task"], rows["seed"])) == sorted((t, s) for v, t, s, *_ in models if v == name)}
    rows, taken = [], set()
    for name, task, seed, run, purity_path, lg_path in models:
        if name in done:
            if name not in taken:
                taken.add(name)
                rows += done[name].to_dict("records")
            continue
        purity = pd.read_csv(purity_path)
        model, _, _ = resolve_model(run, task=task)
        delta = trained_discrepancy(model, task, grid=[0], n=n, progress=progress)
        merged = delta.merge(purity[["layer", "head", "kind"]], on=["layer", "head"])
        row = {"variant": name, "task": task, "seed": seed}
        for kind in ("positional", "symbolic"):
            sel = merged[merged["kind"] == kind]["delta_mean"]
            row[f"delta_{kind}"] = float(sel.mean()) if len(sel) else math.nan
            row[f"n_{kind}"] = int(len(sel))
        row["largest_09"] = reach[run]
        rows.append(row)
    return pd.DataFrame(rows)


#: The column types of a prediction table (:func:`extrapolation_prediction`), as read back.
PREDICTION_TYPES: dict[str, type] = {"variant": str, "task": str, "seed": int, "delta_positional": float,
                                     "n_positional": int, "delta_symbolic": float, "n_symbolic": int,
                                     "largest_09": float}


def read_prediction_rows(path: str | os.PathLike) -> pd.DataFrame | None:
    """The rows of a prediction table written by :func:`extrapolation_prediction` (exact floats, the
    column types it writes), or None when the file is missing or not such a table."""
    try:
        t = pd.read_csv(path, dtype={"variant": str, "task": str})
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return None
    if list(t.columns) != list(PREDICTION_TYPES) or t.empty:
        return None
    try:
        return t.astype(PREDICTION_TYPES)
    except (TypeError, ValueError):
        return None


def rank_correlation(x: np.ndarray, y: np.ndarray, n_perm: int = 20000, seed: int = 0) -> tuple[float, float, int]:
    """Spearman's rho of the finite pairs, two-sided permutation p-value, and the number of pairs.

    Exact over all permutations up to 8 pairs, else ``n_perm`` random permutations with the observed
    order counted among them, p = (hits + 1) / (n_perm + 1), so an estimate is never 0 (Phipson & Smyth
    2010)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    m = len(x)
    if m < 3:
        return math.nan, math.nan, m
    rx = pd.Series(x).rank().to_numpy()
    ry = pd.Series(y).rank().to_numpy()

    def rho(a, b):
        a, b = a - a.mean(), b - b.mean()
        den = math.sqrt((a * a).sum() * (b * b).sum())
        return float((a * b).sum() / den) if den > 0 else math.nan

    r = rho(rx, ry)
    if not math.isfinite(r):
        return r, math.nan, m
    if m <= 8:
        perms = (np.asarray(p) for p in itertools.permutations(range(m)))
        total = math.factorial(m)
    else:
        g = np.random.default_rng(seed)
        perms = (g.permutation(m) for _ in range(n_perm))
        total = n_perm
    hits = sum(abs(rho(rx, ry[p])) >= abs(r) - 1e-12 for p in perms)
    return r, (hits / total if m <= 8 else (hits + 1) / (total + 1)), m


def p_text(p: float) -> str:
    """A p-value for a sentence: two decimals, or one significant digit below 0.01 (never "0.00")."""
    return f"{p:.2f}" if p >= 0.01 else f"{p:.1g}"


def _correlations(pred: pd.DataFrame, kind: str) -> list[str]:
    """Spearman rho of Δ of the ``kind`` heads vs the largest length >= 0.9: over all models, then within
    each task with at least 3 such models (the tasks differ in both Δ and reach, so a pooled rho can be
    the task difference alone)."""
    col = f"delta_{kind}"

    def text(g: pd.DataFrame, what: str, unit: str) -> str:
        r, p, m = rank_correlation(g[col].to_numpy(), g["largest_09"].to_numpy())
        rho = "undefined (one side constant)" if m >= 3 and math.isnan(r) else f"{r:.2f} (p = {p_text(p)}, {m}{unit})"
        return f"{what} rho {rho}"

    parts = [text(pred, "all models", " models")]
    parts += [text(g, str(task), "") for task, g in pred.groupby("task", sort=False) if g[col].notna().sum() >= 3]
    return parts


def prediction_correlations(pred: pd.DataFrame) -> dict[str, list[str]]:
    """:func:`_correlations` of each head kind (positional, symbolic), computed once for text and figure."""
    return {kind: _correlations(pred, kind) for kind in ("positional", "symbolic")}


def prediction_findings(pred: pd.DataFrame, correlations: Mapping[str, list[str]] | None = None) -> list[str]:
    """One line per head kind with the correlations of :func:`prediction_correlations`."""
    correlations = correlations or prediction_correlations(pred)
    return [f"Δ of pure {kind} heads vs largest length >= 0.9, Spearman: " + "; ".join(parts)
            for kind, parts in correlations.items()]


__all__ = ["PREDICTION_TYPES", "STUDY_ROWS", "check_table_list", "check_variants", "extrapolation_prediction", "intervention_notes",
           "lengthgen_tables", "p_text", "prediction_correlations", "prediction_findings", "rank_correlation",
           "read_prediction_rows", "sensitivity_markdown", "sensitivity_rows", "sensitivity_table", "variant_curves"]
