"""The tables of the LLM length-generalisation protocol (SPEC §1.5, Paper A Table 3) and their folder:
per-run accuracies and the mean (sd) table from answer records, the intervention contrast, their
Markdown, ``llm_runs.csv`` / ``llm_table.csv`` / ``llm_table.md``, the protocol a folder's tables hold,
and the default output folder. :mod:`posym.lengthgen.llm_eval` describes the files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from posym.errors import PosymError
from posym.runs import layout
from posym.runs.layout import safe_name
from posym.runs.tables import INTERVENTION, NO_INTERVENTION, short_intervention, write_table

DEFAULT_OUT_ROOT = "runs/llm"  # default output: runs/llm/<model>[-choice]


def tables_protocol(out_dir: str | os.PathLike) -> str | None:
    """The protocol of the tables in ``out_dir`` (``llm_table.csv``'s ``protocol`` column; tables
    written before the choice protocol existed are ``generate``), or None when there are none."""
    p = Path(out_dir) / layout.LLM_TABLE
    if not p.is_file():
        return None
    try:
        head = pd.read_csv(p, nrows=1)
    except (ValueError, OSError, UnicodeDecodeError) as e:
        raise PosymError(f"cannot read {p}: {e}; move it away or use another --out") from None
    return str(head["protocol"].iloc[0]) if "protocol" in head and len(head) else "generate"


def check_out(out_dir: str | os.PathLike, protocol: str) -> None:
    """PosymError when ``out_dir`` holds the tables of another protocol: each protocol's tables
    (``llm_table.csv``, ``llm_runs.csv``, ``llm_table.md``) keep their folder (SPEC §1.5)."""
    held = tables_protocol(out_dir)
    if held is not None and held != protocol:
        raise PosymError(f"{out_dir} holds the tables of the {held} protocol; write the {protocol} protocol "
                         f"to another --out (its default: {DEFAULT_OUT_ROOT}/<model>"
                         f"{'' if protocol == 'generate' else '-' + protocol})")


def summarize(records: Sequence[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-run accuracies and the mean (sd over runs) table from answer records, per intervention
    (a last ``intervention`` column; records without one are ``none``).

    Records with a ``chance`` field (choice protocol) add a ``chance`` column to both: the mean over
    the samples of the run, resp. of all runs of the (task, length).
    """
    chance = bool(records) and all("chance" in r for r in records)
    cols = ["task", "length", "run", "index", "correct"] + (["chance"] if chance else [])
    df = pd.DataFrame.from_records(records, columns=cols)
    if df.empty:
        raise PosymError("no answers to summarise")
    df[INTERVENTION] = [r.get(INTERVENTION, NO_INTERVENTION) for r in records]
    df["correct"] = df["correct"].astype(bool)
    by_run, by_point = [INTERVENTION, "task", "length", "run"], [INTERVENTION, "task", "length"]
    runs_df = (df.groupby(by_run, sort=False)["correct"]
               .agg(n="size", correct="sum").reset_index())
    runs_df["accuracy"] = runs_df["correct"] / runs_df["n"]
    table = (runs_df.groupby(by_point, sort=False)
             .agg(mean=("accuracy", "mean"), sd=("accuracy", "std"), runs=("run", "size"),
                  n=("n", "min")).reset_index())
    if chance:
        runs_df["chance"] = df.groupby(by_run, sort=False)["chance"].mean().to_numpy()
        table["chance"] = df.groupby(by_point, sort=False)["chance"].mean().to_numpy()
    last = lambda t: t[[c for c in t.columns if c != INTERVENTION] + [INTERVENTION]]
    return last(runs_df), last(table)


def normalised_rank(rank: float, candidates: float) -> float:
    """``(rank − 1)/(candidates − 1)``: 0 when the answer is the model's first choice, 1 when last,
    0.5 on average for a random order; NaN with fewer than 2 candidates."""
    return (rank - 1) / (candidates - 1) if candidates >= 2 else float("nan")


ALL_LENGTHS = "all"


def intervention_contrast(records: Sequence[dict]) -> pd.DataFrame:
    """Each intervention against ``none`` on the same prompts (choice records: ``target_rank``,
    ``n_candidates``). Pairs are matched on (task, length, run, index, prompt digest); one row per
    (intervention, task, length) and one pooled over the lengths (``length`` = ``"all"``): n_pairs, the
    accuracies ``acc_none`` / ``acc`` and ``d_acc``, the mean normalised ranks
    (:func:`normalised_rank`) ``rank_none`` / ``rank``, ``d_rank`` (negative: the answer moved up) and
    its standard error ``d_rank_se`` (sd of the paired differences / √n), and ``chance``. Empty when
    there is no ``none`` or no other intervention."""
    key = ["task", "length", "run", "index", "digest"]
    rows = [{**{k: r[k] for k in key}, INTERVENTION: r.get(INTERVENTION, NO_INTERVENTION),
             "correct": bool(r["correct"]), "chance": r.get("chance", float("nan")),
             "rank": normalised_rank(r["target_rank"], r["n_candidates"])}
            for r in records if "target_rank" in r and "n_candidates" in r]
    cols = ["intervention", "task", "length", "n_pairs", "acc_none", "acc", "d_acc", "rank_none", "rank",
            "d_rank", "d_rank_se", "chance"]
    df = pd.DataFrame(rows)
    if df.empty or NO_INTERVENTION not in set(df[INTERVENTION]):
        return pd.DataFrame(columns=cols)
    base = df[df[INTERVENTION] == NO_INTERVENTION].drop(columns=[INTERVENTION, "chance"])
    out = []
    for iv in dict.fromkeys(df[INTERVENTION]):
        if iv == NO_INTERVENTION:
            continue
        pair = df[df[INTERVENTION] == iv].merge(base, on=key, suffixes=("", "_none"))
        pair["d"] = pair["rank"] - pair["rank_none"]
        for task, t in pair.groupby("task", sort=False):
            parts = [(str(int(x)), g) for x, g in t.groupby("length")] + [(ALL_LENGTHS, t)]
            for length, g in parts:
                n = len(g)
                out.append({"intervention": iv, "task": task, "length": length, "n_pairs": n,
                            "acc_none": g["correct_none"].mean(), "acc": g["correct"].mean(),
                            "d_acc": g["correct"].mean() - g["correct_none"].mean(),
                            "rank_none": g["rank_none"].mean(), "rank": g["rank"].mean(), "d_rank": g["d"].mean(),
                            "d_rank_se": g["d"].std(ddof=1) / n ** 0.5 if n > 1 else float("nan"),
                            "chance": g["chance"].mean()})
    return pd.DataFrame(out, columns=cols)


def contrast_markdown(contrast: pd.DataFrame, title: str | None = None) -> str:
    """One row per (task, intervention): the pooled accuracy and normalised rank, none → intervention,
    the paired rank difference ± its standard error, then the rank difference at each length."""
    lengths = sorted({int(x) for x in contrast["length"] if x != ALL_LENGTHS})
    lines = [f"**{title}**", ""] if title else []
    lines.append("| task | intervention | pairs | accuracy (none → it) | rank (none → it) | Δ rank ± se | "
                 + " | ".join(f"Δ rank {x}" for x in lengths) + " |")
    lines.append("|---|---|---|---|---|---|" + "---|" * len(lengths))
    for (task, iv), g in contrast.groupby(["task", INTERVENTION], sort=False):
        g = g.set_index("length")
        a = g.loc[ALL_LENGTHS]
        per = [f"{g.loc[str(x), 'd_rank']:+.3f}" if str(x) in g.index else "" for x in lengths]
        lines.append(f"| {task} | {short_intervention(iv)} | {int(a['n_pairs'])} | {a['acc_none']:.2f} → {a['acc']:.2f} | "
                     f"{a['rank_none']:.3f} → {a['rank']:.3f} | {a['d_rank']:+.3f} ± {a['d_rank_se']:.3f} | "
                     + " | ".join(per) + " |")
    lines += ["", "rank: the answer's rank among the window's distinct tokens, (rank − 1)/(candidates − 1): "
              "0 = first choice, 0.5 = chance; Δ: the intervention minus none on the same prompts "
              "(negative = the answer moved up)"]
    return "\n".join(lines) + "\n"


def table_markdown(table: pd.DataFrame, title: str | None = None, digits: int = 2) -> str:
    """Table 3 layout: one row per task, one column per target-window length, ``mean (sd)``; a
    table with a ``chance`` column (choice protocol) gets a ``<task> chance`` row under each task. A
    table of several interventions gets one row per (task, intervention): ``<task> · <intervention>``."""
    lengths = sorted(table["length"].unique())
    lines = []
    if title:
        lines += [f"**{title}**", ""]
    lines.append("| task | " + " | ".join(str(x) for x in lengths) + " |")
    lines.append("|---|" + "---|" * len(lengths))
    ivs = list(dict.fromkeys(table[INTERVENTION])) if INTERVENTION in table else [None]
    rows = [(task, iv) for task in dict.fromkeys(table["task"]) for iv in ivs]
    for task, iv in rows:
        g = table[(table["task"] == task) & ((table[INTERVENTION] == iv) if iv is not None else True)]
        if g.empty:
            continue
        g = g.set_index("length")
        name = task if len(ivs) == 1 else f"{task} · {short_intervention(iv)}"
        cells, chance = [], []
        for x in lengths:
            if x not in g.index:
                cells.append("")
                chance.append("")
                continue
            m, s = g.loc[x, "mean"], g.loc[x, "sd"]
            cells.append(f"{m:.{digits}f}" + ("" if pd.isna(s) else f" ({s:.{digits}f})"))
            chance.append(f"{g.loc[x, 'chance']:.{digits}f}" if "chance" in g else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        if "chance" in g:
            lines.append(f"| {name} chance | " + " | ".join(chance) + " |")
    runs, n = int(table["runs"].min()), int(table["n"].min())
    lines += ["", f"mean (sd) accuracy over {runs} run{'s' if runs != 1 else ''} of {n} prompts each"]
    if "chance" in table:
        lines[-1] += "; chance = mean over prompts of 1 / (distinct target-window tokens)"
    return "\n".join(lines) + "\n"


def table_title(model: str, protocol: str = "generate") -> str:
    """Title of a table / printout: the model label, plus the protocol unless it is ``generate``."""
    return model if protocol == "generate" else f"{model} — {protocol} protocol"


def write_tables(out_dir: str | os.PathLike, runs_df: pd.DataFrame, table: pd.DataFrame,
                 model: str, protocol: str = "generate") -> dict[str, Path]:
    """``llm_runs.csv``, ``llm_table.csv`` (with ``model``, ``protocol`` and, last, ``intervention``
    columns) and ``llm_table.md``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"runs": out / layout.LLM_RUNS, "table": out / layout.LLM_TABLE, "markdown": out / layout.LLM_TABLE_MD}

    def tagged(t: pd.DataFrame) -> pd.DataFrame:
        t = t.assign(model=model, protocol=protocol)
        if INTERVENTION not in t:
            t[INTERVENTION] = NO_INTERVENTION
        return t[[c for c in t.columns if c != INTERVENTION] + [INTERVENTION]]

    write_table(tagged(runs_df), paths["runs"])
    write_table(tagged(table), paths["table"])
    paths["markdown"].write_text(table_markdown(table, title=table_title(model, protocol)))
    return paths


def read_llm_table(path: str | os.PathLike) -> pd.DataFrame:
    """``llm_table.csv`` of an output directory (or the file itself)."""
    p = Path(path)
    p = p / layout.LLM_TABLE if p.is_dir() else p
    if not p.is_file():
        raise PosymError(f"no LLM table at {str(p)!r}; run `posym llm eval` first")
    return pd.read_csv(p)


def short_label(label: str) -> str:
    """Readable model name of a cache label (last path part, without a parenthesised note)."""
    s = str(label).split("::")[-1].split(" (")[0].rstrip("/")
    return s.rsplit("/", 1)[-1][:40] or "model"


def _slug(label: str) -> str:
    return safe_name(short_label(label))


def default_llm_out(label: str, protocol: str = "generate") -> Path:
    """Default output folder: ``runs/llm/<model>`` (generate) or ``runs/llm/<model>-<protocol>``."""
    return Path(DEFAULT_OUT_ROOT) / (_slug(label) + ("" if protocol == "generate" else f"-{protocol}"))


__all__ = [
    "ALL_LENGTHS",
    "DEFAULT_OUT_ROOT",
    "check_out",
    "contrast_markdown",
    "default_llm_out",
    "intervention_contrast",
    "normalised_rank",
    "read_llm_table",
    "short_label",
    "summarize",
    "table_markdown",
    "table_title",
    "tables_protocol",
    "write_tables",
]
