"""Positional/symbolic head tracking inside a Hugging Face ``Trainer`` run (SPEC §3; Paper A trained
its models with HF ``Trainer``).

    from posym.integrations import PositionalSymbolicCallback
    trainer = Trainer(model, args, train_dataset=..., eval_dataset=...,
                      callbacks=[PositionalSymbolicCallback("number")])

At every evaluation (or every ``every`` steps) the callback scores every head of the model being
trained (:class:`~posym.integrations.tracker.ScoreTracker`), writes the rows to
``args.output_dir/scores.csv`` (with ``scores.json``: what the table measured), prints one line per
scoring, adds the summary values (``posym/s_pos/layer_L``, ``posym/s_sym/layer_L``,
``posym/pure_positional``, ``posym/pure_symbolic``) to the Trainer's ``state.log_history`` and, when
``report_to`` includes TensorBoard, writes them as scalars into the folder the Trainer's TensorBoard
callback writes (:func:`tensorboard_dir`), so TensorBoard shows them beside the loss. Under DDP only
the main process scores and writes (the others do not wait for it beyond their next collective).

The table follows the Trainer's own rule for ``output_dir``: a fresh training (``global_step`` 0)
starts a new table and moves an earlier training's table aside to ``scores.previous.csv`` (one
warning line); a resumed one (``trainer.train(resume_from_checkpoint=...)``) keeps the rows up to its
checkpoint step and continues. A ``scores.csv`` that no tracker wrote, an unwritable folder, a model
whose vocabulary is too small, or another prompt set on resume are refused at ``on_train_begin``,
before any step.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from transformers import TrainerCallback

from posym.checks import check_positive_int
from posym.heads.scores import DEFAULT_TAU
from posym.constants import GAMMA
from posym.integrations.tracker import ScoreTracker, say


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
    ``verbose``: one line per scoring on stderr. Without an evaluation strategy and without ``every``
    only step 0 is scored: ``on_train_begin`` warns so.
    """

    def __init__(self, prompts: Any, *, task: str | None = None, n: int = 512, seed: int = 0, blocks: Any = None,
                 every: int | None = None, at_start: bool = True, out: str | os.PathLike | None = None,
                 taus: Sequence[float] = (DEFAULT_TAU,), gamma: float = GAMMA, batch_size: int = 64,
                 verbose: bool = True):
        self.every = None if every is None else check_positive_int(every, "every")
        # the folder is bound at on_train_begin (fresh or resumed); the callback schedules, so no every
        self.tracker = ScoreTracker(prompts, None, task=task, n=n, seed=seed, blocks=blocks, taus=taus, gamma=gamma,
                                    batch_size=batch_size, verbose=verbose)
        self.out = None if out is None else Path(out)
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
        if self.tracker.out is None:  # an event before on_train_begin (a hand-driven callback)
            self.tracker.bind(self.out or Path(args.output_dir))
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
        """Checks on every rank, before any step: the folder and its table, the model (family,
        vocabulary). Then, on the main process only, a fresh run (step 0) starts a new table and scores
        step 0 (``at_start``); a resumed one cuts the table at its checkpoint step."""
        step = int(state.global_step)
        fresh = step == 0
        self.tracker.bind(self.out or Path(args.output_dir), fresh=fresh, probe=state.is_world_process_zero)
        if model is not None:  # a fresh run may train another model: its old table is moved aside below
            self.tracker.check_model(model, against_table=not fresh)
        strategy = getattr(args, "eval_strategy", "no")
        if self.every is None and str(getattr(strategy, "value", strategy)) == "no":
            say("warning: the Trainer never evaluates (eval_strategy='no') and the callback has no every=, so it "
                "scores step 0 only; pass every=N or set eval_strategy")
        if not state.is_world_process_zero:
            return
        if fresh:
            self.tracker.start_new_table()
            self._scored_steps = set()
            if self.at_start:
                self._score(args, state, model)
        else:  # resumed from checkpoint-<step>: keep its rows, drop later ones, never score a step twice
            self.tracker.resume_from(step)
            self._scored_steps = self.tracker.steps_written()

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
