"""Positional/symbolic head tracking inside a Hugging Face ``Trainer`` run (SPEC §3; Paper A trained
its models with HF ``Trainer``).

    from posym.integrations import PositionalSymbolicCallback
    trainer = Trainer(model, args, train_dataset=..., eval_dataset=...,
                      callbacks=[PositionalSymbolicCallback("number")])

At every evaluation (or every ``every`` steps) the callback scores every head of the model being
trained (:class:`~posym.integrations.tracker.ScoreTracker`), appends the rows to
``args.output_dir/scores.csv``, adds the summary values (``posym/s_pos/layer_L``,
``posym/s_sym/layer_L``, ``posym/pure_positional``, ``posym/pure_symbolic``) to the Trainer's
``state.log_history`` and, when ``report_to`` includes TensorBoard, writes them as scalars into the
folder the Trainer's TensorBoard callback writes (:func:`tensorboard_dir`), so TensorBoard shows
them beside the loss. Under DDP only the main process scores (the others do not wait for it beyond
their next collective). A resumed run drops the rows written after its checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from transformers import TrainerCallback

from posym.errors import PosymError
from posym.heads.scores import DEFAULT_TAU
from posym.integrations.tracker import DEFAULT_GAMMA, ScoreTracker


def _reports_to_tensorboard(args: Any) -> bool:
    report = getattr(args, "report_to", None) or []
    report = [report] if isinstance(report, str) else list(report)
    return "tensorboard" in report or "all" in report


def tensorboard_dir(args: Any) -> Path:
    """The folder the Trainer's own TensorBoard callback writes: ``$TENSORBOARD_LOGGING_DIR``, else
    ``args.logging_dir`` (transformers < 5.20), else the newest ``output_dir/runs/<time>_<host>`` folder
    it created when training began (``output_dir/runs/posym`` if there is none)."""
    env = os.getenv("TENSORBOARD_LOGGING_DIR")
    if env:
        return Path(os.path.expanduser(env))
    if getattr(args, "logging_dir", None):
        return Path(args.logging_dir)
    runs = Path(args.output_dir) / "runs"
    made = sorted((p for p in runs.glob("*") if p.is_dir()), key=lambda p: p.stat().st_mtime) if runs.is_dir() else []
    return made[-1] if made else runs / "posym"


class PositionalSymbolicCallback(TrainerCallback):
    """HF ``TrainerCallback`` that tracks s_POS / s_SYM of every head during training (module doc).

    ``prompts``: a posym task name, a JSONL prompt file (with ``task``), token ids [P, n] or a list of
    LLM prompts with blocks (:func:`posym.integrations.tracker.prompt_groups`). ``every``: score every
    ``every`` optimizer steps instead of at each evaluation. ``at_start``: also score the model before
    the first step (step 0). ``out``: where ``scores.csv`` goes (default ``args.output_dir``).
    """

    def __init__(self, prompts: Any, *, task: str | None = None, n: int = 512, seed: int = 0, blocks: Any = None,
                 every: int | None = None, at_start: bool = True, out: str | os.PathLike | None = None,
                 taus: Sequence[float] = (DEFAULT_TAU,), gamma: float = DEFAULT_GAMMA, batch_size: int = 64):
        if every is not None and (isinstance(every, bool) or int(every) < 1):
            raise PosymError(f"every must be a positive number of steps, got {every!r}")
        self.tracker = ScoreTracker(prompts, out, task=task, n=n, seed=seed, blocks=blocks, taus=taus, gamma=gamma,
                                    batch_size=batch_size)  # scores at every call: the callback schedules
        self.every = None if every is None else int(every)
        self.at_start = at_start
        self._tb = None
        self._scored_steps: set[int] = set()

    # ---- helpers ------------------------------------------------------------------------------------
    def _writer(self, args: Any):
        if self._tb is None and _reports_to_tensorboard(args):
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(tensorboard_dir(args)))
        return self._tb

    def _score(self, args: Any, state: Any, model: Any) -> None:
        step = int(state.global_step)
        if not state.is_world_process_zero or model is None or step in self._scored_steps:
            return
        if self.tracker.out is None:
            self.tracker.out = Path(args.output_dir)
        values = self.tracker(model, step)
        self._scored_steps.add(step)
        state.log_history.append({**values, "step": step})
        tb = self._writer(args)
        if tb is not None:
            for key, value in values.items():
                tb.add_scalar(key, value, step)
            tb.flush()

    # ---- Trainer events -----------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero and state.global_step > 0:  # resumed from a checkpoint
            if self.tracker.out is None:
                self.tracker.out = Path(args.output_dir)
            self.tracker.resume_from(int(state.global_step))
            self._scored_steps = {s for s in self._scored_steps if s <= state.global_step}
        elif self.at_start:
            self._score(args, state, model)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.every is not None and state.global_step % self.every == 0:
            self._score(args, state, model)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if self.every is None:
            self._score(args, state, model)

    def on_train_end(self, args, state, control, **kwargs):
        if self._tb is not None:
            self._tb.close()
            self._tb = None


__all__ = ["PositionalSymbolicCallback", "tensorboard_dir"]
