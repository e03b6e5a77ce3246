"""Learning dynamics of head scores (SPEC §3): purity rule, emergence steps, entropy over training.

Input is the tidy ``scores.csv`` table of a run (one row per step, layer, head, tau with ``s_pos``,
``s_sym``, ``entropy``) and, for runs of the HF ``Trainer``, its ``log_history``; nothing here
touches a model. The ``entropy`` column is the attention entropy H / ln n in [0, 1]
(:func:`posym.heads.scores.attention_entropy`, 1 = uniform);
:func:`entropy_minmax_over_training` is SPEC §3's rescaled variant.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from posym.constants import GAMMA
from posym.errors import PosymError
from posym.runs import layout
from posym.runs.tables import RUN_TABLES, check_unique_keys, read_table

def load_scores(run_dir: str | os.PathLike) -> pd.DataFrame:
    """``RUN/scores.csv`` (written by head tracking or ``posym scores``)."""
    path = Path(run_dir) / layout.SCORES
    if not Path(run_dir).is_dir():
        raise PosymError(f"no such run directory: {run_dir}")
    if not path.is_file():
        raise PosymError(f"no scores.csv in {run_dir}; train with --track-heads or run `posym scores {run_dir}`")
    df = read_table(path)
    missing = {"step", "layer", "head", "tau", "s_pos", "s_sym"} - set(df.columns)
    if missing:
        raise PosymError(f"{path} lacks columns: {', '.join(sorted(missing))}")
    return check_unique_keys(df, RUN_TABLES["scores"], path)  # one row per (step, layer, head, tau)


def select_tau(scores: pd.DataFrame, tau: float | None = None) -> pd.DataFrame:
    """Rows of one τ (default: the smallest present; SPEC default 1e-4)."""
    taus = np.sort(scores["tau"].unique())
    if tau is None:
        tau = float(taus[0])
    match = taus[np.isclose(taus, tau, rtol=1e-6, atol=0)]
    if not len(match):
        raise PosymError(f"tau {tau:g} not in the scores table (have {', '.join(f'{t:g}' for t in taus)})")
    return scores[np.isclose(scores["tau"], match[0], rtol=1e-6, atol=0)]


def classify(s_pos: np.ndarray, s_sym: np.ndarray, gamma: float = GAMMA) -> np.ndarray:
    """Pure-head label per entry (SPEC §3, our rule): "positional" iff s_POS >= 1-γ and s_SYM <= γ;
    "symbolic" iff s_SYM >= 1-γ and s_POS <= γ; else "mixed"."""
    s_pos, s_sym = np.asarray(s_pos), np.asarray(s_sym)
    out = np.full(s_pos.shape, "mixed", dtype=object)
    out[(s_pos >= 1 - gamma) & (s_sym <= gamma)] = "positional"
    out[(s_sym >= 1 - gamma) & (s_pos <= gamma)] = "symbolic"
    return out


def purity_table(scores: pd.DataFrame, gamma: float = GAMMA, tau: float | None = None) -> pd.DataFrame:
    """Per (layer, head): the kind at the last step and the step from which it stays pure to the end.

    A head is pure from the first tracked step after which the rule holds at every later tracked step
    (``pure_from`` is NaN for heads that are not pure at the end). Columns: layer, head, kind,
    pure_from, s_pos_final, s_sym_final.
    """
    df = select_tau(scores, tau).sort_values("step")
    rows = []
    for (layer, head), g in df.groupby(["layer", "head"], sort=True):
        kinds = classify(g["s_pos"].to_numpy(), g["s_sym"].to_numpy(), gamma)
        steps = g["step"].to_numpy()
        final = kinds[-1]
        pure_from = np.nan
        if final != "mixed":
            k = len(kinds) - 1
            while k > 0 and kinds[k - 1] == final:
                k -= 1
            pure_from = int(steps[k])
        rows.append({"layer": int(layer), "head": int(head), "kind": final, "pure_from": pure_from,
                     "s_pos_final": float(g["s_pos"].iloc[-1]), "s_sym_final": float(g["s_sym"].iloc[-1])})
    return pd.DataFrame(rows)


def pure_counts(purity: pd.DataFrame, steps: np.ndarray) -> pd.DataFrame:
    """Cumulative number of pure positional / symbolic heads over ``steps`` (Fig. 2C)."""
    steps = np.asarray(steps)
    out = {"step": steps}
    for kind in ("positional", "symbolic"):
        starts = purity.loc[purity["kind"] == kind, "pure_from"].to_numpy(dtype=float)
        out[kind] = (starts[None, :] <= steps[:, None]).sum(axis=1)
    return pd.DataFrame(out)


def entropy_minmax_over_training(scores: pd.DataFrame) -> pd.Series:
    """The ``entropy`` column (H / ln n) min–max rescaled per (layer, head, τ) over training
    (SPEC §3, Paper A Fig. 2): 0 = the head's lowest value in the run, 1 = its highest. A head
    whose entropy barely moves (0.985 … 0.995) still spans 0 … 1; a constant one gives 0."""
    g = scores.groupby(["layer", "head", "tau"])["entropy"]
    lo, hi = g.transform("min"), g.transform("max")
    return ((scores["entropy"] - lo) / (hi - lo).replace(0, np.nan)).fillna(0.0)


#: ``log_history`` keys of the HF ``Trainer`` drawn as accuracy (any ``eval_*`` key containing "acc").
_ACC_KEY = "acc"


def trainer_eval_history(log_history: list[dict]) -> pd.DataFrame:
    """The evaluation entries of an HF ``Trainer``'s ``state.log_history`` (those with an ``eval_*``
    number) as a table: ``step`` and every numeric ``eval_*`` key (``eval_loss``, accuracy keys, …),
    one row per step (the last entry wins), sorted by step; empty when there is none."""
    rows: dict[int, dict] = {}
    for entry in log_history or []:
        if not isinstance(entry, dict) or "step" not in entry:
            continue
        vals = {k: float(v) for k, v in entry.items() if k.startswith("eval_") and isinstance(v, (int, float))
                and not isinstance(v, bool) and not k.endswith(("_runtime", "_samples_per_second",
                                                                 "_steps_per_second"))}
        if vals:
            rows.setdefault(int(entry["step"]), {}).update(vals)
    if not rows:
        return pd.DataFrame(columns=["step"])
    df = pd.DataFrame([{"step": s, **v} for s, v in sorted(rows.items())])
    return df[["step"] + sorted(c for c in df.columns if c != "step")]


def accuracy_keys(history: pd.DataFrame) -> list[str]:
    """The accuracy columns of :func:`trainer_eval_history` (``eval_*`` keys containing "acc")."""
    return [c for c in history.columns if c.startswith("eval_") and _ACC_KEY in c[len("eval_"):]]
