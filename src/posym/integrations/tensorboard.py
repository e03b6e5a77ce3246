"""TensorBoard logging of posym's own training runs (``posym train --log tensorboard``).

:class:`TensorBoardLogger` is an evaluation-step callback of ``posym.train``: after each evaluation it
writes the validation loss and accuracy per hop, the running training loss, the learning rate and —
when heads are tracked — per-layer mean s_POS / s_SYM and the number of pure heads (SPEC §3, the
values of :func:`posym.integrations.tracker.summary_values`) as scalars into ``RUN/tensorboard/``.
A resumed run purges the events written after its checkpoint, so the curves have no duplicates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from posym.errors import PosymError
from posym.integrations.tracker import summary_values
from posym.runs import layout


class TensorBoardLogger:
    """posym.train callback writing a run's training values to ``RUN/tensorboard/`` (module doc)."""

    def __init__(self):
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError as exc:  # torch's writer needs the tensorboard package
            raise PosymError("--log tensorboard needs the 'tensorboard' package: pip install -e '.[tensorboard]'") from exc
        self.writer = None

    def on_start(self, run_dir: Path, start_step: int, resume: bool) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / layout.TENSORBOARD),
                                    purge_step=int(start_step) + 1 if resume else None)

    def values(self, step: int, run_dir: Path) -> dict[str, float]:
        """The scalars of evaluation ``step``: ``val/*``, ``train/*`` and ``heads/*``."""
        out: dict[str, float] = {}
        metrics = pd.read_csv(Path(run_dir) / layout.METRICS)
        row = metrics[(metrics["split"] == "val") & (metrics["step"] == step)]
        if len(row):
            r = row.iloc[-1]
            for col in ["loss", "acc"] + [c for c in metrics.columns if c.startswith("acc_hop")]:
                out[f"val/{col}"] = float(r[col])
            for col, name in (("train_loss", "train/loss"), ("lr", "train/lr")):
                if col in r and np.isfinite(r[col]):
                    out[name] = float(r[col])
        scores_path = Path(run_dir) / layout.SCORES
        if scores_path.is_file():
            scores = pd.read_csv(scores_path)
            at = scores[scores["step"] == step]
            if len(at):
                out.update(summary_values(at, prefix="heads/"))
        return out

    def __call__(self, step: int, model: torch.nn.Module, run_dir: Path) -> None:
        if self.writer is None:
            self.on_start(run_dir, step, resume=False)
        for key, value in self.values(step, run_dir).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()


__all__ = ["TensorBoardLogger"]
