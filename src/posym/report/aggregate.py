"""Multi-seed aggregation of a reproduction directory: mean ± sd over seeds.

Reads only saved tables of the per-seed run directories ``DIR/<task>/seed<k>/`` written by
``posym reproduce`` (metrics.csv, purity_gamma*.csv, freq_table.csv, ablation.csv,
lengthgen_summary.csv, scores.csv), plus ``DIR/theory/discrepancy.csv`` and the ``llm_table.csv`` of
every model and protocol under ``DIR/llm/`` (``llm`` is the first model's generate table, ``llm_models``
all of them),
and produces tidy tables with one ``mean`` / ``sd`` / ``n`` triple per quantity:

* ``sd`` is the sample standard deviation over seeds (ddof = 1); with one seed it is **NaN** (shown
  as "n/a" in the report), never a fake 0;
* ``n`` counts the seeds that have the quantity (an emergence step is missing for a seed whose hop
  never reached 0.9; such seeds are left out of the mean and counted in ``n_missing``).

Rows that differ are never averaged together. A run's tables may hold rows measured under several
inference-time interventions (an ``intervention`` column: ``posym lengthgen --intervene``, ``posym
freqs --intervene``, ``posym scores --intervene``); every table here shows the untouched model's
rows (``intervention == "none"``; a table without the column is untouched) unless a function's
``intervention`` argument selects another (``None``: every intervention, kept apart), and the
length-generalization tables carry the ``intervention`` column. Tasks are aggregated apart, and the
runs of one task must agree on the positional encoding and the model settings
(:func:`check_runs_alike`). The length-generalization summaries are value-checked when read
(:func:`read_lengthgen_summary`: accuracies in [0, 1], integer added lengths >= 0, no point twice).

:func:`aggregate` computes every table, writes them to ``DIR/aggregate/*.csv`` with two figures
(validation accuracy per hop with ± sd bands; Fig. 5B with bands over seeds) and returns them.
:func:`paper_vs_posym` is the one-table summary of the report: each number of Paper A (SPEC §5)
beside ours and the difference.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from posym.constants import GAMMA, REACH_THRESHOLD
from posym.errors import PosymError
from posym.lengthgen.trained import largest_length_above as _largest
from posym.model.pe import DEFAULT_PE, parse_pe
from posym.runs import layout
from posym.runs.tables import INTERVENTION, NO_INTERVENTION, RUN_TABLES, check_rows, read_checked, read_table, write_table
from posym.runs.layout import find_runs
from posym.report import paper
from posym.report import verdict as V
from posym.report.format import mean_sd
from posym.report.paper import PAPER_DISCREPANCY, PAPER_LETTER_09_LENGTH, PAPER_TABLE3

HOPS = [f"acc_hop{h}" for h in range(1, 5)]
ACC_COLS = ["acc"] + HOPS

KINDS = ("positional", "symbolic", "mixed")
#: Heads of Paper A's model (12 layers × 1 head, SPEC §2): the total its pure-head counts are out of.
PAPER_HEADS = 12


# ------------------------------------------------------------------------------------------------
# discovery and small helpers
# ------------------------------------------------------------------------------------------------
def _row(values: Sequence, **extra) -> dict:
    m, s, n = mean_sd(values)
    per_seed = ", ".join("—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else _short(v)
                         for v in values)
    return {**extra, "mean": m, "sd": s, "n": n, "n_missing": len(values) - n, "per_seed": per_seed}


def _short(v) -> str:
    f = float(v)
    return str(int(f)) if f.is_integer() and abs(f) >= 10 else f"{f:.3g}"


def seeds_text(n: int) -> str:
    """What a curve over ``n`` seeds is: "mean ± sd over n seeds", or "1 seed" (no sd) for one."""
    return "1 seed" if n == 1 else f"mean ± sd over {n} seeds"


def read_untouched(path: Path, intervention: str = NO_INTERVENTION) -> pd.DataFrame | None:
    """The table at ``path`` (None when absent); of a table with an ``intervention`` column only the
    rows of ``intervention`` (default the untouched model's), so no aggregate mixes interventions."""
    if not path.is_file():
        return None
    # a run's own table is checked against its documented columns (docs/runs.md); aggregate/ holds others
    t = (read_table(path) if path.parent.name in (layout.AGGREGATE, layout.THEORY, layout.LLM)
         else read_checked(path, key_only=True))
    if INTERVENTION in t.columns:
        t = t[t[INTERVENTION].astype(str) == intervention].reset_index(drop=True)
    return t



#: What to do about a length-generalization summary that fails its checks.
SUMMARY_REMEDY = "measure it again (posym lengthgen RUN --out TABLE.csv --force)"


def read_lengthgen_summary(path: str | os.PathLike, intervention: str | None = NO_INTERVENTION
                           ) -> pd.DataFrame | None:
    """A run's length-generalization summary (``X_summary.csv`` of ``posym lengthgen --out X.csv``),
    checked against its schema (``posym.runs.tables.check_rows``: accuracies in [0, 1], integer added
    lengths >= 0, known columns, no (intervention, added length) twice; PosymError naming the file,
    row and column otherwise), with an ``intervention`` column (``none`` where the table has none)
    and only the rows of ``intervention`` (``None``: all). None when the file does not exist."""
    path = Path(path)
    if not path.is_file():
        return None
    t = check_rows(path, RUN_TABLES["lengthgen_summary"], SUMMARY_REMEDY)
    if INTERVENTION not in t.columns:
        t.insert(0, INTERVENTION, NO_INTERVENTION)
    t[INTERVENTION] = t[INTERVENTION].astype(str)
    return t if intervention is None else t[t[INTERVENTION] == intervention].reset_index(drop=True)


def lengthgen_interventions(runs: dict[str, dict[int, Path]], table: str = layout.LENGTHGEN) -> list[str]:
    """Every intervention the runs' ``table`` summaries hold, in order of appearance (``none`` for a
    table without the column)."""
    seen: dict[str, None] = {}
    for seeds in runs.values():
        for d in seeds.values():
            t = read_lengthgen_summary(layout.summary_path(d / table), None)
            if t is not None:
                seen.update(dict.fromkeys(t[INTERVENTION]))
    return list(seen)


def shown_note(shown: str, present: Sequence[str]) -> str:
    """"" when the tables hold only ``shown``; else which intervention is shown and which others the
    tables hold (``untouched model (intervention none); the tables also hold ntk:kappa=4``)."""
    others = [p for p in present if p != shown]
    if not others and shown == NO_INTERVENTION:
        return ""
    what = "untouched model (intervention none)" if shown == NO_INTERVENTION else f"intervention {shown}"
    return what + (f"; the tables also hold {', '.join(others)} (not shown)" if others else "")


def check_one_curve(curve: pd.DataFrame, what: str = "a length-generalization curve") -> pd.DataFrame:
    """``curve`` if it is one curve: one intervention, each added length once; PosymError otherwise."""
    if not len(curve):
        return curve
    if INTERVENTION in curve.columns and curve[INTERVENTION].nunique() > 1:
        raise PosymError(f"{what} mixes the interventions {', '.join(map(str, dict.fromkeys(curve[INTERVENTION])))}; "
                         "select one (intervention=...)")
    dup = curve["extra_tokens"].duplicated()
    if dup.any():
        raise PosymError(f"{what} has several rows for +{int(curve['extra_tokens'][dup].iloc[0])} added tokens; "
                         "give one table per model and intervention")
    return curve


def run_pe(run_dir: Path, strict: bool = True) -> str:
    """The canonical training-time positional encoding of a run (``posym.json``'s ``config.pe``; absent
    = ``rope``); an unparseable value is a PosymError, or with ``strict=False`` returned as written."""
    value = _run_config(run_dir).get("pe") or DEFAULT_PE
    try:
        return parse_pe(value).name
    except PosymError:
        if strict:
            raise
        return str(value)


def run_arch(run_dir: Path) -> str:
    """The architecture family a run was trained with (``posym.json``'s ``config.arch``; absent =
    ``gptj``, the runs written before ``posym train --arch`` existed)."""
    return str(_run_config(run_dir).get("arch") or "gptj")


#: The settings the runs of one task must share to be aggregated as seeds of one model.
ALIKE = ("arch", "pe", "model_overrides")


def check_runs_alike(runs: dict[str, dict[int, Path]]) -> None:
    """PosymError when two runs of one task differ in their architecture (``config.arch``; absent =
    ``gptj``), their training-time positional encoding (``posym.json``'s ``config.pe``; absent =
    ``rope``) or their model settings (``model_overrides``): their tables would be averaged as seeds
    of one model."""
    for task, seeds in runs.items():
        first = None
        for d in seeds.values():
            cfg = _run_config(d)
            ident = {"arch": run_arch(d), "pe": run_pe(d, strict=False),
                     "model_overrides": json.dumps(cfg.get("model_overrides") or {}, sort_keys=True)}
            if first is None:
                first = (d, ident)
                continue
            for k in ALIKE:
                if ident[k] != first[1][k]:
                    raise PosymError(f"the {task} runs differ in {k} ({first[0]}: {first[1][k]}, {d}: {ident[k]}); "
                                     "aggregate the runs of one setting (one reproduction directory per setting)")


# ------------------------------------------------------------------------------------------------
# per-quantity tables
# ------------------------------------------------------------------------------------------------
def first_step(metrics: pd.DataFrame, column: str, threshold: float = REACH_THRESHOLD) -> float:
    val = metrics[metrics["split"] == "val"].sort_values("step")
    hit = val[val[column] >= threshold]
    return float(hit["step"].iloc[0]) if len(hit) else math.nan


def training_summary(runs: dict[str, dict[int, Path]], threshold: float = REACH_THRESHOLD) -> pd.DataFrame:
    """Per task: final test accuracy (global, per hop), first validation step each reaches
    ``threshold`` (emergence), and validation accuracy at Paper A's steps; mean ± sd over seeds.
    Columns: task, quantity, mean, sd, n, n_missing, per_seed, paper."""
    rows = []
    for task, seeds in runs.items():
        ms = {s: read_untouched(d / layout.METRICS) for s, d in seeds.items()}
        ms = {s: m for s, m in ms.items() if m is not None}
        if not ms:
            continue
        for col in ACC_COLS:
            vals = []
            for m in ms.values():
                test = m[m["split"] == "test"]
                vals.append(float(test[col].iloc[-1]) if len(test) and col in test else math.nan)
            rows.append(_row(vals, task=task, quantity=f"test {col}",
                             paper=paper.LENGTHGEN[task][0] if col == "acc" else math.nan))
        for col in HOPS:
            vals = [first_step(m, col, threshold) if col in m else math.nan for m in ms.values()]
            rows.append(_row(vals, task=task, quantity=f"first step {col} >= {threshold:g}",
                             paper=paper.HOP_09_STEP[task][col]))
        for step, acc in paper.ACC_AT_STEP[task].items():
            vals = []
            for m in ms.values():
                v = m[(m["split"] == "val") & (m["step"] == step)]
                vals.append(float(v["acc"].iloc[0]) if len(v) else math.nan)
            rows.append(_row(vals, task=task, quantity=f"val acc @ step {step}", paper=acc))
    return pd.DataFrame(rows, columns=["task", "quantity", "mean", "sd", "n", "n_missing", "per_seed", "paper"])


def accuracy_curves(runs: dict[str, dict[int, Path]]) -> pd.DataFrame:
    """Validation accuracy over training, mean and sd over seeds per (task, step):
    columns task, step, {acc, acc_hop1..4}_mean / _sd, n_seeds."""
    frames = []
    for task, seeds in runs.items():
        parts = []
        for s, d in seeds.items():
            m = read_untouched(d / layout.METRICS)
            if m is not None:
                parts.append(m[m["split"] == "val"].assign(seed=s))
        if not parts:
            continue
        df = pd.concat(parts, ignore_index=True)
        g = df.groupby("step")
        out = pd.DataFrame({"task": task, "step": sorted(df["step"].unique())})
        for c in ACC_COLS:
            if c in df:
                out[f"{c}_mean"] = g[c].mean().to_numpy()
                out[f"{c}_sd"] = g[c].std(ddof=1).to_numpy()
        out["n_seeds"] = g["seed"].nunique().to_numpy()
        frames.append(out)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["task", "step", "n_seeds"])


def purity_counts(runs: dict[str, dict[int, Path]], gamma: float = GAMMA) -> pd.DataFrame:
    """Pure-head counts at the final step (positional / symbolic / mixed) and the median step from
    which the pure heads of each kind stay pure; mean ± sd over seeds. Columns: task, gamma,
    quantity, mean, sd, n, n_missing, per_seed, paper."""
    rows = []
    for task, seeds in runs.items():
        tables = [read_untouched(d / layout.purity(gamma)) for d in seeds.values()]
        tables = [t for t in tables if t is not None]
        if not tables:
            continue
        n_heads = len(tables[0])
        ref = paper.PURE_HEADS[task]
        paper_counts = {"positional": len(ref["positional"]), "symbolic": len(ref["symbolic"]),
                        "mixed": PAPER_HEADS - len(ref["positional"]) - len(ref["symbolic"])}
        for kind in KINDS:
            vals = [float((t["kind"] == kind).sum()) for t in tables]
            rows.append(_row(vals, task=task, gamma=gamma, quantity=f"{kind} heads (of {n_heads})",
                             paper=paper_counts[kind]))
        for kind in ("positional", "symbolic"):
            vals = []
            for t in tables:
                pf = t.loc[t["kind"] == kind, "pure_from"].dropna()
                vals.append(float(pf.median()) if len(pf) else math.nan)
            rows.append(_row(vals, task=task, gamma=gamma, quantity=f"median step {kind} heads become pure",
                             paper=math.nan))
    return pd.DataFrame(rows, columns=["task", "gamma", "quantity", "mean", "sd", "n", "n_missing", "per_seed",
                                       "paper"])


PURITY_LAYER_COLUMNS = ["task", "gamma", "layer", "head", "kinds", "s_pos_mean", "s_pos_sd", "s_sym_mean", "s_sym_sd",
                        "pure_from_mean", "pure_from_sd", "pure_seeds", "n_seeds", "paper_kind"]
FREQ_SUMMARY_COLUMNS = ["task", "layer", "head", "weighted_id_mean", "weighted_id_sd", "dominant_id_mean",
                        "dominant_id_sd", "dominant_ids", "n", "paper_id", "paper_note"]


def purity_layers(runs: dict[str, dict[int, Path]], gamma: float = GAMMA) -> pd.DataFrame:
    """Per (task, layer, head): the final kind of each seed (e.g. ``symbolic ×2, mixed ×1``),
    s_POS / s_SYM at the end (mean ± sd), the step from which it is pure (mean over the seeds where
    it is), and Paper A's kind of that layer."""
    rows = []
    for task, seeds in runs.items():
        tables = [(s, read_untouched(d / layout.purity(gamma))) for s, d in seeds.items()]
        tables = [(s, t) for s, t in tables if t is not None]
        if not tables:
            continue
        ref = paper.PURE_HEADS[task]
        allt = pd.concat([t.assign(seed=s) for s, t in tables], ignore_index=True)
        for (layer, head), g in allt.groupby(["layer", "head"], sort=True):
            counts = g["kind"].value_counts()
            kinds = ", ".join(f"{k} ×{int(counts[k])}" for k in KINDS if k in counts)
            sp, sps, _ = mean_sd(g["s_pos_final"])
            ss, sss, _ = mean_sd(g["s_sym_final"])
            pf, pfs, npf = mean_sd(g["pure_from"])
            pk = ("positional" if layer in ref["positional"] else "symbolic" if layer in ref["symbolic"]
                  else "not pure")
            rows.append({"task": task, "gamma": gamma, "layer": int(layer), "head": int(head), "kinds": kinds,
                         "s_pos_mean": sp, "s_pos_sd": sps, "s_sym_mean": ss, "s_sym_sd": sss,
                         "pure_from_mean": pf, "pure_from_sd": pfs, "pure_seeds": npf, "n_seeds": len(g),
                         "paper_kind": pk})
    return pd.DataFrame(rows, columns=PURITY_LAYER_COLUMNS)


def initial_scores(runs: dict[str, dict[int, Path]]) -> pd.DataFrame:
    """Smallest of s_POS and s_SYM over all heads at step 0 (Paper A: both ≈ 1 at initialisation)."""
    rows = []
    for task, seeds in runs.items():
        vals = []
        for d in seeds.values():
            sc = read_untouched(d / layout.SCORES)
            if sc is None or not (sc["step"] == 0).any():
                vals.append(math.nan)
                continue
            s0 = sc[sc["step"] == 0]
            s0 = s0[np.isclose(s0["tau"], s0["tau"].min())]
            vals.append(float(min(s0["s_pos"].min(), s0["s_sym"].min())))
        rows.append(_row(vals, task=task, quantity="min(s_POS, s_SYM) over heads at step 0", paper=1.0))
    return pd.DataFrame(rows, columns=["task", "quantity", "mean", "sd", "n", "n_missing", "per_seed", "paper"])


def _concat_seeds(seeds: dict[int, Path], name: str) -> pd.DataFrame | None:
    """The ``name`` CSV of every seed's run directory that has one, concatenated (None when none has)."""
    tables = [t for t in (read_untouched(d / name) for d in seeds.values()) if t is not None]
    return pd.concat(tables, ignore_index=True) if tables else None


def freq_summary(runs: dict[str, dict[int, Path]]) -> pd.DataFrame:
    """Table 1 over seeds: weighted-average and dominant frequency ID per (task, layer, head)
    (mean ± sd), with Paper A's ID of the layer (number task only; letter: range 18–42)."""
    rows = []
    for task, seeds in runs.items():
        allt = _concat_seeds(seeds, layout.FREQ_TABLE)
        if allt is None:
            continue
        for (layer, head), g in allt.groupby(["layer", "head"], sort=True):
            w, ws, n = mean_sd(g["weighted_id"])
            dm, dms, _ = mean_sd(g["dominant_id"])
            ref = paper.FREQ_ID.get(task, {}).get(int(layer), math.nan)
            rows.append({"task": task, "layer": int(layer), "head": int(head), "weighted_id_mean": w,
                         "weighted_id_sd": ws, "dominant_id_mean": dm, "dominant_id_sd": dms,
                         "dominant_ids": ", ".join(str(int(x)) for x in g["dominant_id"]), "n": n,
                         "paper_id": ref,
                         "paper_note": ("IDs 37–39" if task == "number" and layer >= 5 else
                                        "IDs 18–42 (every layer)" if task == "letter" else "")})
    return pd.DataFrame(rows, columns=FREQ_SUMMARY_COLUMNS)


def ablation_summary(runs: dict[str, dict[int, Path]]) -> pd.DataFrame:
    """Accuracy with one head ablated (Fig. 3 right), mean ± sd over seeds per (task, mode, layer, head)."""
    frames = []
    for task, seeds in runs.items():
        allt = _concat_seeds(seeds, layout.ABLATION)
        if allt is None:
            continue
        cols = [c for c in ACC_COLS if c in allt]
        g = allt.groupby(["mode", "layer", "head"], sort=False)
        out = g[cols].mean().add_suffix("_mean").join(g[cols].std(ddof=1).add_suffix("_sd"))
        out["n_seeds"] = g.size()
        frames.append(out.reset_index().assign(task=task))
    if not frames:
        return pd.DataFrame(columns=["task", "mode", "layer", "head"])
    df = pd.concat(frames, ignore_index=True)
    return df[["task"] + [c for c in df.columns if c != "task"]]


LENGTHGEN_COLUMNS = ["task", INTERVENTION, "extra_tokens", "acc_mean", "acc_sd", "n_seeds"]


def lengthgen_summary(runs: dict[str, dict[int, Path]], table: str = layout.LENGTHGEN,
                      intervention: str | None = NO_INTERVENTION) -> pd.DataFrame:
    """Fig. 5B over model seeds: per (task, intervention, extra_tokens) the mean and sd over seeds of
    each run's accuracy (each run's value is itself the mean over its data seeds, one run's
    :func:`posym.lengthgen.trained.summarize_lengthgen`; here sd is NaN with one model seed). Columns task,
    intervention, extra_tokens, acc_mean, acc_sd, acc_hop{h}_mean, acc_hop{h}_sd, n_seeds (the seeds
    with that point). ``table``: the length-generalization table inside each run (its ``_summary``
    file is read; e.g. one ``posym lengthgen --out`` wrote). ``intervention``: whose rows (default
    the untouched model's; ``None``: every intervention, kept apart)."""
    frames = []
    for task, seeds in runs.items():
        parts = []
        for s, d in seeds.items():
            t = read_lengthgen_summary(layout.summary_path(d / table), intervention)
            if t is not None and len(t):
                parts.append(t.assign(model_seed=s))
        if not parts:
            continue
        df = pd.concat(parts, ignore_index=True)
        for name, part in df.groupby(INTERVENTION, sort=False):
            g = part.groupby("extra_tokens")
            out = pd.DataFrame({"task": task, INTERVENTION: name, "extra_tokens": sorted(part["extra_tokens"].unique())})
            for c in ACC_COLS:
                if f"{c}_mean" in part:
                    out[f"{c}_mean"] = g[f"{c}_mean"].mean().to_numpy()
                    out[f"{c}_sd"] = g[f"{c}_mean"].std(ddof=1).to_numpy()
            out["n_seeds"] = g["model_seed"].nunique().to_numpy()
            frames.append(out)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=LENGTHGEN_COLUMNS)


def curve_reach(curve: pd.DataFrame, threshold: float = REACH_THRESHOLD) -> float:
    """The reach of one curve (SPEC §5, Fig. 5B): :func:`posym.lengthgen.trained.largest_length_above`, NaN
    when no length qualifies (:func:`check_one_curve`: PosymError for a table mixing interventions)."""
    v = _largest(check_one_curve(curve), threshold)
    return math.nan if v is None else float(v)


def lengthgen_per_seed_largest(runs: dict[str, dict[int, Path]], task: str, table: str = layout.LENGTHGEN,
                               intervention: str = NO_INTERVENTION) -> list[float]:
    """Per run of ``task``: the largest added length with accuracy >= 0.9 there and at every shorter
    point, of ``intervention``'s rows of its ``table`` summary (NaN without such rows)."""
    vals = []
    for d in runs.get(task, {}).values():
        t = read_lengthgen_summary(layout.summary_path(d / table), intervention)
        vals.append(curve_reach(t) if t is not None and len(t) else math.nan)
    return vals


# ------------------------------------------------------------------------------------------------
# the summary table: Paper A vs posym
# ------------------------------------------------------------------------------------------------
def paper_vs_posym(out_dir: str | os.PathLike, tables: dict[str, pd.DataFrame] | None = None,
                   intervention: str = NO_INTERVENTION) -> pd.DataFrame:
    """Every number of Paper A we reproduce (SPEC §5) beside ours: columns section, task, quantity,
    paper (number), paper_text (as published), posym_mean, posym_sd, n, difference (posym − paper),
    verdict (:mod:`posym.report.verdict`: reproduced / not reproduced / not comparable / not
    evidence, "" when not measured), note. Fig. 5B: the rows of ``intervention`` (default the
    untouched model; the note says so when the runs' tables also hold other interventions)."""
    out = Path(out_dir)
    t = tables if tables is not None else aggregate(out, write=False)
    runs = find_runs(out)
    check_runs_alike(runs)
    rows: list[dict] = []

    def add(*args, **kw):
        rows.append(_paper_row(*args, **kw))

    steps_note = {}
    for task, seeds in runs.items():
        cfg = _run_config(next(iter(seeds.values())))
        if cfg.get("steps") and int(cfg["steps"]) != 6750:
            steps_note[task] = (f"{cfg.get('preset')} preset: {cfg['steps']} steps, lr {cfg.get('lr')} "
                                "(paper: 6,750 steps, lr 1e-4) — steps not comparable")

    tr = t.get("training", pd.DataFrame())
    for _, r in tr.iterrows():
        if r["quantity"] == "test acc" or r["quantity"].startswith("first step") or r["quantity"].startswith("val acc"):
            if not math.isfinite(r["paper"]) or (r["quantity"].startswith("val acc") and r["n"] == 0):
                continue  # (no seed was trained that long: quick preset)
            note = steps_note.get(r["task"], "") if not r["quantity"].startswith("test") else ""
            if r["n_missing"]:
                note = (note + "; " if note else "") + f"{r['n_missing']} seed(s) never reached it / not logged"
            if note.startswith(tuple(steps_note.values())) and note:
                verdict = V.NOT_COMPARABLE
            elif r["quantity"].startswith("first step"):
                verdict = V.within(r["mean"], r["paper"], V.TOL_STEP, relative=True)
            else:
                verdict = V.within(r["mean"], r["paper"], V.TOL_ACCURACY)
            add("Fig. 2 (training)", r["task"], r["quantity"], r["paper"], r["mean"], r["sd"], r["n"], note,
                verdict=verdict)
    ini = t.get("initial_scores", pd.DataFrame())
    for _, r in ini.iterrows():
        add("Fig. 2 (scores)", r["task"], r["quantity"], 1.0, r["mean"], r["sd"], r["n"], paper_text="≈ 1",
            verdict=(V.REPRODUCED if r["mean"] >= V.INITIAL_SCORE else V.NOT_REPRODUCED) if math.isfinite(r["mean"])
            else "")
    pc = t.get("purity_counts", pd.DataFrame())
    for _, r in pc[pc["gamma"] == 0.1].iterrows() if len(pc) else []:
        if r["quantity"].split()[0] in ("positional", "symbolic"):
            n_heads = int(r["quantity"].rsplit("(of ", 1)[1].rstrip(")"))
            verdict, note = V.pure_heads(r["mean"], n_heads, r["paper"], PAPER_HEADS)
            row = _paper_row("Pure heads (γ = 0.1)", r["task"], r["quantity"], r["paper"], r["mean"], r["sd"], r["n"],
                             note=note, paper_text=f"{_fmt_num(r['paper'])} (of {PAPER_HEADS})", verdict=verdict)
            if n_heads != PAPER_HEADS:
                row["difference"] = math.nan  # counts out of different totals
            rows.append(row)
    fq = t.get("freqs", pd.DataFrame())
    if len(fq):
        num = fq[(fq["task"] == "number") & (fq["head"] == 0)]
        same_depth = len(num) and int(num["layer"].max()) + 1 == PAPER_HEADS
        for _, r in num.iterrows():
            if math.isfinite(r["paper_id"]):
                note = (r["paper_note"] + "; " if r["paper_note"] else "") + f"dominant ID {r['dominant_ids']}"
                if not same_depth:
                    note = (f"a {int(num['layer'].max()) + 1}-layer model — layer indices not comparable; " + note)
                add("Table 1 (frequency ID)", "number", f"weighted frequency ID, layer {int(r['layer'])}",
                    r["paper_id"], r["weighted_id_mean"], r["weighted_id_sd"], r["n"], note=note,
                    verdict=V.freq_id(r["weighted_id_mean"], r["paper_id"]) if same_depth else V.NOT_COMPARABLE)
        let = fq[fq["task"] == "letter"]
        if len(let):
            lo, hi = let["weighted_id_mean"].min(), let["weighted_id_mean"].max()
            inside = lo >= 18 and hi <= 42
            add("Table 1 (frequency ID)", "letter", "weighted frequency ID, range over layers", math.nan,
                float(let["weighted_id_mean"].mean()), math.nan, int(let["n"].min()),
                note=f"posym range {lo:.1f}–{hi:.1f}: {'inside' if inside else 'outside'} the paper's range",
                paper_text="18–42", verdict=V.REPRODUCED if inside else V.NOT_REPRODUCED)
    disc = read_untouched(out / layout.THEORY / f"{layout.DISCREPANCY}.csv")
    if disc is not None:
        for mech, pts in PAPER_DISCREPANCY.items():
            for n_, pv in pts.items():
                r = disc[(disc["mechanism"] == mech) & (disc["n"] == n_)]
                if len(r):  # Paper A's Fig. 5A plots Theorem 3.2's bound: Δ is judged against the bound
                    delta, bound = float(r["delta"].iloc[0]), float(r["bound"].iloc[0])
                    agree = "agrees" if abs(bound - pv) <= V.TOL_DISCREPANCY else "does not agree"
                    verdict = V.upper_bound(delta, bound)
                    off = ("; SPEC's length convention (query at n − 1) puts the Retrieval bound off by one: "
                           "exceeded by up to 2θ·sin ω at small n (docs/results/reproduction.md, Fig. 5A)"
                           if verdict == V.VIOLATES_BOUND and mech == "retrieval" else "")
                    add("Fig. 5A (discrepancy)", mech, f"Δ(n = {n_})", bound, delta, n=1,
                        paper_text=f"≤ {bound:.4f} (Theorem 3.2 bound)", verdict=verdict,
                        note=f"Paper A's Fig. 5A plots this bound ({pv:g}; ours {agree} within "
                             f"±{V.TOL_DISCREPANCY:g}){off}")
    lg = t.get("lengthgen", pd.DataFrame())
    if intervention != NO_INTERVENTION or (len(lg) and INTERVENTION in lg
                                           and (lg[INTERVENTION] != intervention).any()):
        lg = lengthgen_summary(runs, intervention=intervention)
    note = shown_note(intervention, lengthgen_interventions(runs))
    for task in runs:
        curve = lg[lg["task"] == task] if len(lg) else lg
        rows += fig5b_rows(task, curve, lengthgen_per_seed_largest(runs, task, intervention=intervention), note)
    llm = t.get("llm", pd.DataFrame())
    if len(llm):
        for (task, length), (op, bound) in PAPER_TABLE3.items():
            r = llm[(llm["task"] == task) & (llm["length"] == length)]
            if not len(r):
                continue
            m, s = float(r["mean"].iloc[0]), float(r["sd"].iloc[0]) if "sd" in r else math.nan
            model = r["model"].iloc[0] if "model" in r else None
            verdict, why = V.llm_bound(m, op, bound, llm_chance(t.get("llm_models"), model, task, length))
            add("Table 3 (1-hop LLM prompts)", task, f"accuracy at length {length}", math.nan, m, s,
                int(r["runs"].iloc[0]) if "runs" in r else 1, paper_text=f"{op} {bound:g}",
                note=f"paper: frontier API models; ours: {model or 'LLM'}; {why}", verdict=verdict)
    return pd.DataFrame(rows, columns=["section", "task", "quantity", "paper", "paper_text", "posym_mean",
                                       "posym_sd", "n", "difference", "verdict", "note"])



def llm_chance(models: pd.DataFrame | None, model: str | None, task: str, length: int) -> float | None:
    """The chance level of an LLM answer at (task, length): the choice protocol's ``chance`` column
    (mean of 1 / distinct candidates over the same prompts) of the same model; None when that
    protocol did not run."""
    if models is None or not len(models) or "chance" not in models or "protocol" not in models:
        return None
    c = models[(models["protocol"] == "choice") & (models["task"] == task) & (models["length"] == length)]
    if model is not None and "model" in c:
        c = c[c["model"] == model]
    c = c["chance"].dropna()
    return float(c.iloc[0]) if len(c) else None


def _paper_row(section: str, task: str, quantity: str, paper_value, mean: float, sd: float = math.nan, n: int = 0,
               note: str = "", paper_text: str | None = None, verdict: str = "") -> dict:
    """One row of :func:`paper_vs_posym` (difference = posym mean − paper where both are numbers)."""
    diff = mean - paper_value if (isinstance(paper_value, (int, float)) and math.isfinite(paper_value)
                                  and math.isfinite(mean)) else math.nan
    return {"section": section, "task": task, "quantity": quantity,
            "paper": float(paper_value) if isinstance(paper_value, (int, float)) else math.nan,
            "paper_text": paper_text if paper_text is not None else _fmt_num(paper_value),
            "posym_mean": mean, "posym_sd": sd, "n": n, "difference": diff, "verdict": verdict, "note": note}


def fig5b_rows(task: str, curve: pd.DataFrame, largest: Sequence[float], note: str = "") -> list[dict]:
    """The Fig. 5B rows of :func:`paper_vs_posym` for one task: accuracy at each of Paper A's points
    (``curve``: extra_tokens, acc_mean, acc_sd, n_seeds — :func:`lengthgen_summary`, one curve:
    :func:`check_one_curve`) and, for the letter task, the largest added length with accuracy >= 0.9
    (mean ± sd of ``largest``, one per model). ``note`` (e.g. which intervention is shown) goes
    into every row's note."""
    check_one_curve(curve, f"the {task} Fig. 5B curve")
    join = lambda *parts: "; ".join(p for p in parts if p)  # noqa: E731
    rows = []
    for extra, pv in paper.LENGTHGEN[task].items():
        r = curve[curve["extra_tokens"] == extra] if len(curve) else curve
        if len(r):
            m = float(r["acc_mean"].iloc[0])
            rows.append(_paper_row("Fig. 5B (length generalization)", task, f"accuracy at +{extra} tokens", pv,
                                   m, float(r["acc_sd"].iloc[0]), int(r["n_seeds"].iloc[0]), note=note,
                                   verdict=V.within(m, pv, V.TOL_ACCURACY)))
        elif len(curve):
            rows.append(_paper_row("Fig. 5B (length generalization)", task, f"accuracy at +{extra} tokens", pv,
                                   math.nan, note=join("not in this preset's grid", note)))
    if task == "letter" and len(curve):
        m, s, n = mean_sd(largest)
        rows.append(_paper_row("Fig. 5B (length generalization)", task, "largest added length with accuracy >= 0.9",
                               PAPER_LETTER_09_LENGTH, m, s, n, paper_text="≈ 750–850",
                               note=join(f"grid of this preset up to +{int(curve['extra_tokens'].max())}", note),
                               verdict=V.within(m, PAPER_LETTER_09_LENGTH, V.TOL_STEP, relative=True)))
    return rows


def _fmt_num(v) -> str:
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return "—"
    return str(int(v)) if float(v).is_integer() and abs(v) >= 2 else f"{v:g}"


def _run_config(run_dir: Path) -> dict:
    p = run_dir / layout.POSYM_JSON
    if not p.is_file():
        return {}
    try:
        return json.loads(p.read_text()).get("config", {})
    except (json.JSONDecodeError, OSError):
        return {}


# ------------------------------------------------------------------------------------------------
# figures
# ------------------------------------------------------------------------------------------------
def plot_accuracy_bands(curves: pd.DataFrame, task: str, ax=None, paper_steps: dict | None = None):
    """Validation accuracy per hop over training: mean over seeds with a ± sd band (Fig. 2A over
    seeds); Paper A's 0.9-crossing steps as open markers when ``paper_steps`` is given."""
    from posym.report.figures import HOP_COLORS, fig_ax

    c = curves[curves["task"] == task].sort_values("step")
    fig, ax = fig_ax(ax, (5.5, 3.6))
    n = int(c["n_seeds"].max()) if len(c) else 0
    if paper_steps and (not len(c) or c["step"].max() < max(paper_steps.values())):
        paper_steps = None  # a shorter run (quick preset): Paper A's steps would only stretch the axis
    for col, color, label in [(h, HOP_COLORS[i], f"{i + 1} hop{'s' if i else ''}") for i, h in enumerate(HOPS)] + [
            ("acc", "k", "all")]:
        if f"{col}_mean" not in c:
            continue
        m, s = c[f"{col}_mean"].to_numpy(float), c[f"{col}_sd"].to_numpy(float)
        ax.plot(c["step"], m, color=color, lw=1 if col == "acc" else 1.5, ls="--" if col == "acc" else "-",
                label=label)
        if np.isfinite(s).any():
            ax.fill_between(c["step"], np.clip(m - s, 0, 1), np.clip(m + s, 0, 1), color=color, alpha=0.15, lw=0)
        if paper_steps and col in paper_steps:
            ax.plot([paper_steps[col]], [REACH_THRESHOLD], marker="o", mfc="none", color=color, ls="none")
    ax.axhline(REACH_THRESHOLD, color="grey", lw=0.5, ls=":")
    ax.set(xlabel="step", ylabel="validation accuracy", ylim=(-0.02, 1.02),
           title=f"{task}: accuracy per hop ({seeds_text(n)})")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, loc="lower right")
    return fig


# ------------------------------------------------------------------------------------------------
# everything
# ------------------------------------------------------------------------------------------------
def aggregate(out_dir: str | os.PathLike, write: bool = True) -> dict[str, pd.DataFrame]:
    """All aggregate tables of a reproduction directory (see the module docstring). With ``write``,
    saves ``DIR/aggregate/<name>.csv`` for each, ``paper_vs_posym.csv``, and the figures
    ``DIR/aggregate/figures/accuracy_{task}.png|pdf`` and ``fig5b_lengthgen.png|pdf``."""
    out = Path(out_dir)
    if not out.is_dir():
        raise PosymError(f"no such reproduction directory: {out}")
    runs = find_runs(out)
    check_runs_alike(runs)
    tables: dict[str, pd.DataFrame] = {
        "training": training_summary(runs),
        "accuracy_curves": accuracy_curves(runs),
        "initial_scores": initial_scores(runs),
        "purity_counts": pd.concat([purity_counts(runs, g) for g in (0.1, 0.05)], ignore_index=True),
        "purity_layers": pd.concat([purity_layers(runs, g) for g in (0.1, 0.05)], ignore_index=True),
        "freqs": freq_summary(runs),
        "ablation": ablation_summary(runs),
        "lengthgen": lengthgen_summary(runs),
    }
    llm = read_untouched(out / layout.LLM / layout.LLM_TABLE)
    tables["llm"] = llm if llm is not None else pd.DataFrame(columns=["task", "length", "mean", "sd"])
    tables["llm_models"] = llm_models_table(out)
    tables["paper_vs_posym"] = paper_vs_posym(out, tables)
    if write:
        adir = out / layout.AGGREGATE
        adir.mkdir(parents=True, exist_ok=True)
        for name, df in tables.items():
            write_table(df, layout.aggregate_table(out, name))
        _write_figures(adir / layout.FIGURES, tables, runs)
    return tables


def llm_models_table(out_dir: str | os.PathLike) -> pd.DataFrame:
    """Every ``llm_table.csv`` of a reproduction (each model of ``llm_models``, both protocols) in one
    table with ``model`` and ``protocol`` columns (empty when no LLM stage ran)."""
    frames = []
    for folder in layout.llm_model_dirs(out_dir):
        for sub, protocol in ((folder, "generate"), (folder / layout.LLM_CHOICE, "choice")):
            t = read_untouched(sub / layout.LLM_TABLE)
            if t is not None and len(t):
                if "protocol" not in t:
                    t = t.assign(protocol=protocol)
                frames.append(t)
    if not frames:
        return pd.DataFrame(columns=["model", "protocol", "task", "length", "mean", "sd"])
    return pd.concat(frames, ignore_index=True)


def _write_figures(fig_dir: Path, tables: dict[str, pd.DataFrame], runs: dict) -> None:
    from posym.report.figures import plot_lengthgen, save_figure

    curves = tables["accuracy_curves"]
    for task in runs:
        if len(curves) and (curves["task"] == task).any():
            fig = plot_accuracy_bands(curves, task, paper_steps=paper.HOP_09_STEP.get(task))
            save_figure(fig, fig_dir / layout.accuracy_figure(task))
    lg = tables["lengthgen"]
    if len(lg):
        summaries = {task: g for task, g in lg.groupby("task", sort=False)}
        fig = plot_lengthgen({t: g.drop(columns=INTERVENTION, errors="ignore") for t, g in summaries.items()},
                             paper=paper.LENGTHGEN)
        n = int(lg["n_seeds"].max())
        shown = "untouched model, " if len(lengthgen_interventions(runs)) > 1 else ""
        fig.axes[0].set_title(f"length generalization ({shown}{seeds_text(n)})")
        save_figure(fig, fig_dir / layout.FIG_LENGTHGEN_SEEDS)
    llm = tables["llm_models"]
    if len(llm) and (llm["model"].nunique() > 1 or llm["protocol"].nunique() > 1):
        from posym.report.llm_figures import plot_llm_protocols

        fig = plot_llm_protocols(llm)
        save_figure(fig, fig_dir / layout.FIG_LLM_MODELS)




__all__ = ["PAPER_DISCREPANCY", "PAPER_HEADS", "PAPER_TABLE3", "ablation_summary", "accuracy_curves", "aggregate",
           "check_one_curve", "check_runs_alike", "fig5b_rows", "find_runs", "freq_summary", "initial_scores",
           "curve_reach", "lengthgen_interventions", "lengthgen_per_seed_largest", "lengthgen_summary",
           "llm_chance", "llm_models_table", "paper_vs_posym", "plot_accuracy_bands", "purity_counts",
           "purity_layers", "read_lengthgen_summary", "read_untouched", "run_arch", "run_pe", "seeds_text", "shown_note",
           "training_summary"]
