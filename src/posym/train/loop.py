"""The training loop (SPEC §2): AdamW + linear warmup/decay, last-token loss, resumable.

Plain PyTorch over HF ``GPTJForCausalLM`` parameters, with the fast last-token forward of
``posym.model.fast`` (``--arch`` llama / qwen3 / gemma3 / gpt-neox: that family's HF model and its
plain forward, :mod:`posym.model.arch`). Resume is exact: model, optimizer, scheduler, RNG state and running-loss
accumulators are checkpointed, and the data order is a pure function of (order seed, step).
"""

from __future__ import annotations

import contextlib
import csv
import inspect
import json
import os
import platform
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from tqdm.auto import tqdm

import posym
from posym.checks import MODEL_TASK_ATTR
from posym.errors import PosymError
from posym.files import exchange_dirs, write_atomic
from posym.runs.lock import DirLock
from posym.model.arch import arch_config, build_arch_model
from posym.model.causal_lm import load_causal_lm
from posym.model.fast import has_fast_path, last_token_logits
from posym.model.pe import parse_pe, random_positions
from posym.tasks import get_vocab, make_split
from posym.runs import layout
from posym.runs.tables import RESUME_REMEDY, check_resumed, refresh_parquet
from posym.train import checkpoints as ckpt
from posym.train import distributed as dist
from posym.train.config import TrainConfig
from posym.train.evaluate import MAX_HOPS, evaluate
from posym.train.graphs import check_cuda_graph, make_graph_step
from posym.train.rng import _restore_rng, _rng_states
from posym.train.rundir import _check_replaceable, _check_run_dir, _has_entries, _prepare_run_dir
from posym.train.schedule import checkpoint_steps, eval_steps, linear_warmup_decay

METRIC_COLUMNS = ["split", "step", "train_loss", "lr", "loss", "acc"] + [
    f"acc_hop{h}" for h in range(1, MAX_HOPS + 1)] + ["time_s"]

#: Called at every evaluation step with (step, model, run_dir), after the validation row is written
#: (head tracking: ``posym.heads.tracking.HeadTracker``). An optional ``on_start(run_dir, start_step,
#: resume)`` method runs once before training (e.g. to drop rows written after a resumed checkpoint).
EvalCallback = Callable[[int, torch.nn.Module, Path], None]


@dataclass
class RunResult:
    """A finished training run: its directory, configuration and final test metrics."""

    run_dir: Path
    config: TrainConfig
    test: dict[str, float]

    @property
    def summary(self) -> str:
        t = self.test
        hops = " ".join(f"hop{h}={t[f'acc_hop{h}']:.3f}" for h in range(1, 5))
        return f"test accuracy {t['acc']:.4f} ({hops}); run in {self.run_dir}"


#: HF Trainer's ``get_decay_parameter_names`` name patterns of norm weights (RMSNorm, QK-norm: the
#: families of ``--arch``); GPT-J's LayerNorms are caught by type, and none of its names match.
_NORM_NAMES = re.compile(r"layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """HF Trainer grouping: no weight decay on biases, LayerNorm weights and (by name) other norms' weights."""
    no_decay = {n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    decay, other = [], []
    for name, p in model.named_parameters():
        owner = name.rsplit(".", 1)[0]
        skip = name.endswith("bias") or owner in no_decay or _NORM_NAMES.search(name.lower()) is not None
        (other if skip else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (SPEC §2: betas, weight decay as HF Trainer groups it) and the warmup/decay LambdaLR."""
    optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr,
                                  betas=config.betas, eps=config.eps, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_warmup_decay(s, config.warmup, config.steps))
    return optimizer, scheduler


class LastTokenLoss(torch.nn.Module):
    """The training objective as a module (what DDP and ``torch.compile`` wrap): cross-entropy of the
    last-position logits (``posym.model.fast.last_token_logits``) against the answers.

    ``reduction`` "mean" (single process) or "sum" (DDP: the loop rescales it to the global mean).
    Logits are cast to float32 before the loss, so under bf16 autocast the loss is float32.
    """

    def __init__(self, model: torch.nn.Module, reduction: str = "mean"):
        super().__init__()
        self.model = model
        self.reduction = reduction

    def forward(self, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        return F.cross_entropy(last_token_logits(self.model, x, positions).float(), y, reduction=self.reduction)


def autocast_context(precision: str, device: str | torch.device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to bfloat16 ("bf16") or float16 ("fp16") on the device's type; a no-op for "fp32"."""
    if precision in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        return torch.autocast(device_type=torch.device(device).type, dtype=dtype)
    if precision != "fp32":
        raise PosymError(f"unknown precision {precision!r}; choose one of ['fp32', 'bf16', 'fp16']")
    return contextlib.nullcontext()


def make_grad_scaler(precision: str, device: str | torch.device) -> "torch.amp.GradScaler | None":
    """Dynamic loss scaling for "fp16" (HF Trainer's fp16=True uses the same torch.amp.GradScaler), else None."""
    if precision != "fp16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)


def _optimizer_step(objective: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                    params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer, scheduler: Any,
                    x: torch.Tensor, y: torch.Tensor, max_grad_norm: float | None, precision: str = "fp32",
                    loss_scale: float = 1.0, scaler: "torch.amp.GradScaler | None" = None,
                    positions: torch.Tensor | None = None) -> torch.Tensor:
    """Forward (under autocast for bf16/fp16) + backward of ``loss_scale * objective(x, y)`` (with the
    batch's position ids ``positions`` [B, T] when given: ``randomized:L``, SPEC §2.1), gradient
    clipping, optimizer and scheduler step. Returns the unscaled loss, detached, on the device (no sync).

    With a ``scaler`` (fp16) the loss is scaled before backward and the gradients unscaled before
    clipping; a step the scaler skips (inf/nan gradients) also skips the scheduler, as HF Trainer does
    (this costs one device sync per step)."""
    with autocast_context(precision, x.device):
        loss = objective(x, y) if positions is None else objective(x, y, positions)
    optimizer.zero_grad(set_to_none=True)
    scaled = loss * loss_scale if loss_scale != 1.0 else loss
    if scaler is None:
        scaled.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
        optimizer.step()
        scheduler.step()
        return loss.detach()
    scaler.scale(scaled).backward()
    scaler.unscale_(optimizer)
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True)
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    if scaler.get_scale() >= before:  # the optimizer step ran
        scheduler.step()
    return loss.detach()


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
               x: torch.Tensor, y: torch.Tensor, max_grad_norm: float | None, precision: str = "fp32") -> float:
    """One optimizer step on the last-token loss. x [B, T] input ids, y [B] answer ids -> loss."""
    objective = LastTokenLoss(model)
    return _optimizer_step(objective, list(model.parameters()), optimizer, scheduler, x, y, max_grad_norm,
                           precision).item()


def batch_indices(order_seed: int, step: int, batch_size: int, n_train: int) -> np.ndarray:
    """Indices of the training samples of optimizer step ``step`` (0-based): epoch-wise shuffles."""
    epoch, start = _batch_position(step, batch_size, n_train)
    return _epoch_perm(order_seed, epoch, n_train)[start:start + batch_size]


def _batch_position(step: int, batch_size: int, n_train: int) -> tuple[int, int]:
    """(epoch, offset into that epoch's permutation) of step ``step``'s batch."""
    epoch, k = divmod(step, n_train // batch_size)
    return epoch, k * batch_size


_PERM_CACHE: dict[tuple[int, int, int], np.ndarray] = {}


def _epoch_perm(order_seed: int, epoch: int, n: int) -> np.ndarray:
    key = (order_seed, epoch, n)
    if key not in _PERM_CACHE:
        _PERM_CACHE.clear()
        _PERM_CACHE[key] = np.random.default_rng([order_seed, epoch]).permutation(n)
    return _PERM_CACHE[key]


def _read_metrics(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _write_metrics(path: Path, rows: list[dict[str, Any]]) -> None:
    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS, extrasaction="ignore")  # the documented columns
            w.writeheader()
            w.writerows(rows)

    write_atomic(path, write, mkdir=False)
    refresh_parquet(path)


def _append_metrics(path: Path, row: dict[str, Any]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)
    refresh_parquet(path)


def _versions() -> dict[str, str]:
    return {"posym": posym.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def _find_resumable(out: Path) -> tuple[int, str]:
    """(step, path) of the newest checkpoint with a trainer state, after removing leftovers of
    interrupted writes. Raises PosymError when there is none."""
    ckpt.clean_temporaries(out)
    found = ckpt.latest_resumable(out)
    if found is None:
        raise PosymError(f"cannot resume: no checkpoint with a trainer state under {out}/checkpoints")
    return found[0], str(found[1])


def _load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
                     device: str) -> dict[str, Any]:
    """Load weights, optimizer and scheduler state of checkpoint ``path``; returns its trainer state."""
    state = ckpt.load_trainer_state(path)
    _load_weights(path, model, device)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state


def _load_weights(path: Path, model: torch.nn.Module, device: str) -> None:
    """Load a checkpoint's weights into ``model`` (strict up to the constant rotary/causal buffers).

    Another ``--arch`` family loads through transformers (:func:`posym.model.causal_lm.load_causal_lm`,
    strict), which knows the family's checkpoint names (GPT-NeoX saves ``lm_head`` as ``embed_out``),
    and its every tensor is copied into ``model`` (strict)."""
    from safetensors.torch import load_file

    if not has_fast_path(model):
        loaded = load_causal_lm(path, device)
        try:
            model.load_state_dict(loaded.state_dict(), strict=True)
        except RuntimeError as exc:
            raise PosymError(f"checkpoint {path} does not match the run's model config") from exc
        return

    try:
        weights = load_file(str(path / layout.WEIGHTS), device=str(device))
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except Exception as exc:
        raise PosymError(f"corrupt checkpoint {path}: {str(exc).splitlines()[0]}") from exc
    if [m for m in missing if "lm_head" not in m and "embed_positions" not in m] or unexpected:
        raise PosymError(f"checkpoint {path} does not match the run's model config")


def _best_so_far(out: Path, start_step: int) -> dict[str, Any]:
    """Best validation step/accuracy among the kept metric rows (steps <= ``start_step``) on resume."""
    best: dict[str, Any] = {"step": None, "acc": None}
    for r in _read_metrics(out / layout.METRICS):
        if r["split"] == "val" and int(r["step"]) <= start_step:
            acc = float(r["acc"])
            if best["acc"] is None or acc > best["acc"]:
                best = {"step": int(r["step"]), "acc": acc}
    return best


def _check_resumed_tables(out: Path, config: TrainConfig, start_step: int) -> None:
    """PosymError (before anything is changed) unless the tables the resumed run keeps are sound
    (``posym.runs.tables.check_resumed``): ``metrics.csv`` with its columns, values (acc in [0, 1],
    integer steps >= 0, ...), no (split, step) twice and the val row of every evaluation step up to
    the checkpoint; ``scores.csv`` (head tracking), if there is one, likewise, with rows for those steps
    when the run tracks heads."""
    evals = [s for s in eval_steps(config.steps, config.eval_every) if s <= start_step]
    check_resumed(out / layout.METRICS, "metrics", start_step, RESUME_REMEDY, cover=evals, split="val")
    if (out / layout.SCORES).is_file():
        check_resumed(out / layout.SCORES, "scores", start_step, RESUME_REMEDY,
                      cover=evals if config.track_heads else None)


def _restore_metrics(out: Path, config: TrainConfig, start_step: int) -> None:
    """Drop metric rows written after the resumed checkpoint (and refuse to resume a finished run, or
    one whose tables are corrupt: :func:`_check_resumed_tables`)."""
    metrics_path = out / layout.METRICS
    old_rows = _read_metrics(metrics_path)
    if start_step >= config.steps and any(r.get("split") == "test" for r in old_rows):
        raise PosymError(f"run {out} is already complete ({config.steps} steps)")
    _check_resumed_tables(out, config, start_step)
    _write_metrics(metrics_path, [r for r in old_rows if r["split"] == "val" and int(r["step"]) <= start_step])


def train(config: TrainConfig, out: str | os.PathLike, *, resume: bool = False, force: bool = False,
          device: str = "cpu", threads: int | None = None, progress: bool = True,
          callbacks: Sequence[EvalCallback] = ()) -> RunResult:
    """Train a GPT-J (or ``config.arch``'s family) on a task (SPEC §2) into run directory ``out``; returns
    the final test metrics.

    ``resume`` continues from the newest checkpoint carrying a trainer state (using the run's stored
    config); ``force`` replaces an existing run directory (only a whole run: :func:`_replace_run`).
    Raises PosymError for user errors.

    ``config.precision`` "bf16" autocasts the training forward + loss to bfloat16 (weights, optimizer,
    evaluation and head scores stay float32); ``config.compile`` runs the training forward + loss
    through ``torch.compile`` (checkpoints hold the plain module's weights).

    Under ``torchrun`` (``WORLD_SIZE`` > 1) the run is data-parallel (``posym.train.distributed``):
    every rank trains on its contiguous shard of the same global batches with DDP; rank 0 alone
    evaluates, runs ``callbacks`` (head tracking), writes every file and draws the progress bar. All
    ranks return the same RunResult. Without dropout the result equals a single-process run to float
    tolerance; with dropout the ranks draw from different random streams (statistically equal).
    """
    out = Path(out)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    if force and not resume and _has_entries(out):
        return _replace_run(config, out, device=device, threads=threads, progress=progress, callbacks=callbacks)
    ctx = dist.setup(device)
    lock = DirLock(out, "run") if ctx.is_main else None
    try:
        if config.cuda_graph != "off":  # --cuda-graph on where the step cannot be captured: refused before any work
            check_cuda_graph(config, device, ctx.world_size)
        if lock is not None:
            _check_run_dir(out, resume, force)
            lock.acquire()  # one writer per run: a second train / --resume exits with an error
        result = _train(ctx, config, out, resume=resume, force=force, threads=threads, progress=progress,
                        callbacks=callbacks)
    except BaseException:
        if ctx.owns_group and dist.is_initialized():
            torch.distributed.destroy_process_group()
        raise
    finally:
        if lock is not None:
            lock.release()
    dist.teardown(ctx)
    return result


def _replace_run(config: TrainConfig, out: Path, **kwargs: Any) -> RunResult:
    """``train(..., force=True)`` over an existing run: train the new run beside it
    (``layout.staging_dir``), then exchange the two directories and delete the old run. The old run
    stays whole, and locked against other writers, until the new one is complete: a failed or
    interrupted ``--force`` leaves the old run as it was (after a SIGKILL, the partial new run beside
    it is cleared by the next ``--force``)."""
    _check_run_dir(out, False, True)
    _check_replaceable(out)
    staging = layout.staging_dir(out)
    if staging.exists() and not staging.is_dir():
        raise PosymError(f"{staging} is in the way of --force (it builds the new run there); remove it")
    locks = [DirLock(out, "run"), DirLock(staging, "run")] if dist.is_main() else []
    try:
        for lock in locks:
            lock.acquire()  # the old run first: a second writer into it is refused as before
        if locks:
            for p in staging.iterdir():  # leftovers of an interrupted --force (the path is ours)
                if p.name != layout.LOCK:
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        try:
            result = train(config, staging, resume=False, force=False, **kwargs)
        except BaseException:
            if locks:  # the old run stays; the partial new one goes
                shutil.rmtree(staging, ignore_errors=True)
            raise
        if locks:
            exchange_dirs(staging, out)  # out is the new run now; staging the old one
            shutil.rmtree(staging)
    finally:
        for lock in reversed(locks):
            lock.release()
    return RunResult(out, result.config, result.test)


@dataclass
class _Run:
    """One training run between its phases (:func:`_setup`, :func:`_loop`, :func:`_finish`): what setup
    builds, and the running values the loop changes (loss accumulators, best step, timings)."""

    ctx: dist.DistContext
    config: TrainConfig
    out: Path
    resume: bool
    progress: bool
    meta: dict[str, Any]  # RUN/posym.json, also stored with every checkpoint
    model: torch.nn.Module  # the plain HF module: evaluated, scored, saved
    objective: Any  # what the optimizer step calls: LastTokenLoss, wrapped by DDP / torch.compile
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: Any
    loss_scale: float
    data_rule: dict[str, Any]
    x_train: torch.Tensor
    y_train: torch.Tensor
    val_set: Any  # the validation split on rank 0, None elsewhere
    shard: tuple[int, int]  # this rank's rows of a global batch
    callbacks: list[EvalCallback]
    start_step: int
    evals: set[int]
    saves: set[int]
    best: dict[str, Any]  # {"step", "acc"} of the best validation accuracy so far
    # running training-loss sum on the device (float64, like the Python float it replaces): no sync per step
    loss_acc: torch.Tensor
    loss_count: int
    t0: float
    timing: dict[str, Any]
    bar: Any = None

    def fp32(self) -> torch.autocast:
        """Evaluation and callbacks run in float32 even if the caller wrapped train() in an autocast region."""
        return torch.autocast(device_type=torch.device(self.ctx.device).type, enabled=False)

    def trainer_state(self, step: int) -> dict[str, Any]:
        """The resumable state of a checkpoint at ``step`` (a collective under DDP: every rank's RNG state)."""
        st = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(), "step": step,
              "loss_sum": self.loss_acc.detach().cpu(), "loss_count": self.loss_count}
        st.update(_rng_states(self.ctx.device))
        if self.scaler is not None:
            st["scaler"] = self.scaler.state_dict()
        return st

    def at_step(self, step: int) -> None:
        """After ``step`` optimizer steps: evaluate, keep the best checkpoint and call the callbacks (rank 0),
        reset the running loss, and save a checkpoint, as the schedules say (not again at a resumed step)."""
        if self.resume and step == self.start_step:
            return
        config, main = self.config, self.ctx.is_main
        if step in self.evals and main:
            t = time.perf_counter()
            with self.fp32():
                res = evaluate(self.model, self.val_set, batch_size=config.eval_batch_size, device=self.ctx.device)
            self.timing["eval_s"] += time.perf_counter() - t
            row = {"split": "val", "step": step,
                   "train_loss": self.loss_acc.item() / self.loss_count if self.loss_count else float("nan"),
                   "lr": self.scheduler.get_last_lr()[0], **res, "time_s": round(time.perf_counter() - self.t0, 3)}
            _append_metrics(self.out / layout.METRICS, row)
            if self.best["acc"] is None or res["acc"] > self.best["acc"]:  # first step reaching the max (ties keep it)
                t = time.perf_counter()
                ckpt.save_best(self.out, step, self.model, self.meta, res["acc"])
                self.best.update(step=step, acc=float(res["acc"]))
                self.timing["checkpoint_s"] += time.perf_counter() - t
            t = time.perf_counter()
            with self.fp32():  # head scores in float32 whatever the training precision
                for cb in self.callbacks:
                    cb(step, self.model, self.out)
            self.timing["callbacks_s"] += time.perf_counter() - t
            self.bar.set_postfix(acc=f"{res['acc']:.3f}", loss=f"{res['loss']:.3f}")
        if step in self.evals:
            self.loss_acc.zero_()
            self.loss_count = 0
        if step in self.saves:
            t = time.perf_counter()
            state = self.trainer_state(step)  # a collective under DDP (every rank's RNG state)
            if main:
                ckpt.save_checkpoint(self.out, step, self.model, self.meta, state)
            self.timing["checkpoint_s"] += time.perf_counter() - t


def _train(ctx: dist.DistContext, config: TrainConfig, out: Path, *, resume: bool, force: bool,
           threads: int | None, progress: bool, callbacks: Sequence[EvalCallback]) -> RunResult:
    """One run in three phases: set up (or restore) everything, loop over the steps, test and write results."""
    run = _setup(ctx, config, out, resume=resume, force=force, threads=threads, progress=progress, callbacks=callbacks)
    train_s = _loop(run)
    test = dist.run_on_main(lambda: _finish(run, train_s))
    return RunResult(out, run.config, test)


def _stored_config(out: Path, resume: bool, force: bool) -> dict[str, Any] | None:
    """Prepare the run directory (rank 0); on ``resume`` return the run's stored configuration."""
    _prepare_run_dir(out, resume, force)
    if not resume:
        return None
    try:
        stored = json.loads((out / layout.POSYM_JSON).read_text())
        TrainConfig.from_dict(stored["config"])  # validates the field names and types it can
        return {**stored["config"], "task": stored.get("task", stored["config"].get("task"))}
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise PosymError(f"cannot resume: {out / layout.POSYM_JSON} is corrupt ({type(exc).__name__}: {exc})") from exc


def _setup(ctx: dist.DistContext, config: TrainConfig, out: Path, *, resume: bool, force: bool, threads: int | None,
           progress: bool, callbacks: Sequence[EvalCallback]) -> _Run:
    """The model, optimizer, data and schedules of a run (SPEC §2), restored from its newest checkpoint on ``resume``."""
    device, rank, world, main = ctx.device, ctx.rank, ctx.world_size, ctx.is_main
    stored = dist.run_on_main(lambda: _stored_config(out, resume, force))
    if threads:
        torch.set_num_threads(threads)
    if resume:
        if stored.get("task") not in (None, config.task):
            raise PosymError(f"run {out} is a {stored['task']} run, not {config.task}; --resume continues it "
                             f"with its stored configuration (pass --task {stored['task']})")
        config = TrainConfig.from_dict(stored)
    if config.batch_size < world:
        raise PosymError(f"batch size {config.batch_size} cannot be split over {world} processes")
    vocab = get_vocab(config.task)
    mcfg = arch_config(config.arch, config.preset, vocab.size, pe=config.pe, **config.model_overrides)
    model = build_arch_model(mcfg, seed=config.seed).to(device)
    setattr(model.config, MODEL_TASK_ATTR, config.task)  # every checkpoint's config.json names its task
    meta = {"task": config.task, "preset": config.preset, "config": config.to_dict(), "versions": _versions()}
    if world > 1:
        meta["world_size"] = world
    if not resume and main:
        (out / layout.POSYM_JSON).write_text(json.dumps(meta, indent=2))

    optimizer, scheduler = make_optimizer(model, config)
    scaler = make_grad_scaler(config.precision, device)

    start_step, loss_sum, loss_count = 0, 0.0, 0
    dropout_seed = config.seed + 1_000_003 + 7_919 * rank  # dropout stream, separate from the init stream
    if resume:
        start_step, path = dist.run_on_main(lambda: _find_resumable(out))
        state = _load_checkpoint(Path(path), model, optimizer, scheduler, device)
        _restore_rng(state, rank, world, device, fallback_seed=dropout_seed + start_step)
        loss_sum, loss_count = float(state["loss_sum"]), int(state["loss_count"])
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        dist.run_on_main(lambda: _restore_metrics(out, config, start_step))  # also a barrier: all have loaded
    else:
        torch.manual_seed(dropout_seed)

    data_rule = {"distractors": config.distractors}
    train_set = make_split(config.task, "train", seed=config.data_seed, **data_rule)
    val_set = make_split(config.task, "val", seed=config.data_seed, n=config.n_val, **data_rule) if main else None
    x_train = torch.from_numpy(np.ascontiguousarray(train_set.input_ids)).to(device)
    y_train = torch.from_numpy(np.ascontiguousarray(train_set.labels)).to(device)
    if len(train_set) < config.batch_size:
        raise PosymError(f"batch size {config.batch_size} exceeds the training set ({len(train_set)})")
    shard = dist.shard_bounds(config.batch_size, rank, world)

    callbacks = list(callbacks) if main else []
    for cb in callbacks:
        if hasattr(cb, "on_start"):
            cb.on_start(out, start_step, resume)

    # The objective DDP/compile wrap; `model` stays the plain HF module (evaluated, scored, saved).
    objective: Any = LastTokenLoss(model, reduction="sum" if world > 1 else "mean")
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        cuda_index = torch.device(device).index if device.startswith("cuda") else None
        # the only buffer (the rotary table) is constant: no per-step buffer sync
        no_sync = ("forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(DistributedDataParallel).parameters
                   else "broadcast_buffers")
        objective = DistributedDataParallel(objective, device_ids=None if cuda_index is None else [cuda_index],
                                            gradient_as_bucket_view=True, **{no_sync: False})
    if config.compile:
        objective = torch.compile(objective)

    return _Run(
        ctx=ctx, config=config, out=out, resume=resume, progress=progress, meta=meta, model=model,
        objective=objective, optimizer=optimizer, scheduler=scheduler, scaler=scaler,
        # DDP averages gradients over ranks; scaling each rank's summed loss by world / B makes the
        # average the gradient of the global-batch mean, whatever the shard sizes.
        loss_scale=world / config.batch_size if world > 1 else 1.0,
        data_rule=data_rule, x_train=x_train, y_train=y_train, val_set=val_set,
        shard=shard, callbacks=callbacks, start_step=start_step,
        evals=set(eval_steps(config.steps, config.eval_every)),
        saves=set(checkpoint_steps(config.steps, config.checkpoint_every, extra_every=config.checkpoint_extra_every)),
        best=_best_so_far(out, start_step) if resume else {"step": None, "acc": None},
        loss_acc=torch.tensor(loss_sum, dtype=torch.float64, device=device), loss_count=loss_count,
        t0=time.perf_counter(), timing={"eval_s": 0.0, "callbacks_s": 0.0, "checkpoint_s": 0.0})


def _loop(run: _Run) -> float:
    """The optimizer steps from ``run.start_step`` to ``config.steps`` (data order: a pure function of the
    order seed and the step); returns the loop's seconds."""
    config, device, world = run.config, run.ctx.device, run.ctx.world_size
    variant = parse_pe(config.pe)
    params = list(run.model.parameters())
    n_train, (lo, hi) = len(run.y_train), run.shard
    run.model.train()
    run.bar = tqdm(total=config.steps, initial=run.start_step, desc=f"train {config.task}/{config.preset}",
                   disable=not (run.progress and run.ctx.is_main), unit="step", dynamic_ncols=True)
    run.at_step(run.start_step)
    perm_epoch, perm, graph = -1, torch.empty(0, dtype=torch.long), None
    for step in range(run.start_step, config.steps):
        epoch, offset = _batch_position(step, config.batch_size, n_train)
        if epoch != perm_epoch:  # the same indices as batch_indices(), kept on the device
            perm = torch.from_numpy(_epoch_perm(config.order_seed, epoch, n_train)).to(device)
            perm_epoch = epoch
        idx = perm[offset + lo:offset + hi]
        positions = None
        if variant.kind == "randomized":  # the global batch's ids (a function of order seed and step), this rank's rows
            positions = random_positions(config.batch_size, run.x_train.shape[1], int(variant.value), config.order_seed,
                                         step)[lo:hi].to(device)
        x, y = run.x_train[idx], run.y_train[idx]
        if step == run.start_step and config.cuda_graph != "off":  # the step as one CUDA graph (or None: eager)
            graph = make_graph_step(config, run.objective, run.model, run.optimizer, run.scheduler, (x, y, positions),
                                    device, world)
        loss = graph(x, y, positions) if graph is not None else _optimizer_step(
            run.objective, params, run.optimizer, run.scheduler, x, y, config.max_grad_norm, config.precision,
            run.loss_scale, run.scaler, positions)
        if world > 1:  # this rank's summed loss -> the global-batch mean
            torch.distributed.all_reduce(loss)
            loss = loss / config.batch_size
        run.loss_acc += loss.double()
        run.loss_count += 1
        run.bar.update(1)
        run.at_step(step + 1)
    run.bar.close()
    return time.perf_counter() - run.t0


def _finish(run: _Run, train_s: float) -> dict[str, Any]:
    """Rank 0: the final model (last step, or best validation checkpoint; SPEC §2) on the test split,
    its metrics row and ``RUN/results.json``; returns the test metrics."""
    config, out, device, timing = run.config, run.out, run.ctx.device, run.timing
    t = time.perf_counter()
    test_set = make_split(config.task, "test", seed=config.data_seed, n=config.n_test, **run.data_rule)
    if config.final_model == "best":
        found = layout.best_checkpoint(out)
        if found is None:
            raise PosymError(f"run {out} has no best checkpoint to select (final_model='best')")
        _load_weights(found[1], run.model, device)
        timing["final_step"] = found[0]
    else:
        timing["final_step"] = config.steps
    with run.fp32():
        test = evaluate(run.model, test_set, batch_size=config.eval_batch_size, device=device,
                        progress=f"test {config.task} ({len(test_set):,} sequences)" if run.progress else None)
    _append_metrics(out / layout.METRICS, {"split": "test", "step": timing["final_step"], "train_loss": float("nan"),
                                           "lr": run.scheduler.get_last_lr()[0], **test,
                                           "time_s": round(time.perf_counter() - run.t0, 3)})
    timing.update(loop_s=train_s, test_s=time.perf_counter() - t, world_size=run.ctx.world_size)
    timing.update({k: round(v, 3) for k, v in timing.items() if isinstance(v, float)})
    final = {"final_model": config.final_model, "final_step": timing.pop("final_step"),
             "best_step": run.best["step"], "best_val_acc": run.best["acc"]}
    (out / layout.RESULTS).write_text(json.dumps({"test": test, "steps": config.steps, **final,
                                                  "timing": timing}, indent=2))
    return test
