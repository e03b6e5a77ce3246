"""Atomic, resumable checkpoints (docs/architecture.md "train/").

A checkpoint is ``RUN/checkpoints/step-NNNNNN/`` holding HF ``model.safetensors`` + ``config.json``,
our ``posym.json`` (task, preset, step) and, for the newest one, ``trainer_state.pt`` (optimizer,
scheduler, RNG, running-loss accumulators; tensors and plain containers only, loaded with
``weights_only=True``). Each is written to a temporary directory and moved in place with
``os.replace``, so a killed write never damages an existing checkpoint.

``RUN/checkpoints/best/`` (weights + ``posym.json`` with ``step`` and ``val_acc``, no trainer state)
is the first evaluation step that reached the run's maximal validation accuracy so far — HF
Trainer's ``load_best_model_at_end`` rule (SPEC §2). Every run keeps it; a run with
``final_model="best"`` stands for it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import GPTJForCausalLM

from posym.errors import PosymError
from posym.model.gptj import save_model
from posym.runs import layout
from posym.runs.layout import best_dir, list_checkpoints, step_dir, write_meta

TRAINER_STATE = layout.TRAINER_STATE


@contextmanager
def _write_guard(tmp: Path, what: str) -> Iterator[None]:
    """Remove the half-written temporary directory when a write fails, and turn a full disk or an
    unwritable folder into a PosymError (torch.save reports them as RuntimeError); the previous
    checkpoints are untouched, so ``--resume`` continues from the newest complete one."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            full = shutil.disk_usage(tmp.parent).free < (1 << 20)
        except OSError:
            full = False
        if isinstance(exc, OSError):
            why = exc.strerror or str(exc)
        elif full:  # torch.save's stream writer reports a full disk as a RuntimeError
            why = "No space left on device"
        else:
            raise
        raise PosymError(f"cannot write {what}: {why}; the previous checkpoints are intact — free space and "
                         "continue with --resume") from exc


def _write_dir(final: Path, model: GPTJForCausalLM, meta: dict, trainer_state: dict[str, Any] | None = None) -> Path:
    """Write weights + ``posym.json`` (+ trainer state) to a temporary directory beside ``final``, then
    move it in place (an existing ``final`` is swapped out atomically and dropped)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".tmp-{final.name}-{uuid.uuid4().hex[:8]}"
    with _write_guard(tmp, f"checkpoint {final}"):
        save_model(model, tmp)
        write_meta(tmp, meta)
        if trainer_state is not None:
            torch.save(trainer_state, tmp / TRAINER_STATE)
    if final.exists():  # re-saving a step after resume: swap atomically, then drop the old copy
        trash = final.parent / f".old-{final.name}-{uuid.uuid4().hex[:8]}"
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)
    return final


def save_checkpoint(run_dir: str | os.PathLike, step: int, model: GPTJForCausalLM, meta: dict,
                    trainer_state: dict[str, Any] | None = None) -> Path:
    """Atomically write checkpoint ``step``; with ``trainer_state``, older trainer states are pruned."""
    final = _write_dir(step_dir(run_dir, step), model, {**meta, "step": step}, trainer_state)
    if trainer_state is not None:
        for s, p in list_checkpoints(run_dir):
            if s != step and (p / TRAINER_STATE).exists():
                (p / TRAINER_STATE).unlink()
    return final


def save_best(run_dir: str | os.PathLike, step: int, model: GPTJForCausalLM, meta: dict, val_acc: float) -> Path:
    """Atomically replace ``RUN/checkpoints/best/`` by the weights of ``step`` (validation accuracy ``val_acc``)."""
    return _write_dir(best_dir(run_dir), model, {**meta, "step": step, "val_acc": float(val_acc), "selection": "best"})


def latest_resumable(run_dir: str | os.PathLike) -> tuple[int, Path] | None:
    """The newest checkpoint that carries a trainer state, or None."""
    for step, path in reversed(list_checkpoints(run_dir)):
        if (path / TRAINER_STATE).is_file():
            return step, path
    return None


def load_trainer_state(path: str | os.PathLike) -> dict[str, Any]:
    """Load ``trainer_state.pt`` with ``weights_only=True``; PosymError if missing or corrupt."""
    f = Path(path) / TRAINER_STATE
    try:
        return torch.load(f, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise PosymError(f"checkpoint {path} has no {TRAINER_STATE}; cannot resume from it") from exc
    except Exception as exc:
        raise PosymError(f"corrupt trainer state {f}: {str(exc).splitlines()[0]}") from exc


def clean_temporaries(run_dir: str | os.PathLike) -> None:
    """Remove leftovers of interrupted checkpoint writes."""
    root = Path(run_dir) / layout.CHECKPOINTS
    if root.is_dir():
        for p in root.iterdir():
            if p.name.startswith((".tmp-", ".old-")):
                shutil.rmtree(p, ignore_errors=True)
