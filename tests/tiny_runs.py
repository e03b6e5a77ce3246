"""A tiny posym training run for tests that need a finished run or checkpoint (4 steps, 1 layer)."""

from __future__ import annotations

from pathlib import Path

from posym.train import make_config
from posym.verbs.train import train

#: 4 steps, a checkpoint and an evaluation every 2, a 1-layer 32-wide model: seconds on one core.
TINY_RUN = dict(steps=4, eval_every=2, n_val=16, n_test=16, checkpoint_every=2, eval_batch_size=16,
                model_overrides=dict(n_layer=1, n_embd=32, n_inner=64, rotary_dim=32))


def tiny_run(out: Path, task: str = "number", **overrides) -> Path:
    """Train the tiny run into ``out`` (``overrides`` of :data:`TINY_RUN`, e.g. ``track_heads=False``)."""
    train(make_config(task, "quick", **{**TINY_RUN, **overrides}), out, progress=False)
    return out
