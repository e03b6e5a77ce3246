"""Head-role ablations (Paper A, Fig. 3 right).

Each attention head is knocked out in turn and the model re-evaluated: accuracy (argmax of the
last-position logits vs the label), global and per hop count. A head's output is the per-head slice of
the input to ``attn.out_proj`` (GPT-J's ``[B, T, n_head * head_dim]``, head ``h`` at
``h*hd:(h+1)*hd``), i.e. before the output projection. Two replacements:

- ``"zero"``: the slice is set to 0 (equivalent to zeroing the head's columns of ``out_proj.weight``;
  GPT-J's ``out_proj`` has no bias);
- ``"mean"``: the slice is set to its mean over a reference batch of prompts, per position and head
  (our choice: default reference = the evaluation batch itself, means taken over all its prompts
  regardless of hop count; computed with the plain HF forward).

Ablation is done with forward pre-hooks on ``attn.out_proj`` (always removed afterwards), so it applies
to every forward that calls that module: the HF forward and ``posym.model.last_token_logits`` (used
by ``posym.train.evaluate``; its last layer feeds only the last position, and the hook then uses the
last rows of the per-position means).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from transformers import GPTJForCausalLM

from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.tasks.dataset import SPLIT_SIZES, TaskBatch, make_split
from posym.train.evaluate import MAX_HOPS, accuracy_table, predict

MODES: tuple[str, ...] = ("zero", "mean")
#: Columns of :func:`ablate_heads`'s table.
ABLATION_COLUMNS = ["mode", "layer", "head", "acc"] + [f"acc_hop{h}" for h in range(1, MAX_HOPS + 1)]


def _geometry(model: GPTJForCausalLM) -> tuple[int, int, int]:
    """(layers, heads, head dim) of any family the RoPE adapter reads (GPT-J: n_layer, n_head, n_embd / n_head)."""
    ad = get_adapter(model)
    return int(ad.n_layers), int(ad.n_heads), int(ad.head_dim)


#: Names of the attention output projection (its input: the heads' outputs, head ``h`` at ``h*hd:(h+1)*hd``):
#: GPT-J's ``out_proj``, Llama / Qwen3 / Gemma-3's ``o_proj``, GPT-NeoX's ``dense`` (``posym train --arch``).
_OUT_PROJ_NAMES = ("out_proj", "o_proj", "dense")


def _out_projs(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every layer's attention output projection (GPT-J: ``transformer.h[l].attn.out_proj``)."""
    ad = get_adapter(model)
    projs = []
    for layer in range(ad.n_layers):
        attn = ad.attention_module(layer)
        proj = next((getattr(attn, n) for n in _OUT_PROJ_NAMES if isinstance(getattr(attn, n, None), torch.nn.Module)),
                    None)
        if proj is None:
            raise PosymError(f"cannot ablate heads of a {ad.family} model: layer {layer}'s attention has none of "
                             f"{', '.join(_OUT_PROJ_NAMES)}")
        projs.append(proj)
    return projs


def _check_modes(modes: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(modes, str):
        modes = (modes,)
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise PosymError(f"unknown ablation mode(s) {bad or list(modes)} (expected some of: {', '.join(MODES)})")
    return modes


def _ids(x) -> np.ndarray:
    ids = x.input_ids if isinstance(x, TaskBatch) else x
    ids = ids.cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise PosymError(f"need a non-empty batch of prompts [n, T], got shape {ids.shape}")
    return ids.astype(np.int64, copy=False)


@torch.no_grad()
def head_output_means(model: GPTJForCausalLM, input_ids, batch_size: int = 512) -> list[torch.Tensor]:
    """Mean input of every layer's ``attn.out_proj`` over a batch of prompts, per position.

    ``input_ids``: ``[N, T]`` ids or a TaskBatch. Returns one ``[T, n_embd]`` float tensor per layer
    (head ``h`` at columns ``h*hd:(h+1)*hd``), computed with the HF forward (all positions).
    """
    ids = _ids(input_ids)
    device = next(model.parameters()).device
    projs = _out_projs(model)
    L = len(projs)
    sums: list[torch.Tensor | None] = [None] * L
    handles = []

    def capture(layer: int):
        def hook(module, args):
            s = args[0].detach().double().sum(0)  # [T, D]
            sums[layer] = s if sums[layer] is None else sums[layer] + s
        return hook

    was_training = model.training
    model.eval()
    try:
        for i, proj in enumerate(projs):
            handles.append(proj.register_forward_pre_hook(capture(i)))
        for start in range(0, len(ids), batch_size):
            model(input_ids=torch.as_tensor(ids[start:start + batch_size], device=device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    dtype = next(model.parameters()).dtype
    return [(s / len(ids)).to(dtype) for s in sums]


@contextmanager
def ablated(model: GPTJForCausalLM, heads: Iterable[tuple[int, int]], mode: str = "zero",
            means: Sequence[torch.Tensor] | None = None) -> Iterator[GPTJForCausalLM]:
    """Context manager: inside it, the given ``(layer, head)`` outputs are replaced (``"zero"`` or
    ``"mean"``, which needs ``means`` from :func:`head_output_means`). Hooks are removed on exit."""
    if not isinstance(mode, str):
        raise PosymError(f"ablated() takes one mode (a string), got {mode!r}")
    (mode,) = _check_modes(mode)
    L, H, hd = _geometry(model)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= int(layer) < L and 0 <= int(head) < H):
            raise PosymError(f"no head ({layer}, {head}) in a model with {L} layers x {H} heads")
        by_layer.setdefault(int(layer), []).append(int(head))
    if mode == "mean":
        if means is None or len(means) != L:
            raise PosymError("mean ablation needs per-layer means (head_output_means)")

    def make_hook(layer: int, hs: list[int]):
        def hook(module, args):
            x = args[0].clone()
            T = x.shape[-2]
            for h in hs:
                sl = slice(h * hd, (h + 1) * hd)
                if mode == "zero":
                    x[..., sl] = 0
                else:
                    m = means[layer]
                    if m.shape[0] < T:
                        raise PosymError(f"mean-ablation reference has {m.shape[0]} positions, the prompts {T}")
                    x[..., sl] = m[-T:, sl].to(device=x.device, dtype=x.dtype)
            return (x, *args[1:])
        return hook

    handles = []
    projs = _out_projs(model)
    try:
        for layer, hs in by_layer.items():
            handles.append(projs[layer].register_forward_pre_hook(make_hook(layer, hs)))
        yield model
    finally:
        for h in handles:
            h.remove()


def ablated_logits(model: GPTJForCausalLM, input_ids, heads: Iterable[tuple[int, int]], mode: str = "zero",
                   means: Sequence[torch.Tensor] | None = None, batch_size: int = 512) -> np.ndarray:
    """Last-position logits ``[N, V]`` with ``heads`` ablated (the forward ``posym.train.evaluate`` uses)."""
    ids = _ids(input_ids)
    device = next(model.parameters()).device
    with ablated(model, heads, mode, means):
        return predict(model, ids, batch_size=batch_size, device=device)[1]


def ablate_heads(model: GPTJForCausalLM, batch: TaskBatch, modes: str | Sequence[str] = MODES,
                 batch_size: int = 512, mean_batch: TaskBatch | np.ndarray | None = None,
                 progress: bool = False) -> pd.DataFrame:
    """Accuracy with each head ablated in turn, per mode (Paper A Fig. 3 right).

    Returns one row per (mode, layer, head) plus a first baseline row (``mode="none"``, layer and head
    -1); columns ``mode, layer, head, acc, acc_hop1..acc_hop4`` (NaN for an absent hop class). The
    ``"mean"`` replacement is the mean over ``mean_batch`` (default: ``batch``) per position and head.
    ``progress`` shows a bar over the ablated heads.
    """
    from tqdm.auto import tqdm

    modes = _check_modes(modes)
    if not isinstance(batch, TaskBatch):
        raise PosymError("ablate_heads needs a posym.tasks.TaskBatch (labels and hop counts)")
    ids = _ids(batch)
    labels, hops = np.asarray(batch.labels), np.asarray(batch.hops)
    device = next(model.parameters()).device
    L, H, _ = _geometry(model)

    def row(mode: str, layer: int, head: int, pred: np.ndarray) -> dict:
        return {"mode": mode, "layer": layer, "head": head, **accuracy_table(pred, labels, hops)}

    rows = [row("none", -1, -1, predict(model, ids, batch_size=batch_size, device=device)[0])]
    means = None
    if "mean" in modes:
        ref = ids if mean_batch is None else _ids(mean_batch)
        if ref.shape[1] != ids.shape[1]:
            raise PosymError(f"mean_batch prompts have length {ref.shape[1]}, the evaluation batch {ids.shape[1]}")
        means = head_output_means(model, ref, batch_size=batch_size)
    bar = tqdm(total=len(modes) * L * H, desc="ablating heads", unit="head", disable=not progress)
    for mode in modes:
        for layer in range(L):
            for head in range(H):
                with ablated(model, [(layer, head)], mode, means):
                    pred = predict(model, ids, batch_size=batch_size, device=device)[0]
                rows.append(row(mode, layer, head, pred))
                bar.update(1)
    bar.close()
    return pd.DataFrame(rows, columns=ABLATION_COLUMNS)


def ablation_for_run(run_or_model_dir: str | os.PathLike, task: str | None = None, n: int = 2000, seed: int = 0,
                     modes: str | Sequence[str] = MODES, split: str = "test", batch_size: int = 512,
                     step: int | str | None = None, progress: bool = False) -> pd.DataFrame:
    """:func:`ablate_heads` for a run (newest checkpoint, or ``step``) or checkpoint directory on the
    first ``n`` prompts of ``split`` (default: 2,000 test prompts, balanced over hop counts).

    ``df.attrs`` records ``task``, ``step``, ``n``, ``split`` and ``seed``.
    """
    from posym.runs.resolve import resolve_model

    modes = _check_modes(modes)
    if split not in SPLIT_SIZES:
        raise PosymError(f"unknown split {split!r} (expected one of: {', '.join(SPLIT_SIZES)})")
    model, task, ckpt_step = resolve_model(run_or_model_dir, task=task, step=step)
    batch = make_split(task, split, seed, n=n)
    df = ablate_heads(model, batch, modes=modes, batch_size=batch_size, progress=progress)
    df.attrs.update(task=task, step=ckpt_step, n=int(n), split=split, seed=int(seed))
    return df


__all__ = ["ABLATION_COLUMNS", "MODES", "ablate_heads", "ablated", "ablated_logits", "ablation_for_run",
           "head_output_means"]
