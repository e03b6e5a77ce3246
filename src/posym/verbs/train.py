"""``posym train``: a GPT-J (or ``--arch``: another family, docs/models.md) on one task (SPEC §2) with head
tracking (Paper A Fig. 2) composed in."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from posym.errors import PosymError
from posym.runs import layout
from posym.train.config import TrainConfig
from posym.train.loop import EvalCallback, RunResult
from posym.train.loop import train as train_loop


def head_tracker(config: TrainConfig):
    """The callback that scores every head at each evaluation (SPEC §3) on the first
    ``track_prompts`` validation prompts of the run's data (the set ``posym scores`` uses)."""
    from posym.heads.tracking import HeadTracker
    from posym.tasks import make_split

    n = min(config.track_prompts, config.n_val)
    if n < 1:
        raise PosymError(f"track_prompts must be >= 1 when tracking heads, got {config.track_prompts}")
    prompts = make_split(config.task, "val", seed=config.data_seed, n=n, distractors=config.distractors).input_ids
    return HeadTracker(prompts, config.track_taus)


def _effective_config(config: TrainConfig, out: Path, resume: bool) -> TrainConfig:
    """The configuration the loop will run: the stored one on resume (the loop checks it again)."""
    if not resume:
        return config
    stored = layout.read_meta(out).get("config")
    if not isinstance(stored, dict):
        return config  # the loop reports the missing / corrupt posym.json
    try:
        return TrainConfig.from_dict(stored)
    except (TypeError, ValueError):
        return config


def train(config: TrainConfig, out: str | os.PathLike, *, resume: bool = False, force: bool = False,
          device: str = "cpu", threads: int | None = None, progress: bool = True,
          callbacks: Sequence[EvalCallback] = ()) -> RunResult:
    """Train into run directory ``out`` (``posym.train.loop.train``), tracking heads into
    ``scores.csv`` when ``config.track_heads`` and logging to ``RUN/tensorboard/`` when ``config.log``
    has ``"tensorboard"``. Returns the loop's RunResult (its ``summary`` is what
    the CLI prints)."""
    out = Path(out)
    effective = _effective_config(config, out, resume)
    cbs = list(callbacks)
    if effective.track_heads:
        cbs.insert(0, head_tracker(effective))
    if "tensorboard" in effective.log:  # after head tracking: it logs the rows just written
        from posym.integrations.tensorboard import TensorBoardLogger

        cbs.append(TensorBoardLogger())
    return train_loop(config, out, resume=resume, force=force, device=device, threads=threads, progress=progress,
                      callbacks=cbs)


__all__ = ["head_tracker", "train"]
