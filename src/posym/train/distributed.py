"""Multi-process data-parallel training under ``torchrun`` (docs/architecture.md "train/").

``posym.train.train`` calls :func:`setup` first. Launched by ``torchrun`` (environment
``WORLD_SIZE`` > 1) it initialises the default process group (``nccl`` on CUDA, ``gloo`` on the
CPU) and moves each process to its own GPU (``cuda:LOCAL_RANK``); launched plainly it does nothing
and every helper below answers as for a single process (rank 0 of 1).

Data parallelism is plain PyTorch ``DistributedDataParallel``: every rank takes the *same* global
batch (``posym.train.loop.batch_indices``) and keeps its contiguous shard (:func:`shard_bounds`);
gradients are all-reduced. The training loop scales the per-rank loss so that the all-reduced
gradient is the gradient of the mean over the global batch, which makes a run with ``W`` processes
equal to a single process with the same global batch up to float rounding (without dropout; with
dropout the per-rank random streams differ, so runs agree statistically, not bitwise).

Only the main process (rank 0) writes files (``posym.json``, ``metrics.csv``, checkpoints,
``scores.csv``), evaluates and draws progress bars; :func:`run_on_main` runs a function there and
re-raises its ``PosymError`` on every rank so a user error never leaves the others waiting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist

from posym.errors import PosymError

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """What :func:`setup` did: the process's rank/world, its device and whether it owns the group."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    backend: str | None = None
    owns_group: bool = False  # True when setup() created the process group (teardown() destroys it)

    @property
    def enabled(self) -> bool:
        """True when training runs in more than one process."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_world_size() -> int:
    """``WORLD_SIZE`` set by ``torchrun`` (1 when absent)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def get_rank() -> int:
    """Rank of this process: in the default group, else ``RANK`` set by ``torchrun`` (0 when absent)."""
    return dist.get_rank() if is_initialized() else int(os.environ.get("RANK", "0"))


def get_world_size() -> int:
    """Processes in the default group (1 without one)."""
    return dist.get_world_size() if is_initialized() else 1


def is_main() -> bool:
    """True on rank 0 (and in a plain single-process run); valid before setup and after teardown."""
    return get_rank() == 0


def setup(device: str = "cpu", timeout_s: float = 1800.0) -> DistContext:
    """Initialise data-parallel training if launched by ``torchrun`` with ``WORLD_SIZE`` > 1.

    ``device`` ``"cuda"`` becomes ``"cuda:LOCAL_RANK"`` (backend ``nccl``); ``"cpu"`` uses ``gloo``.
    An already initialised default group is reused (and not destroyed by :func:`teardown`).
    Single process: returns a context for rank 0 of 1 with ``device`` unchanged.
    """
    world = env_world_size()
    if world <= 1 and not is_initialized():
        return DistContext(device=device)
    if not dist.is_available():
        raise PosymError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    if cuda:
        if not torch.cuda.is_available():
            raise PosymError("--device cuda requested but CUDA is not available")
        if device == "cuda":
            device = f"cuda:{local_rank % max(1, torch.cuda.device_count())}"
        torch.cuda.set_device(torch.device(device))
    owns = False
    if not is_initialized():
        backend = "nccl" if cuda else "gloo"
        kwargs: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout_s)}
        if cuda:
            kwargs["device_id"] = torch.device(device)
        dist.init_process_group(**kwargs)
        owns = True
    return DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank,
                       device=device, backend=dist.get_backend(), owns_group=owns)


def teardown(ctx: DistContext) -> None:
    """Wait for all ranks, then destroy the process group if :func:`setup` created it."""
    if ctx.enabled and is_initialized():
        barrier(ctx)
        if ctx.owns_group:
            dist.destroy_process_group()


def barrier(ctx: DistContext | None = None) -> None:
    """Block until every rank arrives (no-op in a single process)."""
    if not is_initialized() or get_world_size() == 1:
        return
    if ctx is not None and ctx.backend == "nccl":
        dist.barrier(device_ids=[torch.device(ctx.device).index or 0])
    else:
        dist.barrier()


def shard_bounds(n: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[lo, hi)`` of rank ``rank``'s contiguous shard of ``n`` items; sizes differ by at most 1.

    Raises PosymError when some rank would get nothing (``n < world_size``).
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"bad rank {rank} of world size {world_size}")
    if n < world_size:
        raise PosymError(f"global batch of {n} cannot be split over {world_size} processes")
    return (n * rank) // world_size, (n * (rank + 1)) // world_size


def shard(batch: T, rank: int, world_size: int) -> T:
    """Rank ``rank``'s contiguous shard of a sliceable batch (tensor, array, list)."""
    lo, hi = shard_bounds(len(batch), rank, world_size)  # type: ignore[arg-type]
    return batch[lo:hi]  # type: ignore[index]


def broadcast_object(obj: T, src: int = 0) -> T:
    """``obj`` of rank ``src`` on every rank (picklable objects; identity in a single process)."""
    if not is_initialized() or get_world_size() == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def run_on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 only and return its (picklable) result on every rank.

    A ``PosymError`` raised by ``fn`` is re-raised on every rank (other exceptions become a
    PosymError on the non-main ranks), so no rank is left waiting for the others.
    """
    if not is_initialized() or get_world_size() == 1:
        return fn()
    result: Any = None
    error: str | None = None
    exc: BaseException | None = None
    if is_main():
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - re-raised below after telling the other ranks
            exc, error = e, str(e) or type(e).__name__
    result, error = broadcast_object((result, error))
    if exc is not None:
        raise exc
    if error is not None:
        raise PosymError(error)
    return result


def gather_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's copy of ``t`` (same shape and dtype on all ranks), on the CPU, in rank order."""
    if not is_initialized() or get_world_size() == 1:
        return [t.detach().cpu()]
    if dist.get_backend() == "nccl":
        src = t.detach().to(torch.device("cuda", torch.cuda.current_device()))
    else:
        src = t.detach().cpu()
    out = [torch.empty_like(src) for _ in range(get_world_size())]
    dist.all_gather(out, src)
    return [x.cpu() for x in out]


__all__ = ["DistContext", "setup", "teardown", "barrier", "shard_bounds", "shard", "broadcast_object",
           "run_on_main", "gather_tensors", "env_world_size", "get_rank", "get_world_size", "is_main",
           "is_initialized"]
