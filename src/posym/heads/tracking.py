"""Scores over training (SPEC §3): in-process tracking at evaluation steps and offline scoring of a
run's checkpoints or any HF GPT-J directory. Both write the tidy ``scores.csv`` table
(step, layer, head, tau, s_pos, s_sym, entropy, swap_mass, n_prompts)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from posym.errors import PosymError
from posym.heads.scores import DEFAULT_TAU, scores_fast

SCORES_FILE = "scores.csv"
COLUMNS = ["step", "layer", "head", "tau", "s_pos", "s_sym", "entropy", "swap_mass", "n_prompts"]


def score_table(model: torch.nn.Module, input_ids: np.ndarray | torch.Tensor, taus: Sequence[float] = (DEFAULT_TAU,),
                step: int | None = None, per_prompt: bool = False, batch_size: int = 64) -> pd.DataFrame:
    """Fast-path scores of every head as a tidy table; ``step`` (if given) becomes the first column.

    input_ids [P, n]. Runs without gradients and without touching the global RNG (eval mode, restored).
    """
    with torch.no_grad():
        res = scores_fast(model, input_ids, taus=taus, batch_size=batch_size)
    df = res.to_frame(mean_over_prompts=not per_prompt)
    if step is not None:
        df.insert(0, "step", step)
    return df


class HeadTracker:
    """Evaluation-step callback of ``posym.train.train``: appends the scores of a fixed prompt set."""

    def __init__(self, prompts: np.ndarray, taus: Sequence[float] = (DEFAULT_TAU,), batch_size: int = 128):
        self.prompts = torch.as_tensor(np.asarray(prompts))  # [P, n]
        self.taus = tuple(taus)
        self.batch_size = batch_size

    def __call__(self, step: int, model: torch.nn.Module, run_dir: Path) -> None:
        device = next(model.parameters()).device
        df = score_table(model, self.prompts.to(device), self.taus, step=step, batch_size=self.batch_size)
        append_rows(Path(run_dir) / SCORES_FILE, df)


def append_rows(path: Path, df: pd.DataFrame) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        df[COLUMNS].to_csv(f, header=new, index=False)


def truncate_scores(run_dir: str | os.PathLike, max_step: int) -> None:
    """Drop tracked rows after ``max_step`` (used when a run resumes from that step)."""
    path = Path(run_dir) / SCORES_FILE
    if path.is_file():
        df = pd.read_csv(path)
        tmp = path.with_suffix(".tmp")
        df[df["step"] <= max_step].to_csv(tmp, index=False)
        os.replace(tmp, path)


def load_prompts(path: str | os.PathLike, task: str) -> np.ndarray:
    """Token ids [P, n] of a JSONL prompt file written by ``posym data export`` (all of one length)."""
    from posym.tasks import get_vocab, read_jsonl

    rows = read_jsonl(path)
    if not rows:
        raise PosymError(f"no prompts in {path}")
    lengths = {len(r["tokens"]) for r in rows}
    if len(lengths) != 1:
        raise PosymError(f"prompts in {path} have different lengths {sorted(lengths)}; score one length at a time")
    vocab = get_vocab(task)
    try:
        return np.stack([vocab.encode(r["tokens"]) for r in rows])
    except (KeyError, ValueError) as exc:
        raise PosymError(f"{path}: token not in the {task} vocabulary ({exc})") from exc


def score_checkpoints(path: str | os.PathLike, task: str | None = None, prompts: str | os.PathLike | None = None,
                      n_prompts: int = 512, taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False,
                      steps: Sequence[int] | None = None, seed: int = 0, progress: bool = True,
                      device: str = "cpu") -> pd.DataFrame:
    """``posym scores``: scores of every checkpoint of a run directory (one block of rows per step), or
    of one HF GPT-J checkpoint directory (``step`` column omitted). Prompts: a JSONL file, else the
    first ``n_prompts`` validation prompts of the task (the set head tracking uses). ``device``: where
    the models run (e.g. "cuda"); scores are float32/float64 on every device."""
    from posym.heads.runs import resolve_model
    from posym.model.gptj import read_meta
    from posym.tasks import make_split
    from posym.train.checkpoints import list_checkpoints

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    path = Path(path)
    ckpts = list_checkpoints(path)
    if ckpts and steps is not None:
        wanted = set(steps)
        ckpts = [(s, p) for s, p in ckpts if s in wanted]
        if not ckpts:
            raise PosymError(f"none of the steps {sorted(wanted)} has a checkpoint in {path}")
    targets = [(s, p) for s, p in ckpts] if ckpts else [(None, path)]
    task = task or read_meta(path).get("task") or (read_meta(targets[0][1]).get("task") if ckpts else None)
    if task is None:
        raise PosymError(f"cannot tell the task of {path}: pass --task number|letter")
    ids = load_prompts(prompts, task) if prompts else make_split(task, "val", seed=seed, n=n_prompts).input_ids
    frames = []
    for step, p in tqdm(targets, desc="scoring checkpoints", disable=not progress or len(targets) == 1):
        model, _, _ = resolve_model(p, task=task, device=device)
        frames.append(score_table(model, ids, taus, step=step, per_prompt=per_prompt))
    return pd.concat(frames, ignore_index=True)
