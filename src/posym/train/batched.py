"""Many runs as one model (``posym train --seeds K``; issue 39): K runs of one shape trained together.

Each run is an ordinary run (:mod:`posym.train.loop`'s setup and finish: its own init, data seed, data
order, run directory, checkpoints, metrics, head tracking, resume); only the optimizer step is shared.
The K models' parameters are stacked with a leading run dimension ``[K, ...]``; one step is
``vmap(functional_call(LastTokenLoss))`` over the stack (posym's fast forward, every ``--pe``), the sum
of the K mean losses backpropagated (each run's gradient lands in its own slice), gradient clipping
per run (each run's global norm, as ``clip_grad_norm_``), and one fused AdamW + LambdaLR over the
stacked tensors — elementwise, so equal to K separate optimizers. The stacked weights are copied back
into each run's model before its evaluations and checkpoints; each run's checkpoint holds its own
slice of the optimizer state, so its directory is the same as a single run's (``--resume`` works on
the group or on one run alone).

Exactness (SPEC §2; tested): train loss per step, metrics and final weights equal K separate runs to
float tolerance (fp32 on a CPU: batched matmuls reduce in another order; bound 1e-5 of each weight
tensor's largest magnitude after 20 steps), and a resumed group equals an uninterrupted one bit for
bit. Dropout (the paper preset's 0.1) is exact: before each step every run's masks are drawn outside
``vmap`` from its own generator state (:func:`posym.model.fast.dropout_masks`: the forward's draws in its
order, shapes and ops, SDPA's attention dropout included) and passed in, so each run's masks and RNG state
after the step are its single run's. On the CPU that is the CPU generator (the single run's implicit draws
are the same masks); on CUDA the device's default generator, whose state is swapped per run
(:func:`posym.train.rng.process_rng`) as the CPU's is, and the single CUDA run draws the same explicit
masks (:func:`posym.model.fast.explicit_dropout`). Dropout on another device (``mps``, ...) is refused, as
are fp16/bf16, ``compile``, another ``--arch`` and DDP. The group has no CUDA-graph path (each step is
eager; ``--cuda-graph`` applies to a single run). On a CPU it costs more per run than separate runs
(batched matmuls, vmap's per-run SDPA fallback); it is meant for accelerators.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap
from tqdm.auto import tqdm

from posym.errors import PosymError
from posym.model.arch import arch_config
from posym.model.fast import dropout_masks, has_dropout, last_token_logits
from posym.model.pe import parse_pe, random_positions
from posym.runs.lock import DirLock
from posym.tasks import get_vocab
from posym.train import checkpoints as ckpt
from posym.train import distributed as dist
from posym.train.config import MAX_SEED, TrainConfig
from posym.train.loop import EvalCallback, RunResult, _batch_position, _epoch_perm, _finish, _param_groups, _Run, _setup
from posym.train.rng import RNG_DEVICES, process_rng, set_process_rng
from posym.train.rundir import _check_run_dir, _has_entries
from posym.train.schedule import linear_warmup_decay

#: Fields that may differ between the runs of a batched group (they change no shape and no step rule).
PER_RUN_FIELDS = ("seed", "data_seed", "order_seed")
#: The most runs one ``--seeds`` group takes (a sanity bound on the stack).
MAX_RUNS = 256


def parse_seeds(text: str | int | Sequence[int]) -> tuple[int, ...]:
    """``--seeds``: a count K (seeds 0..K-1) or a comma list ``0,1,2`` (distinct, each in [0, 2**62)).
    PosymError (one line) otherwise."""
    if isinstance(text, bool):
        raise PosymError(f"--seeds takes a count K or a list like 0,1,2, got {text!r}")
    if isinstance(text, int):
        seeds: list[int] = list(range(text)) if text >= 1 else []
        if not seeds:
            raise PosymError(f"--seeds K must be >= 1, got {text}")
    elif isinstance(text, str):
        parts = [p.strip() for p in text.split(",")]
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise PosymError(f"--seeds takes a count K or a list like 0,1,2, got {text!r}") from None
        if len(parts) == 1:
            return parse_seeds(values[0])
        seeds = values
    else:
        seeds = [int(s) for s in text]
    if not seeds or any(not 0 <= s < MAX_SEED for s in seeds):
        raise PosymError(f"--seeds must name seeds in [0, 2**62), got {text!r}")
    if len(set(seeds)) != len(seeds):
        raise PosymError(f"--seeds names a seed twice: {text!r}")
    if len(seeds) > MAX_RUNS:
        raise PosymError(f"--seeds asks for {len(seeds)} runs; at most {MAX_RUNS} train as one model")
    return tuple(seeds)


def seed_dir(out: str | Path, seed: int) -> Path:
    """``OUT/seed{k}``: the run directory of seed ``k`` in a ``--seeds`` group."""
    return Path(out) / f"seed{seed}"


def check_batchable(configs: Sequence[TrainConfig], device: str = "cpu") -> None:
    """PosymError (one line, before any work) unless the runs can train as one exact batched model: the
    same configuration but for :data:`PER_RUN_FIELDS`, GPT-J in fp32 without compile, and dropout only
    on a device whose generator state is swapped per run (:data:`posym.train.rng.RNG_DEVICES`: CPU, CUDA)."""
    if not configs:
        raise PosymError("a batched group needs at least one run")
    first = configs[0]
    for c in configs[1:]:
        diff = [k for k, v in c.to_dict().items() if k not in PER_RUN_FIELDS and v != first.to_dict()[k]]
        if diff:
            raise PosymError(f"runs of a batched group differ in {', '.join(diff)}; only {', '.join(PER_RUN_FIELDS)} may")
    if first.arch != "gptj":
        raise PosymError(f"--seeds trains GPT-J only (posym's fast forward), not --arch {first.arch}; train each seed alone")
    if first.precision != "fp32" or first.compile:
        raise PosymError("--seeds trains in fp32 without --compile; drop --precision / --compile or train each seed alone")
    mcfg = arch_config(first.arch, first.preset, get_vocab(first.task).size, pe=first.pe, **first.model_overrides)
    drops = {k: getattr(mcfg, k) for k in ("embd_pdrop", "resid_pdrop", "attn_pdrop") if getattr(mcfg, k)}
    if drops and torch.device(device).type not in RNG_DEVICES:
        raise PosymError(f"--seeds with dropout ({drops}) trains on {' or '.join(RNG_DEVICES)} only (each run's "
                         f"masks drawn from its own generator state); on {device} train each seed alone, or add "
                         + " ".join(f"--set {k}=0" for k in drops))


class _RunOptimizer:
    """Run ``k``'s view of the stacked optimizer: what its checkpoints store (:meth:`state_dict`), the
    state dict of a single run's AdamW (the same groups and indices, the run's slice of each moment)."""

    def __init__(self, engine: "StackedEngine", k: int):
        self.engine, self.k = engine, k

    def state_dict(self) -> dict[str, Any]:
        sd = self.engine.optimizer.state_dict()
        state = {i: {name: (v[self.k].clone() if name.startswith("exp_avg") else v.clone()) for name, v in s.items()}
                 for i, s in sd["state"].items()}
        return {"state": state, "param_groups": sd["param_groups"]}


class _Objective(torch.nn.Module):
    """:class:`posym.train.loop.LastTokenLoss` (mean cross-entropy of the last-position logits) with each
    run's dropout masks given (:func:`posym.model.fast.dropout_masks`) instead of drawn inside ``vmap``."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor | None = None,
                masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        return F.cross_entropy(last_token_logits(self.model, x, positions, dropout_masks=masks).float(), y)


class StackedEngine:
    """K GPT-J models of one shape as stacked parameters ``[K, ...]`` with one AdamW and LambdaLR (SPEC §2).

    Built from ``runs`` after :func:`posym.train.loop._setup` (fresh or resumed): weights, optimizer moments
    and scheduler are taken from each run's model, optimizer and scheduler."""

    def __init__(self, runs: Sequence[_Run]):
        self.runs = list(runs)
        config = runs[0].config
        template = runs[0].model
        self.names = [n for n, _ in template.named_parameters()]
        self.objective = _Objective(template)
        models = [dict(r.model.named_parameters()) for r in runs]
        self.params = {n: torch.stack([m[n].detach() for m in models]).requires_grad_(True) for n in self.names}
        by_id = {id(p): n for n, p in template.named_parameters()}
        groups = [{**g, "params": [self.params[by_id[id(p)]] for p in g["params"]]}
                  for g in _param_groups(template, config.weight_decay)]
        self.optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, eps=config.eps, fused=True)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: linear_warmup_decay(s, config.warmup, config.steps))
        states = [r.optimizer.state_dict() for r in runs]
        if states[0]["state"]:  # resumed: stack each run's moments (their steps are equal)
            state = {i: {**s, **{key: torch.stack([st["state"][i][key] for st in states])
                                 for key in ("exp_avg", "exp_avg_sq")}} for i, s in states[0]["state"].items()}
            self.optimizer.load_state_dict({"state": state, "param_groups": states[0]["param_groups"]})
            self.scheduler.load_state_dict(runs[0].scheduler.state_dict())
        for k, r in enumerate(runs):
            r.optimizer = _RunOptimizer(self, k)  # type: ignore[assignment]
            r.scheduler = self.scheduler

    def _loss(self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
              positions: torch.Tensor | None, masks: list[torch.Tensor] | None) -> torch.Tensor:
        return functional_call(self.objective, {f"model.{n}": p for n, p in params.items()}, (x, y, positions, masks))

    def draw_masks(self, rng: list[dict[str, torch.Tensor]], batch: int, length: int) -> list[torch.Tensor] | None:
        """Each run's dropout masks of one step, drawn on the device from its own generator state ``rng[k]``
        (:func:`posym.train.rng.process_rng`; advanced, as its single run's forward advances it), stacked per
        site: ``[K, ...]`` each (None without dropout)."""
        template = self.objective.model
        if not has_dropout(template):
            return None
        device = self.params[self.names[0]].device
        per_run = []
        for k in range(len(self.runs)):
            with _own_rng(rng, k, device):
                per_run.append(dropout_masks(template, batch, length, device=device))
        return [torch.stack(site) for site in zip(*per_run)]

    def step(self, x: torch.Tensor, y: torch.Tensor, max_grad_norm: float | None,
             positions: torch.Tensor | None = None, masks: list[torch.Tensor] | None = None) -> torch.Tensor:
        """One optimizer step of every run. x [K, B, T], y [K, B], positions [K, B, T] or None, masks (each
        run's dropout draws, :meth:`draw_masks`) or None -> losses [K] (detached, on the device)."""
        with warnings.catch_warnings():  # SDPA has no vmap batching rule on CPU: a per-run loop, same values
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            in_dims = (0, 0, 0, None if positions is None else 0, None if masks is None else 0)
            losses = vmap(self._loss, in_dims=in_dims)(self.params, x, y, positions, masks)
            self.optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()
        if max_grad_norm:
            clip_per_run(list(self.params.values()), max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return losses.detach()

    @torch.no_grad()
    def unstack(self) -> None:
        """Copy each run's slice of the stacked weights into its model."""
        for k, r in enumerate(self.runs):
            own = dict(r.model.named_parameters())
            for n in self.names:
                own[n].copy_(self.params[n][k])


@torch.no_grad()
def clip_per_run(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` of each run's slice of stacked parameters [K, ...]: each run's
    global gradient norm, its own clip coefficient. Returns the K norms before clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    per_tensor = torch.stack([torch.linalg.vector_norm(g.flatten(1), 2, dim=1) for g in grads], dim=1)  # [K, n]
    total = torch.linalg.vector_norm(per_tensor, 2, dim=1)  # [K]
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return total


@contextlib.contextmanager
def _own_rng(states: list[dict[str, torch.Tensor]], k: int, device: str | torch.device) -> Iterator[None]:
    """Run ``k``'s random streams for the duration: the CPU generator and, on CUDA, the device's default
    generator (:func:`posym.train.rng.process_rng`; what its checkpoints store, as a single run's)."""
    set_process_rng(states[k], device)
    try:
        yield
    finally:
        states[k] = process_rng(device)


def train_batched(configs: Sequence[TrainConfig], outs: Sequence[str | Path], *, resume: bool = False,
                  device: str = "cpu", threads: int | None = None, progress: bool = True,
                  callbacks: Sequence[Sequence[EvalCallback]] | None = None) -> list[RunResult]:
    """Train the runs ``configs`` into ``outs`` (one run directory each) as one batched model; each equals
    ``posym.train.loop.train(configs[k], outs[k])`` to float tolerance. ``callbacks[k]``: run k's evaluation
    callbacks (head tracking). ``resume`` continues every run from its newest checkpoint (all at one step)."""
    outs = [Path(o) for o in outs]
    if len(outs) != len(configs) or len({o.resolve() for o in outs}) != len(outs):
        raise PosymError("a batched group needs one distinct run directory per run")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    if dist.env_world_size() > 1 or dist.get_world_size() > 1:
        raise PosymError("--seeds runs in one process; do not start it under torchrun")
    check_batchable(configs, device)
    for out in outs:
        _check_run_dir(out, resume, False)
        if not resume and _has_entries(out):
            raise PosymError(f"run directory {out} already exists; use --resume to continue the group, "
                             "or choose another --out")
    if resume:  # one step for all, before anything is changed
        found = [ckpt.latest_resumable(out) for out in outs]
        steps = {None if f is None else f[0] for f in found}
        if len(steps) > 1:
            shown = ", ".join(f"{out.name} at {'none' if f is None else f[0]}" for out, f in zip(outs, found))
            raise PosymError(f"the runs stopped at different checkpoints ({shown}); resume each alone with "
                             "posym train --resume --out OUT/seedK")
    callbacks = callbacks or [() for _ in configs]
    ctx = dist.setup(device)
    locks = [DirLock(out, "run") for out in outs]
    held: list[DirLock] = []
    saved_rng = process_rng(device)
    try:
        for lock in locks:
            lock.acquire()
            held.append(lock)
        runs, rng = [], []
        for config, out, cbs in zip(configs, outs, callbacks):
            runs.append(_setup(ctx, config, out, resume=resume, force=False, threads=threads, progress=False,
                               callbacks=cbs))
            rng.append(process_rng(device))
        check_batchable([r.config for r in runs], device)  # on resume: the stored configurations
        train_s = _loop_batched(runs, StackedEngine(runs), rng, progress)
        results = []
        for k, run in enumerate(runs):
            with _own_rng(rng, k, device):
                results.append(RunResult(run.out, run.config, _finish(run, train_s[k])))
        return results
    finally:
        set_process_rng(saved_rng, device)
        for lock in reversed(held):
            lock.release()


def _loop_batched(runs: list[_Run], engine: StackedEngine, rng: list[dict[str, torch.Tensor]],
                  progress: bool) -> list[float]:
    """The steps of :func:`posym.train.loop._loop` for every run at once; returns each run's loop seconds."""
    config, device = runs[0].config, runs[0].ctx.device
    variant = parse_pe(config.pe)
    start = runs[0].start_step
    n_train = [len(r.y_train) for r in runs]
    bar = tqdm(total=config.steps, initial=start, desc=f"train {config.task}/{config.preset} ×{len(runs)}",
               disable=not progress, unit="step", dynamic_ncols=True)
    for k, r in enumerate(runs):
        r.model.train()
        r.bar = tqdm(disable=True)
        with _own_rng(rng, k, device):
            r.at_step(start)
    perms: list[tuple[int, torch.Tensor]] = [(-1, torch.empty(0, dtype=torch.long))] * len(runs)
    for step in range(start, config.steps):
        xs, ys, pos = [], [], []
        for k, r in enumerate(runs):
            epoch, offset = _batch_position(step, config.batch_size, n_train[k])
            if epoch != perms[k][0]:
                perms[k] = (epoch, torch.from_numpy(_epoch_perm(r.config.order_seed, epoch, n_train[k])).to(device))
            idx = perms[k][1][offset:offset + config.batch_size]
            xs.append(r.x_train[idx])
            ys.append(r.y_train[idx])
            if variant.kind == "randomized":
                pos.append(random_positions(config.batch_size, r.x_train.shape[1], int(variant.value),
                                            r.config.order_seed, step).to(device))
        x = torch.stack(xs)
        masks = engine.draw_masks(rng, x.shape[1], x.shape[2])  # each run's own stream, as its forward draws
        losses = engine.step(x, torch.stack(ys), config.max_grad_norm, torch.stack(pos) if pos else None, masks)
        for k, r in enumerate(runs):
            r.loss_acc += losses[k].double()
            r.loss_count += 1
        bar.update(1)
        done = step + 1
        if any(done in r.evals or done in r.saves for r in runs):
            engine.unstack()
        for k, r in enumerate(runs):
            with _own_rng(rng, k, device):
                r.at_step(done)
    bar.close()
    engine.unstack()
    now = time.perf_counter()
    return [now - r.t0 for r in runs]


def seed_configs(config: TrainConfig, seeds: Sequence[int]) -> list[TrainConfig]:
    """``config`` for each seed: init, data and order seed all ``k`` (as ``posym train --seed k``)."""
    return [replace(config, seed=s, data_seed=s, order_seed=s) for s in seeds]


__all__ = ["MAX_RUNS", "PER_RUN_FIELDS", "StackedEngine", "check_batchable", "clip_per_run", "parse_seeds",
           "seed_configs", "seed_dir", "train_batched"]
