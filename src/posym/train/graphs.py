"""The training step captured as one CUDA graph (``posym train --cuda-graph``; issue 39 point 2).

posym's paper-preset step is a few hundred tiny kernels: on a GPU it is bound by kernel launches and
Python, not arithmetic. :class:`GraphStep` runs the loop's own step (``posym.train.loop._optimizer_step``:
forward, last-token loss, backward, gradient clipping, fused AdamW) on *static buffers* — the batch's
ids [B, T], answers [B], position ids [B, T] (``randomized:L``) and the learning rate of each parameter
group as a device tensor — and on CUDA captures it whole with ``torch.cuda.CUDAGraph`` after warm-up
steps on a side stream (PyTorch's documented "whole network capture", optimizer step included:
``capturable=True`` AdamW reading its lr from the device). A training step is then three copies, one lr
fill and one ``replay()``: no launches per kernel and no host sync (the loop already sums the loss on
the device and reads it at evaluation steps only).

Why ``torch.cuda.graphs`` and not ``torch.compile(mode="reduce-overhead")``: the manual capture replays
the *same eager kernels* (so the captured step can equal the eager step bit for bit, where Inductor's
fusions change rounding), covers clipping and the optimizer in the same graph, compiles nothing (the
issue measured compile time not repaid within 600 steps) and cannot recompile on a new shape.

Exactness: the warm-up and the capture run real steps; the weights, AdamW state and CUDA RNG state are
restored after them, so the first replayed step is the run's first step. Dropout on CUDA draws its masks
explicitly inside the captured step, ahead of the forward (:func:`posym.model.fast.explicit_dropout`:
``dropout_masks`` from the default CUDA generator, attention through SDPA's math path), from the Philox
stream that graphs register and advance on every replay (fresh masks per step, the eager stream's offsets);
the body with explicit masks forced on the CPU equals the loop's step bit for bit (tested), and
``benchmarks/gpu_check.sh`` measures captured = eager over 200 steps.
Where capture is impossible (:func:`graph_obstacle`) ``--cuda-graph auto`` trains eagerly after one
printed line and ``on`` refuses in one line.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import Any, Iterator, Sequence

import torch

from posym.errors import PosymError
from posym.train.config import CUDA_GRAPH_MODES, TrainConfig

#: Eager steps on a side stream before capture (lazy state — AdamW moments, rotary tables, cuBLAS
#: workspaces — is created outside the graph's memory pool). PyTorch's recipe uses 3.
WARMUP_STEPS = 3


def graph_obstacle(config: TrainConfig, device: str, world_size: int = 1) -> str | None:
    """Why the training step of ``config`` on ``device`` cannot be captured as a CUDA graph, or None."""
    if not str(device).startswith("cuda"):
        return f"the device is {device}; CUDA graphs need --device cuda"
    if world_size > 1:
        return "DDP (torchrun) all-reduces gradients outside a capturable step"
    if config.precision == "fp16":
        return "fp16 loss scaling (GradScaler) reads its scale on the host at every step; use bf16 or fp32"
    if config.compile:
        return "--compile already wraps the step in torch.compile; give one of --compile and --cuda-graph"
    if config.arch != "gptj":
        return f"--arch {config.arch} trains through the HF forward, which is not checked under capture"
    return None


def check_cuda_graph(config: TrainConfig, device: str, world_size: int = 1) -> str | None:
    """The obstacle to ``config.cuda_graph`` on ``device`` (see :func:`graph_obstacle`): PosymError under
    "on", the reason under "auto" (the loop trains eagerly), None when the step will be captured or under "off"."""
    if config.cuda_graph not in CUDA_GRAPH_MODES:
        raise PosymError(f"unknown --cuda-graph {config.cuda_graph!r}; choose one of {list(CUDA_GRAPH_MODES)}")
    if config.cuda_graph == "off":
        return None
    reason = graph_obstacle(config, device, world_size)
    if reason is not None and config.cuda_graph == "on":
        raise PosymError(f"--cuda-graph on: cannot capture the training step: {reason} (or use --cuda-graph auto)")
    return reason


class _NoSchedule:
    """The scheduler the captured body is given: the loop's schedule steps on the host, after each replay."""

    @staticmethod
    def step() -> None:
        pass


class _Autocast(torch.nn.Module):
    """``objective`` under autocast to ``dtype`` with the cast cache off (a cached cast would live in
    the graph's memory pool; PyTorch's CUDA-graph notes ask for ``cache_enabled=False``)."""

    def __init__(self, objective: Any, dtype: torch.dtype, device_type: str):
        super().__init__()
        self.objective, self.dtype, self.device_type = objective, dtype, device_type

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=self.device_type, dtype=self.dtype, cache_enabled=False):
            return self.objective(*args)


class GraphStep:
    """One optimizer step of the training loop on static buffers; a CUDA graph when ``capture``.

    ``step(x, y, positions)`` (x [B, T] ids, y [B] answers, positions [B, T] or None, all on the device)
    copies the batch into the buffers, writes each parameter group's current lr into its lr tensor,
    runs the step (``replay()`` or the same body eagerly), steps ``scheduler`` and returns the loss [],
    detached, on the device — a static tensor the next step overwrites (read or add it before). The
    eager body (``capture=False``) is what the CPU tests compare with ``train_step``.
    """

    def __init__(self, objective: Any, params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                 scheduler: Any, max_grad_norm: float | None, precision: str, example: Sequence[torch.Tensor | None],
                 *, capture: bool):
        x, y, positions = example
        self.device = x.device
        if precision in ("bf16", "fp16"):
            objective = _Autocast(objective, torch.bfloat16 if precision == "bf16" else torch.float16, x.device.type)
        self.objective, self.params, self.optimizer, self.scheduler = objective, list(params), optimizer, scheduler
        self.max_grad_norm = max_grad_norm
        self.x, self.y = x.clone(), y.clone()
        self.positions = None if positions is None else positions.clone()
        # CUDA's fused AdamW reads a float32 lr on the device; the CPU's reads lr.item() (float64: the float)
        lr_dtype = torch.float32 if self.device.type == "cuda" else torch.float64
        self.lrs = [torch.tensor(float(g["lr"]), dtype=lr_dtype, device=self.device) for g in optimizer.param_groups]
        self.graph: "torch.cuda.CUDAGraph | None" = None
        self.loss: torch.Tensor | None = None
        if capture:
            self._capture()

    def _body(self) -> torch.Tensor:
        """The loop's step on the static buffers (the schedule steps outside)."""
        from posym.train.loop import _optimizer_step  # the loop imports this module

        return _optimizer_step(self.objective, self.params, self.optimizer, _NoSchedule, self.x, self.y,
                               self.max_grad_norm, "fp32", 1.0, None, self.positions)

    @contextlib.contextmanager
    def _device_lr(self) -> Iterator[None]:
        """While open, each param group's lr is its lr tensor (capturable on CUDA); afterwards the float
        again, so the scheduler, checkpoints and metrics see what an eager run's optimizer holds."""
        groups = self.optimizer.param_groups
        saved = [(g["lr"], g.get("capturable", False)) for g in groups]
        for g, t in zip(groups, self.lrs):
            g["lr"] = t
            g["capturable"] = self.device.type == "cuda"
        try:
            yield
        finally:
            for g, (lr, cap) in zip(groups, saved):
                g["lr"], g["capturable"] = lr, cap

    def _fill(self, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor | None) -> None:
        self.x.copy_(x)
        self.y.copy_(y)
        if (positions is None) != (self.positions is None):
            raise PosymError("the captured step was built with" + (" no" if self.positions is None else "")
                             + " position ids; give the same kind at every step")
        if positions is not None:
            self.positions.copy_(positions)
        for t, g in zip(self.lrs, self.optimizer.param_groups):
            t.fill_(g["lr"])  # a host scalar into a device kernel: no sync

    def step(self, x: torch.Tensor, y: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """One optimizer step on batch (x [B, T], y [B], positions [B, T] | None) -> the loss [] on the device."""
        self._fill(x, y, positions)
        if self.graph is not None:
            self.graph.replay()
            loss = self.loss
        else:
            with self._device_lr():
                loss = self._body()
        self.scheduler.step()
        return loss

    __call__ = step

    def _capture(self) -> None:
        """Warm up on a side stream, capture the body, then restore weights, AdamW state and CUDA RNG."""
        saved, rng = _snapshot(self.params, self.optimizer), None
        try:
            rng = torch.cuda.get_rng_state(self.device)
            for t, g in zip(self.lrs, self.optimizer.param_groups):
                t.fill_(g["lr"])
            with self._device_lr():
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side), warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=".*capturable=True.*")  # warm-up runs uncaptured
                    for _ in range(WARMUP_STEPS):
                        self._body()
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                self.optimizer.zero_grad(set_to_none=True)  # the captured backward allocates static grads
                with torch.cuda.graph(graph):
                    self.loss = self._body()
            self.graph = graph
        finally:  # on the current stream, after the warm-up stream and the capture
            _restore(saved, self.params, self.optimizer)
            if rng is not None:
                torch.cuda.set_rng_state(rng, self.device)


def _snapshot(params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Copies of the weights and of each parameter's AdamW state (None where it has none yet)."""
    return {"params": [p.detach().clone() for p in params],
            "state": [{k: v.clone() if torch.is_tensor(v) else v for k, v in optimizer.state[p].items()}
                      if p in optimizer.state else None for p in params]}


@torch.no_grad()
def _restore(saved: dict[str, Any], params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer) -> None:
    """Write :func:`_snapshot` back in place (the graph holds these addresses); state the warm-up created
    is zeroed, which is what AdamW's lazy initialisation would have made (moments 0, step 0)."""
    for p, w, st in zip(params, saved["params"], saved["state"]):
        p.copy_(w)
        for k, v in optimizer.state.get(p, {}).items():
            if torch.is_tensor(v):
                v.copy_(st[k]) if st is not None else v.zero_()


def make_graph_step(config: TrainConfig, objective: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler: Any, example: Sequence[torch.Tensor | None], device: str,
                    world_size: int = 1) -> GraphStep | None:
    """The loop's step for ``config.cuda_graph``: a captured :class:`GraphStep`, or None (train eagerly)
    under "off" and, after one line on stderr, under "auto" where :func:`graph_obstacle` names a reason or
    capture fails (the weights and optimizer state are restored first). "on": PosymError instead."""
    reason = check_cuda_graph(config, device, world_size)
    if config.cuda_graph == "off":
        return None
    if reason is None:
        try:
            return GraphStep(objective, model.parameters(), optimizer, scheduler, config.max_grad_norm,
                             config.precision, example, capture=True)
        except Exception as exc:  # noqa: BLE001 - any capture failure: eager ("auto") or one line ("on")
            reason = f"capture failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            if config.cuda_graph == "on":
                raise PosymError(f"--cuda-graph on: {reason}; use --cuda-graph auto or off") from exc
    print(f"posym: note: --cuda-graph auto: eager training steps ({reason})", file=sys.stderr)
    return None
