"""Discrepancy of trained heads (SPEC §4; Paper A Thm 3.2 applied to real heads).

For each head, ``Δ(σ)`` of the pre-softmax logits of the **last query** (the answer position) over
keys ``0..T-1`` of an input ``σ`` (:func:`posym.theory.discrepancy.discrepancy_of_logits`; scaling
and soft-capping included, exactly the logits the model's softmax sees). Measured on task inputs
lengthened by extra target-window tokens (SPEC §1.4), it shows how each head's margin — and with it
the inverse temperature it needs to stay hard — shrinks with length: Theorem 3.2 predicts a fast
decay for positional (Index-like) heads and a slow one for symbolic (Retrieval-like) heads.

Summaries over prompts: mean, median and minimum ``Δ`` (the theory's ``Δ(n)`` is the worst case over
inputs, so ``delta_min`` is its empirical counterpart on the sampled inputs).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor
from tqdm.auto import tqdm

from posym.constants import TEST_SEED_OFFSET
from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.theory.discrepancy import discrepancy_of_logits

#: Default added lengths of ``posym theory discrepancy --run`` (a subset of Paper A's grid).
DEFAULT_GRID: tuple[int, ...] = (0, 20, 50, 100, 300, 1000)


def last_query_logits(model, input_ids, layers: Sequence[int] | None = None) -> Tensor:
    """Pre-softmax logits of the last query of every head: input_ids [B, T] -> [L, B, H, T] float32.

    Computed from the pre-rotary q/k of one (truncated) forward through the model's adapter, rotated
    to their positions; causal and sliding-window masks give ``-inf``.
    """
    ad = get_adapter(model)
    layers = ad.check_layers(layers)
    q, k = ad.capture_qk(input_ids, layers)  # [L, B, H, T, hd], [L, B, Hkv, T, hd]
    T = q.shape[-2]
    pos = torch.arange(T, device=q.device)
    out = []
    for i, layer in enumerate(layers):
        qr = ad.rotate(q[i][:, :, -1:], [T - 1], layer).float()  # [B, H, 1, hd]
        kr = ad.rotate(k[i], pos, layer).float()[:, ad.kv_index.to(q.device)]  # [B, H, T, hd]
        logit = torch.matmul(qr, kr.transpose(-1, -2))[:, :, 0] * ad.scaling  # [B, H, T]
        if ad.softcap is not None:
            logit = torch.tanh(logit / ad.softcap) * ad.softcap
        win = ad.sliding_window(layer)
        if win is not None:
            logit = logit.masked_fill(T - 1 - pos >= win, float("-inf"))
        out.append(logit)
    return torch.stack(out)


def head_discrepancy(model, input_ids, layers: Sequence[int] | None = None, batch_size: int = 64) -> np.ndarray:
    """``Δ`` of the last query of every head: input_ids [B, T] -> float64 [B, L, H] (batched forwards)."""
    ids = torch.as_tensor(input_ids)
    if ids.ndim != 2:
        raise PosymError(f"input_ids must be [batch, length], got shape {tuple(ids.shape)}")
    if batch_size < 1:
        raise PosymError(f"batch_size must be >= 1, got {batch_size}")
    parts = []
    for i in range(0, ids.shape[0], batch_size):
        logits = last_query_logits(model, ids[i:i + batch_size], layers)  # [L, b, H, T]
        parts.append(np.moveaxis(discrepancy_of_logits(logits.cpu().numpy()), 0, 1))
    return np.concatenate(parts, axis=0)


def check_grid(model, task: str, grid: Sequence[int]) -> int:
    """Let ``model`` take the longest input of ``grid`` (added tokens of the test layout, SPEC §1.4) and
    return that length: GPT-J's rotary tables are extended (rows of existing positions unchanged),
    families computing their rotary on the fly need nothing, and a family whose rotary stops at a
    length cap is a one-line PosymError (:meth:`~posym.model.adapters.RopeAdapter.extend_to`). Cheap:
    callers run it before any work. An empty grid or a bad added length is a PosymError too."""
    from posym.tasks import DEFAULT_HOPS
    from posym.tasks._common import make_layout

    grid = list(grid)
    if not grid:
        raise PosymError("the grid of added tokens is empty")
    longest = max(make_layout(task, DEFAULT_HOPS, 8, 8, extra).seq_len for extra in grid)
    get_adapter(model).extend_to(longest)
    return longest


def trained_discrepancy(model, task: str, grid: Sequence[int] = DEFAULT_GRID, n: int = 64, seed: int = 0,
                        token_budget: int = 32768, progress: bool = True) -> pd.DataFrame:
    """``Δ`` of every head of a trained model (any RoPE family posym reads) vs added target-window tokens (SPEC §1.4, §4).

    ``n`` test-layout samples per added length (data seed :data:`posym.constants.TEST_SEED_OFFSET` ``+ seed``, as in
    ``posym lengthgen``); the model takes the longest input through its adapter (:func:`check_grid`, run
    first: GPT-J's rotary tables are extended, no weight changes). One row per
    (extra_tokens, layer, head): ``task, extra_tokens, seq_len, layer, head, n, delta_mean,
    delta_median, delta_min``.
    """
    from posym.tasks import generate

    if n < 1:
        raise PosymError(f"need n >= 1 prompts, got {n}")
    check_grid(model, task, grid)
    rows = []
    for extra in tqdm(list(grid), desc=f"discrepancy {task}", disable=not progress, unit="len"):
        batch = generate(task, n, TEST_SEED_OFFSET + seed, extra_tokens=int(extra))
        T = batch.input_ids.shape[1]
        d = head_discrepancy(model, batch.input_ids, batch_size=max(1, token_budget // T))  # [n, L, H]
        L, H = d.shape[1:]
        for layer in range(L):
            for head in range(H):
                x = d[:, layer, head]
                rows.append({"task": task, "extra_tokens": int(extra), "seq_len": T, "layer": layer, "head": head,
                             "n": n, "delta_mean": float(np.mean(x)), "delta_median": float(np.median(x)),
                             "delta_min": float(np.min(x))})
    return pd.DataFrame(rows)


__all__ = ["DEFAULT_GRID", "check_grid", "last_query_logits", "head_discrepancy", "trained_discrepancy"]
