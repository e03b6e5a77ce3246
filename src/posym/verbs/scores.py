"""``posym scores``: positional/symbolic scores of every head of every checkpoint (SPEC §3, Paper B)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from posym.errors import PosymError
from posym.heads.scores import DEFAULT_TAU
from posym.heads.tracking import score_table
from posym.runs import layout
from posym.verbs import Outputs, VerbResult


def score_checkpoints(path: str | os.PathLike, task: str | None = None, prompts: str | os.PathLike | None = None,
                      n_prompts: int = 512, taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False,
                      steps: Sequence[int] | None = None, seed: int = 0, progress: bool = True,
                      device: str = "cpu") -> pd.DataFrame:
    """Scores of every checkpoint of a run directory (one block of rows per ``step``), or of one HF
    checkpoint directory of any supported RoPE family (GPT-J, Llama, Gemma, ...; docs/models.md; no
    ``step`` column). Prompts: a JSONL file, else the first
    ``n_prompts`` validation prompts of the task (the set head tracking uses). ``device``: where the
    models run (e.g. "cuda"); scores are float32/float64 on every device."""
    from tqdm.auto import tqdm

    from posym.runs.resolve import resolve_model
    from posym.tasks import make_split
    from posym.tasks.export import read_prompt_ids

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    path = Path(path)
    if not path.is_dir():
        raise PosymError(f"no such run or model directory: {path}" if not path.exists() else f"{path} is not a folder")
    if n_prompts < 1:
        raise PosymError(f"need at least one prompt, got n={n_prompts}")
    ckpts = layout.list_checkpoints(path)
    if ckpts and steps is not None:
        wanted = set(steps)
        ckpts = [(s, p) for s, p in ckpts if s in wanted]
        if not ckpts:
            raise PosymError(f"none of the steps {sorted(wanted)} has a checkpoint in {path}")
    targets = list(ckpts) if ckpts else [(None, path)]
    task = task or layout.read_meta(path).get("task") or (layout.read_meta(targets[0][1]).get("task") if ckpts else None)
    if task is None:
        raise PosymError(f"cannot tell the task of {path}: pass --task number|letter")
    ids = read_prompt_ids(prompts, task) if prompts else make_split(task, "val", seed=seed, n=n_prompts).input_ids
    frames = []
    for step, p in tqdm(targets, desc="scoring checkpoints", disable=not progress or len(targets) == 1):
        model, _, _ = resolve_model(p, task=task, device=device, any_family=True)
        frames.append(score_table(model, ids, taus, step=step, per_prompt=per_prompt))
    return pd.concat(frames, ignore_index=True)


def scores(path: str | os.PathLike, *, out: str | os.PathLike | None = None, force: bool = False,
           **kwargs) -> VerbResult:
    """:func:`score_checkpoints` written to ``out`` (default ``PATH/scores.csv``); the summary is the
    last step's table."""
    out = Path(out) if out else Path(path) / layout.SCORES
    outputs = Outputs([out], force).check()
    df = score_checkpoints(path, **kwargs)
    outputs.csv(df, out)
    last = df[df["step"] == df["step"].max()] if "step" in df else df
    cols = [c for c in ("layer", "head", "tau", "s_pos", "s_sym", "entropy") if c in last]
    text = last[cols].groupby(["layer", "head", "tau"]).mean().round(3).to_string() + f"\nwrote {len(df)} rows to {out}"
    return VerbResult(df, outputs.written, text)


__all__ = ["score_checkpoints", "scores"]
