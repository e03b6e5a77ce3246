"""Resolve a run directory or a checkpoint directory to ``(model, task, step)`` for head analyses.

- A *checkpoint directory* (holds ``config.json``) is used as it is.
- A *run directory* (holds ``checkpoints/step-NNNNNN/``) resolves to the model it stands for: its
  newest complete checkpoint (the final one once training has finished) or, for a run trained with
  ``final_model="best"``, its best-validation checkpoint ``checkpoints/best/`` (SPEC §2); ``step``
  picks another: an int, ``"last"`` (the newest) or ``"best"``.
- The task comes from ``posym.json`` (the checkpoint's, else the run's); a directory without one (e.g.
  a plain HF GPT-J) needs the ``task`` argument.
- The model must be a GPT-J (posym's own) unless ``any_family=True`` (the head scores): then any RoPE
  family posym reads (docs/models.md) loads. A ``task`` that contradicts ``posym.json``, or a
  model whose vocabulary does not fit the task, is a PosymError.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from posym.checks import MODEL_TASK_ATTR
from posym.errors import PosymError
from posym.model.causal_lm import load_causal_lm
from posym.model.gptj import load_model
from posym.runs.layout import read_meta
from posym.tasks.vocab import check_task, get_vocab
from posym.runs import layout
from posym.runs.layout import best_checkpoint, list_checkpoints, step_of_name


@dataclass
class ResolvedModel:
    """A loaded model and what it was trained on. ``step`` is None when unknown."""

    model: nn.Module
    task: str
    step: int | None
    path: Path

    def __iter__(self):  # allows ``model, task, step = resolve_model(...)``
        return iter((self.model, self.task, self.step))


StepChoice = int | str | None


def run_final_model(run_dir: str | os.PathLike) -> str:
    """``"last"`` or ``"best"``: which checkpoint a run stands for (its ``final_model`` setting)."""
    return str(read_meta(run_dir).get("config", {}).get("final_model", "last"))


def resolve_checkpoint(run_or_model_dir: str | os.PathLike, step: StepChoice = None) -> Path:
    """The checkpoint directory a run/checkpoint path stands for (see the module docstring)."""
    path = Path(run_or_model_dir)
    if not path.exists():
        raise PosymError(f"no such run or model directory: {path}")
    if not path.is_dir():
        raise PosymError(f"{path} is not a directory")
    if isinstance(step, str) and step not in ("best", "last"):
        try:
            step = int(step)
        except ValueError:
            raise PosymError(f"bad step {step!r}: expected an integer, 'last' or 'best'") from None
    ckpts = list_checkpoints(path)
    if ckpts:
        if step is None:
            step = run_final_model(path)
        if step == "best":
            found = best_checkpoint(path)
            if found is None:
                raise PosymError(f"run {path} has no best-validation checkpoint (checkpoints/best/)")
            return found[1]
        if step == "last":
            return ckpts[-1][1]
        for s, p in ckpts:
            if s == step:
                return p
        raise PosymError(f"run {path} has no checkpoint at step {step} (have: {', '.join(str(s) for s, _ in ckpts)})")
    if (path / layout.CONFIG_JSON).is_file():
        if isinstance(step, str):
            raise PosymError(f"{path} is a single checkpoint; step {step!r} needs a run directory")
        if step is not None:
            meta_step = read_meta(path).get("step")
            if meta_step is not None and int(meta_step) != step:
                raise PosymError(f"checkpoint {path} is step {meta_step}, not {step}")
        return path
    if (path / layout.CHECKPOINTS).is_dir() or (path / layout.POSYM_JSON).is_file():
        raise PosymError(f"run {path} has no complete checkpoint yet")
    raise PosymError(f"{path} is neither a posym run directory nor a model checkpoint (no config.json)")


def _checkpoint_step(ckpt: Path) -> int | None:
    meta_step = read_meta(ckpt).get("step")
    if meta_step is not None:
        return int(meta_step)
    return step_of_name(ckpt.name)


def resolve_task(run_or_model_dir: str | os.PathLike, ckpt: Path, task: str | None = None) -> str:
    """Task of a checkpoint: its ``posym.json``, else the run's, else ``task`` (PosymError if none/conflict)."""
    meta_task = read_meta(ckpt).get("task") or read_meta(run_or_model_dir).get("task")
    if task is not None:
        check_task(task)
        if meta_task is not None and meta_task != task:
            raise PosymError(f"{ckpt} was trained on the {meta_task} task, not {task}")
        return task
    if meta_task is None:
        raise PosymError(f"{ckpt} has no posym.json naming its task; pass the task (number or letter)")
    return check_task(meta_task)


def resolve_model(run_or_model_dir: str | os.PathLike, task: str | None = None, step: StepChoice = None,
                  device: str = "cpu", any_family: bool = False) -> ResolvedModel:
    """Load the model of a run (the checkpoint it stands for, or ``step``) or of a checkpoint directory.

    Returns a :class:`ResolvedModel` (unpacks as ``model, task, step``); the model is in eval mode
    with eager attention. A GPT-J unless ``any_family`` (then any supported RoPE family, SPEC §3).
    """
    ckpt = resolve_checkpoint(run_or_model_dir, step)
    task = resolve_task(run_or_model_dir, ckpt, task)
    model = (load_causal_lm if any_family else load_model)(ckpt, device=device)
    need = get_vocab(task).size
    if model.config.vocab_size < need:
        raise PosymError(f"model at {ckpt} has vocab_size {model.config.vocab_size} < {need} of the {task} task")
    if read_meta(ckpt).get("task") or read_meta(run_or_model_dir).get("task"):  # a posym model: it knows its task
        setattr(model.config, MODEL_TASK_ATTR, task)
    return ResolvedModel(model=model, task=task, step=_checkpoint_step(ckpt), path=ckpt)


__all__ = ["ResolvedModel", "StepChoice", "resolve_checkpoint", "resolve_model", "resolve_task", "run_final_model"]
