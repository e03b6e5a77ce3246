"""Resolve a run directory or a checkpoint directory to ``(model, task, step)`` for head analyses.

- A *checkpoint directory* (holds ``config.json``) is used as it is.
- A *run directory* (holds ``checkpoints/step-NNNNNN/``) resolves to the model it stands for: its
  newest complete checkpoint (the final one once training has finished) or, for a run trained with
  ``final_model="best"``, its best-validation checkpoint ``checkpoints/best/`` (SPEC §2); ``step``
  picks another: an int, ``"last"`` (the newest) or ``"best"``.
- An HF ``Trainer`` *output directory* resolves to the model saved at its root
  (``trainer.save_model()``), else to its newest ``checkpoint-N/``; ``step`` picks another: an int N
  (``checkpoint-N/``), ``"last"`` or ``"best"`` (the ``best_model_checkpoint`` of its
  ``trainer_state.json``).
- The task comes from ``posym.json`` (the checkpoint's, else the run's), else from the ``scores.json``
  the Trainer callback wrote into the output directory; a directory without either (e.g. a plain HF
  model folder) needs the ``task`` argument.
- Any RoPE family posym reads loads (GPT-J, Llama, Qwen3, Gemma-3, GPT-NeoX, ...; docs/models.md):
  every analysis takes the same models. A ``task`` that contradicts what the folder says, or a model
  whose vocabulary does not fit the task, is a PosymError raised before any work.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from posym.checks import MODEL_TASK_ATTR
from posym.errors import PosymError
from posym.model.causal_lm import check_family, load_causal_lm
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
    hf = layout.hf_checkpoints(path)
    if hf and (step is not None or not (path / layout.CONFIG_JSON).is_file()):
        return _hf_trainer_checkpoint(path, hf, step)
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
    raise PosymError(f"{path} is neither a posym run directory, an HF Trainer output_dir with checkpoint-N/ "
                     "folders nor a model checkpoint (no config.json)")


def _hf_trainer_checkpoint(path: Path, hf: list[tuple[int, Path]], step: StepChoice) -> Path:
    """The ``checkpoint-N/`` of an HF ``Trainer`` output directory that ``step`` names (module doc)."""
    if step is None or step == "last":
        return hf[-1][1]
    if step == "best":
        state = layout.hf_trainer_state(path)
        best = layout.read_json(state).get("best_model_checkpoint") if state is not None else None
        if not best:
            raise PosymError(f"{path}: its trainer_state.json names no best_model_checkpoint "
                             "(train with load_best_model_at_end=True, or give a step)")
        name = Path(str(best)).name
        for _, p in hf:
            if p.name == name:
                return p
        raise PosymError(f"{path}: the best checkpoint {name} is not among its complete checkpoint-N/ folders")
    for s, p in hf:
        if s == step:
            return p
    raise PosymError(f"{path} has no checkpoint-{step}/ (have: {', '.join(str(s) for s, _ in hf)})")


def _checkpoint_step(ckpt: Path) -> int | None:
    meta_step = read_meta(ckpt).get("step")
    if meta_step is not None:
        return int(meta_step)
    named = step_of_name(ckpt.name)
    return named if named is not None else layout.hf_checkpoint_step(ckpt.name)


def folder_task(run_or_model_dir: str | os.PathLike, ckpt: Path) -> str | None:
    """The task a folder says it holds: the checkpoint's ``posym.json``, the run's, else the
    ``scores.json`` the Trainer callback wrote into the output directory (None when none says)."""
    meta_task = read_meta(ckpt).get("task") or read_meta(run_or_model_dir).get("task")
    if meta_task is None:
        for folder in (Path(run_or_model_dir), ckpt.parent):
            info = folder / layout.SCORES_JSON
            if info.is_file():
                try:
                    meta_task = layout.read_json(info).get("task")
                except (PosymError, ValueError, OSError, AttributeError):
                    meta_task = None
                if meta_task:
                    break
    return str(meta_task) if meta_task else None


def resolve_task(run_or_model_dir: str | os.PathLike, ckpt: Path, task: str | None = None) -> str:
    """Task of a checkpoint: its ``posym.json``, else the run's, else ``task`` (PosymError if none/conflict)."""
    meta_task = folder_task(run_or_model_dir, ckpt)
    if task is not None:
        check_task(task)
        if meta_task is not None and meta_task != task:
            raise PosymError(f"{ckpt} was trained on the {meta_task} task, not {task}")
        return task
    if meta_task is None:
        raise PosymError(f"{ckpt} does not say its task (no posym.json or scores.json naming it); "
                         "pass the task: --task number|letter")
    return check_task(meta_task)


def model_architecture(folder: str | os.PathLike) -> tuple:
    """``(model_type, layers, heads, hidden size)`` of a model folder's ``config.json`` (None where
    absent): what must agree before rows of several models are put side by side or averaged."""
    cfg = layout.read_json(Path(folder) / layout.CONFIG_JSON)
    pick = lambda *names: next((cfg[n] for n in names if cfg.get(n) is not None), None)
    return (cfg.get("model_type"), pick("num_hidden_layers", "n_layer"), pick("num_attention_heads", "n_head"),
            pick("hidden_size", "n_embd"))


def show_architecture(arch: tuple) -> str:
    """``model_architecture``'s tuple in words: ``"llama (8 layers x 1 heads, width 128)"``."""
    return f"{arch[0]} ({arch[1]} layers x {arch[2]} heads, width {arch[3]})"


def check_model_folder(run_or_model_dir: str | os.PathLike, task: str | None = None,
                       step: StepChoice = None) -> tuple[Path, str]:
    """``(checkpoint folder, task)`` of a run / Trainer output_dir / model folder, checked before any
    model loads: the folder resolves, its task is known, its family is one posym reads and its
    vocabulary covers the task's (``posym data export --ids`` writes that vocabulary). One-line
    PosymError otherwise."""
    ckpt = resolve_checkpoint(run_or_model_dir, step)
    task = resolve_task(run_or_model_dir, ckpt, task)
    check_family(ckpt)
    need = get_vocab(task).size
    vocab = layout.read_json(ckpt / layout.CONFIG_JSON).get("vocab_size")
    if isinstance(vocab, int) and not isinstance(vocab, bool) and vocab < need:
        raise PosymError(f"model at {ckpt} has vocab_size {vocab} < {need} of the {task} task: it does not speak "
                         f"the task's vocabulary (posym data export --ids writes it)")
    return ckpt, task


def resolve_model(run_or_model_dir: str | os.PathLike, task: str | None = None, step: StepChoice = None,
                  device: str = "cpu", any_family: bool = True) -> ResolvedModel:
    """Load the model of a run (the checkpoint it stands for, or ``step``), of an HF ``Trainer``
    output directory or of a checkpoint directory, of any RoPE family posym reads (SPEC §3,
    docs/models.md) — the one model path of every analysis.

    Returns a :class:`ResolvedModel` (unpacks as ``model, task, step``); the model is in eval mode
    with eager attention. ``any_family`` is kept for old callers and ignored (every family loads).
    """
    ckpt, task = check_model_folder(run_or_model_dir, task, step)
    model = load_causal_lm(ckpt, device=device)
    need = get_vocab(task).size
    if model.config.vocab_size < need:
        raise PosymError(f"model at {ckpt} has vocab_size {model.config.vocab_size} < {need} of the {task} task")
    if read_meta(ckpt).get("task") or read_meta(run_or_model_dir).get("task"):  # a posym model: it knows its task
        setattr(model.config, MODEL_TASK_ATTR, task)
    return ResolvedModel(model=model, task=task, step=_checkpoint_step(ckpt), path=ckpt)


__all__ = ["ResolvedModel", "StepChoice", "check_model_folder", "folder_task", "model_architecture", "resolve_checkpoint",
           "resolve_model", "resolve_task", "run_final_model", "show_architecture"]
