"""The training loop (SPEC §2): AdamW + linear warmup/decay, last-token loss, resumable.

Plain PyTorch over HF ``GPTJForCausalLM`` parameters, with the fast last-token forward of
``posym.model.fast``. Resume is exact: model, optimizer, scheduler, RNG state and running-loss
accumulators are checkpointed, and the data order is a pure function of (order seed, step).
"""

from __future__ import annotations

import csv
import json
import os
import platform
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
from posym.errors import PosymError
from posym.model.fast import last_token_logits
from posym.model.gptj import build_model, model_config
from posym.tasks import get_vocab, make_split
from posym.train import checkpoints as ckpt
from posym.train.config import TrainConfig
from posym.train.evaluate import MAX_HOPS, evaluate
from posym.train.schedule import checkpoint_steps, eval_steps, linear_warmup_decay

METRIC_COLUMNS = ["split", "step", "train_loss", "lr", "loss", "acc"] + [
    f"acc_hop{h}" for h in range(1, MAX_HOPS + 1)] + ["time_s"]

#: Called at every evaluation step with (step, model, run_dir); used for head tracking.
EvalCallback = Callable[[int, torch.nn.Module, Path], None]


@dataclass
class RunResult:
    run_dir: Path
    config: TrainConfig
    test: dict[str, float]


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """HF Trainer grouping: no weight decay on biases and LayerNorm weights."""
    no_decay = {n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    decay, other = [], []
    for name, p in model.named_parameters():
        owner = name.rsplit(".", 1)[0]
        (other if name.endswith("bias") or owner in no_decay else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": other, "weight_decay": 0.0}]


def make_optimizer(model: torch.nn.Module, config: TrainConfig) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (SPEC §2: betas, weight decay as HF Trainer groups it) and the warmup/decay LambdaLR."""
    optimizer = torch.optim.AdamW(_param_groups(model, config.weight_decay), lr=config.lr,
                                  betas=config.betas, eps=config.eps, fused=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: linear_warmup_decay(s, config.warmup, config.steps))
    return optimizer, scheduler


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
               x: torch.Tensor, y: torch.Tensor, max_grad_norm: float | None) -> float:
    """One optimizer step on the last-token loss. x [B, T] input ids, y [B] answer ids -> loss."""
    loss = F.cross_entropy(last_token_logits(model, x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm, foreach=True)
    optimizer.step()
    scheduler.step()
    return loss.item()


def batch_indices(order_seed: int, step: int, batch_size: int, n_train: int) -> np.ndarray:
    """Indices of the training samples of optimizer step ``step`` (0-based): epoch-wise shuffles."""
    per_epoch = n_train // batch_size
    epoch, k = divmod(step, per_epoch)
    perm = _epoch_perm(order_seed, epoch, n_train)
    return perm[k * batch_size:(k + 1) * batch_size]


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
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, path)


def _append_metrics(path: Path, row: dict[str, Any]) -> None:
    new = not path.exists()
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=METRIC_COLUMNS)
        if new:
            w.writeheader()
        w.writerow(row)


def _prepare_run_dir(out: Path, resume: bool, force: bool) -> None:
    if resume and force:
        raise PosymError("--resume and --force exclude each other")
    if out.exists() and not out.is_dir():
        raise PosymError(f"{out} exists and is not a directory")
    if resume:
        if not (out / "posym.json").is_file():
            raise PosymError(f"cannot resume: {out} is not a posym run directory (no posym.json)")
        return
    if out.exists() and any(out.iterdir()):
        if not force:
            raise PosymError(f"run directory {out} already exists; use --resume to continue it or --force to overwrite")
        shutil.rmtree(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise PosymError(f"cannot write to {out}: {exc.strerror or exc}") from exc


def _versions() -> dict[str, str]:
    return {"posym": posym.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def _restore(out: Path, config: TrainConfig, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             scheduler: Any, device: str) -> tuple[int, float, int]:
    """Load the newest resumable checkpoint into model/optimizer/scheduler/RNG and drop metric rows
    written after it. Returns (step, running loss sum, running loss count)."""
    from safetensors.torch import load_file

    ckpt.clean_temporaries(out)
    found = ckpt.latest_resumable(out)
    if found is None:
        raise PosymError(f"cannot resume: no checkpoint with a trainer state under {out}/checkpoints")
    start_step, path = found
    state = ckpt.load_trainer_state(path)
    try:
        weights = load_file(str(path / "model.safetensors"), device=str(device))
        missing, unexpected = model.load_state_dict(weights, strict=False)
    except Exception as exc:
        raise PosymError(f"corrupt checkpoint {path}: {str(exc).splitlines()[0]}") from exc
    if [m for m in missing if "lm_head" not in m and "embed_positions" not in m] or unexpected:
        raise PosymError(f"checkpoint {path} does not match the run's model config")
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng_cpu"])
    if "rng_cuda" in state and device.startswith("cuda"):
        torch.cuda.set_rng_state(state["rng_cuda"])
    metrics_path = out / "metrics.csv"
    old_rows = _read_metrics(metrics_path)
    if start_step >= config.steps and any(r["split"] == "test" for r in old_rows):
        raise PosymError(f"run {out} is already complete ({config.steps} steps)")
    _write_metrics(metrics_path, [r for r in old_rows if r["split"] == "val" and int(r["step"]) <= start_step])
    return start_step, float(state["loss_sum"]), int(state["loss_count"])


def train(config: TrainConfig, out: str | os.PathLike, *, resume: bool = False, force: bool = False,
          device: str = "cpu", threads: int | None = None, progress: bool = True,
          callbacks: Sequence[EvalCallback] = ()) -> RunResult:
    """Train a GPT-J on a task (SPEC §2) into run directory ``out``; returns the final test metrics.

    ``resume`` continues from the newest checkpoint carrying a trainer state (using the run's stored
    config); ``force`` replaces an existing run directory. Raises PosymError for user errors.
    """
    out = Path(out)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    _prepare_run_dir(out, resume, force)
    if threads:
        torch.set_num_threads(threads)
    if resume:
        stored = json.loads((out / "posym.json").read_text())
        config = TrainConfig.from_dict(stored["config"])
    vocab = get_vocab(config.task)
    mcfg = model_config(config.preset, vocab.size, **config.model_overrides)
    model = build_model(mcfg, seed=config.seed).to(device)
    meta = {"task": config.task, "preset": config.preset, "config": config.to_dict(), "versions": _versions()}
    if not resume:
        (out / "posym.json").write_text(json.dumps(meta, indent=2))

    optimizer, scheduler = make_optimizer(model, config)

    start_step, loss_sum, loss_count = 0, 0.0, 0
    metrics_path = out / "metrics.csv"
    if resume:
        start_step, loss_sum, loss_count = _restore(out, config, model, optimizer, scheduler, device)
    else:
        torch.manual_seed(config.seed + 1_000_003)  # dropout stream, separate from the init stream

    train_set = make_split(config.task, "train", seed=config.data_seed)
    val_set = make_split(config.task, "val", seed=config.data_seed, n=config.n_val)
    x_train = torch.from_numpy(np.ascontiguousarray(train_set.input_ids))
    y_train = torch.from_numpy(np.ascontiguousarray(train_set.labels))
    n_train = len(train_set)
    if n_train < config.batch_size:
        raise PosymError(f"batch size {config.batch_size} exceeds the training set ({n_train})")

    callbacks = list(callbacks)
    if config.track_heads:
        from posym.heads.tracking import HeadTracker, truncate_scores

        if resume:
            truncate_scores(out, start_step)
        n_track = min(config.track_prompts, len(val_set))
        callbacks.insert(0, HeadTracker(val_set.input_ids[:n_track], config.track_taus))

    evals = set(eval_steps(config.steps, config.eval_every))
    saves = set(checkpoint_steps(config.steps, config.checkpoint_every, extra_every=config.checkpoint_extra_every))
    t0 = time.perf_counter()

    def trainer_state(step: int) -> dict[str, Any]:
        st = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
              "rng_cpu": torch.get_rng_state(), "step": step,
              "loss_sum": torch.tensor(loss_sum, dtype=torch.float64), "loss_count": loss_count}
        if device.startswith("cuda"):
            st["rng_cuda"] = torch.cuda.get_rng_state()
        return st

    def on_step(step: int) -> None:
        nonlocal loss_sum, loss_count
        if step in evals and not (resume and step == start_step):
            res = evaluate(model, val_set, batch_size=config.eval_batch_size, device=device)
            row = {"split": "val", "step": step,
                   "train_loss": loss_sum / loss_count if loss_count else float("nan"),
                   "lr": scheduler.get_last_lr()[0], **res, "time_s": round(time.perf_counter() - t0, 3)}
            _append_metrics(metrics_path, row)
            loss_sum, loss_count = 0.0, 0
            for cb in callbacks:
                cb(step, model, out)
            bar.set_postfix(acc=f"{res['acc']:.3f}", loss=f"{res['loss']:.3f}")
        if step in saves and not (resume and step == start_step):
            ckpt.save_checkpoint(out, step, model, meta, trainer_state(step))

    model.train()
    bar = tqdm(total=config.steps, initial=start_step, desc=f"train {config.task}/{config.preset}",
               disable=not progress, unit="step", dynamic_ncols=True)
    on_step(start_step)
    for step in range(start_step, config.steps):
        idx = torch.from_numpy(batch_indices(config.order_seed, step, config.batch_size, n_train))
        x = x_train[idx].to(device, non_blocking=True)
        y = y_train[idx].to(device, non_blocking=True)
        loss_sum += train_step(model, optimizer, scheduler, x, y, config.max_grad_norm)
        loss_count += 1
        bar.update(1)
        on_step(step + 1)
    bar.close()

    test_set = make_split(config.task, "test", seed=config.data_seed, n=config.n_test)
    test = evaluate(model, test_set, batch_size=config.eval_batch_size, device=device)
    _append_metrics(metrics_path, {"split": "test", "step": config.steps, "train_loss": float("nan"),
                                   "lr": scheduler.get_last_lr()[0], **test,
                                   "time_s": round(time.perf_counter() - t0, 3)})
    (out / "results.json").write_text(json.dumps({"test": test, "steps": config.steps}, indent=2))
    return RunResult(out, config, test)

