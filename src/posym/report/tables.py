"""Tables of ours vs Paper A, as pandas DataFrames (render with ``to_markdown``-free ``markdown()``)."""

from __future__ import annotations

import pandas as pd

from posym.report import paper

HOPS = ["acc_hop1", "acc_hop2", "acc_hop3", "acc_hop4"]


def training_comparison(task: str, summary: dict) -> pd.DataFrame:
    """Rows: final test accuracy (global, per hop) and step at which each hop first reaches 0.9,
    ours (from ``posym.train.summary.summarize_run``) beside Paper A's (SPEC §5)."""
    rows = []
    for col in ["acc"] + HOPS:
        rows.append({"quantity": f"test {col}", "posym": summary["test"].get(col),
                     # Paper A reports per-hop curves, not final per-hop numbers; Fig. 5B at +0 gives 1.00
                     "paper": paper.LENGTHGEN[task][0] if col == "acc" else None})
    for col in HOPS:
        rows.append({"quantity": f"first step {col} >= 0.9", "posym": summary["first_step"].get(col),
                     "paper": paper.HOP_09_STEP[task][col]})
    for step, acc in paper.ACC_AT_STEP[task].items():
        rows.append({"quantity": f"val acc @ step {step}", "posym": summary["val_at"].get(step), "paper": acc})
    return pd.DataFrame(rows, dtype=object)  # keep steps as ints, accuracies as floats


def markdown(df: pd.DataFrame, floatfmt: str = "{:.3f}") -> str:
    """A GitHub-markdown table (no extra dependency)."""
    def fmt(v):
        if v is None or (isinstance(v, float) and v != v):
            return "—"
        if isinstance(v, float):
            return floatfmt.format(v)
        return str(v)

    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(fmt(r[c]) for c in cols) + " |")
    return "\n".join(lines)
