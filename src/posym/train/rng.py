"""The random streams of a training run (SPEC §2: resume is exact): what a checkpoint stores of the process's
generators and how a run gets them back.

A run draws from the CPU generator (``torch.random``) and, on CUDA, from the device's default generator (its
dropout masks: :func:`posym.model.fast.explicit_dropout`). :func:`process_rng` / :func:`set_process_rng` read
and set both as one state under the trainer-state keys (``rng_cpu``, ``rng_cuda``); ``posym train --seeds``
swaps each run's state in around its draws with them (:mod:`posym.train.batched`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from posym.train import distributed as dist

#: Device types whose default generator :func:`process_rng` reads (besides the CPU's).
RNG_DEVICES = ("cpu", "cuda")


def process_rng(device: str | torch.device) -> dict[str, Tensor]:
    """This process's generator states for a run on ``device``: ``{"rng_cpu": ...}`` plus, on CUDA,
    ``{"rng_cuda": ...}`` (that device's default generator), as a single run's checkpoint stores them."""
    st = {"rng_cpu": torch.random.get_rng_state()}
    if torch.device(device).type == "cuda":
        st["rng_cuda"] = torch.cuda.get_rng_state(device)
    return st


def set_process_rng(states: dict[str, Tensor], device: str | torch.device) -> None:
    """Set the generators :func:`process_rng` read (an entry it lacks is left as it is)."""
    torch.random.set_rng_state(states["rng_cpu"])
    if torch.device(device).type == "cuda" and "rng_cuda" in states:
        torch.cuda.set_rng_state(states["rng_cuda"], device)


def _restore_rng(state: dict[str, Any], rank: int, world_size: int, device: str, fallback_seed: int) -> None:
    """Set this rank's CPU (and CUDA) RNG from a trainer state. States of every rank are stored
    (``rng_cpu_ranks``); a run resumed with another process count reseeds ranks > 0 from
    ``fallback_seed`` (rank 0 always continues its stream, which is all a single process uses)."""
    cpu_ranks = state.get("rng_cpu_ranks")
    cuda_ranks = state.get("rng_cuda_ranks")
    same_world = cpu_ranks is not None and len(cpu_ranks) == world_size
    if rank == 0 or same_world:
        torch.set_rng_state(cpu_ranks[rank] if same_world else state["rng_cpu"])
        if device.startswith("cuda"):
            if cuda_ranks is not None and len(cuda_ranks) == world_size:
                torch.cuda.set_rng_state(cuda_ranks[rank], device)
            elif "rng_cuda" in state and rank == 0:
                torch.cuda.set_rng_state(state["rng_cuda"], device)
    else:
        torch.manual_seed(fallback_seed)


def _rng_states(device: str) -> dict[str, Any]:
    """Trainer-state RNG entries: this process's CPU/CUDA state (rank 0's under DDP, for single-process
    resume) and, under DDP, every rank's (``*_ranks``, stacked). A collective under DDP."""
    st: dict[str, Any] = dict(process_rng(device))
    cuda = "rng_cuda" in st
    if dist.get_world_size() > 1:
        st["rng_cpu_ranks"] = torch.stack(dist.gather_tensors(st["rng_cpu"]))
        st["rng_cpu"] = st["rng_cpu_ranks"][0].clone()
        if cuda:
            st["rng_cuda_ranks"] = torch.stack(dist.gather_tensors(st["rng_cuda"]))
            st["rng_cuda"] = st["rng_cuda_ranks"][0].clone()
    return st


__all__ = ["RNG_DEVICES", "process_rng", "set_process_rng"]
