"""Read a run's metrics and summarise it against Paper A (SPEC §5): final test accuracy and the step at
which each hop class first reaches a threshold (0.9 in Paper A's Fig. 2)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from posym.errors import PosymError
from posym.train.evaluate import MAX_HOPS


def load_metrics(run_dir: str | os.PathLike) -> pd.DataFrame:
    """``RUN/metrics.csv`` as a DataFrame (columns: split, step, train_loss, lr, loss, acc, acc_hop1..4)."""
    path = Path(run_dir) / "metrics.csv"
    if not path.is_file():
        raise PosymError(f"no metrics.csv in {run_dir}")
    return pd.read_csv(path)


def first_step_reaching(metrics: pd.DataFrame, column: str, threshold: float = 0.9) -> int | None:
    """First validation step at which ``column`` >= threshold (None if never)."""
    val = metrics[metrics["split"] == "val"].sort_values("step")
    hit = val[val[column] >= threshold]
    return int(hit["step"].iloc[0]) if len(hit) else None


def summarize_run(run_dir: str | os.PathLike, threshold: float = 0.9) -> dict:
    """{"test": {acc, acc_hop1..}, "first_step": {acc, acc_hop1..}, "val_at": {step: acc}}."""
    m = load_metrics(run_dir)
    cols = ["acc"] + [f"acc_hop{h}" for h in range(1, MAX_HOPS + 1)]
    test = m[m["split"] == "test"]
    out = {
        "test": {c: float(test[c].iloc[-1]) for c in cols} if len(test) else {},
        "first_step": {c: first_step_reaching(m, c, threshold) for c in cols},
        "val_at": {},
    }
    val = m[m["split"] == "val"].set_index("step")
    for s in (2000, 3000, 4000):
        if s in val.index:
            out["val_at"][s] = float(val.loc[s, "acc"])
    return out
