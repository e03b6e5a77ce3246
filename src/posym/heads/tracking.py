"""Scores over training (SPEC §3): the tidy ``scores.csv`` table (step, layer, head, tau, s_pos, s_sym,
entropy, swap_mass, n_prompts) of one model (:func:`score_table`) and the training callback that
appends it at every evaluation step (:class:`HeadTracker`). Offline scoring of a run's checkpoints is
the verb ``posym.verbs.scores``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from posym.constants import READOUT_SEED_OFFSET
from posym.heads.scores import DEFAULT_TAU, scores_blocks_fast, scores_fast
from posym.runs import layout
from posym.runs.tables import RESUME_REMEDY, append_table, check_resumed, write_table
from posym.tasks.dataset import generate

SCORES_FILE = layout.SCORES
COLUMNS = ["step", "layer", "head", "tau", "s_pos", "s_sym", "entropy", "swap_mass", "n_prompts"]


def score_table(model: torch.nn.Module, input_ids: np.ndarray | torch.Tensor, taus: Sequence[float] = (DEFAULT_TAU,),
                step: int | None = None, per_prompt: bool = False, batch_size: int = 64,
                blocks=None, exclude_keys: Sequence[int] = ()) -> pd.DataFrame:
    """Fast-path scores of every head as a tidy table; ``step`` (if given) becomes the first column.

    input_ids [P, n]; ``blocks``: None for token swaps, else Paper B's blocks (a count or edges);
    ``exclude_keys``: key positions kept out of the swaps (SPEC §3; default none = SPEC §3).
    Runs without gradients and without touching the global RNG (eval mode, restored).
    """
    with torch.no_grad():
        res = (scores_fast(model, input_ids, taus=taus, batch_size=batch_size, exclude_keys=exclude_keys)
               if blocks is None else
               scores_blocks_fast(model, input_ids, blocks=blocks, taus=taus, batch_size=batch_size,
                                  exclude_keys=exclude_keys))
    df = res.to_frame(mean_over_prompts=not per_prompt)
    if step is not None:
        df.insert(0, "step", step)
    return df


def lengthened_score_table(model: torch.nn.Module, task: str, n: int, extra_tokens: int = 0,
                           seed: int = 0) -> pd.DataFrame:
    """:func:`score_table` (mean over prompts) of ``n`` test-layout prompts of ``task`` with
    ``extra_tokens`` added to the target window (SPEC §1.4), data seed ``READOUT_SEED_OFFSET + seed``
    (apart from training and test data): the head readout on lengthened inputs."""
    ids = generate(task, n, READOUT_SEED_OFFSET + seed, extra_tokens=extra_tokens).input_ids
    return score_table(model, ids, batch_size=2 if extra_tokens >= 500 else 16)


class HeadTracker:
    """Evaluation-step callback of ``posym.train.train``: appends the scores of a fixed prompt set
    (``prompts`` [P, n] token ids) to ``RUN/scores.csv``; on resume it first drops the rows written
    after the checkpoint the run continues from."""

    def __init__(self, prompts: np.ndarray, taus: Sequence[float] = (DEFAULT_TAU,), batch_size: int = 128):
        self.prompts = torch.as_tensor(np.asarray(prompts))  # [P, n]
        self.taus = tuple(taus)
        self.batch_size = batch_size

    def on_start(self, run_dir: Path, start_step: int, resume: bool) -> None:
        if resume:
            truncate_scores(run_dir, start_step)

    def __call__(self, step: int, model: torch.nn.Module, run_dir: Path) -> None:
        device = next(model.parameters()).device
        df = score_table(model, self.prompts.to(device), self.taus, step=step, batch_size=self.batch_size)
        append_rows(Path(run_dir) / SCORES_FILE, df)


def append_rows(path: Path, df: pd.DataFrame) -> None:
    append_table(df, path, COLUMNS)


def truncate_scores(run_dir: str | os.PathLike, max_step: int) -> None:
    """Drop tracked rows after ``max_step`` (used when a run resumes from that step); the rows kept are
    checked first (``posym.runs.tables.check_resumed``: a corrupt table is one line, nothing changed)."""
    path = Path(run_dir) / SCORES_FILE
    if path.is_file():
        write_table(check_resumed(path, "scores", max_step, RESUME_REMEDY), path)


__all__ = ["COLUMNS", "HeadTracker", "append_rows", "lengthened_score_table", "score_table", "truncate_scores"]
