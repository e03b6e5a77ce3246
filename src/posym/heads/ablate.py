"""Head-role ablations (Paper A, Fig. 3 right), on every family posym reads (SPEC §7; docs/models.md).

Each attention head is knocked out in turn and the model re-evaluated: accuracy (argmax of the
last-position logits vs the label), global and per hop count. A head's output is the per-head slice of
the input of the adapter's :meth:`~posym.model.adapters.RopeAdapter.head_output_site`, i.e. before the
output projection: ``[B, T, n_heads * head_dim]`` with query head ``h`` at ``h*hd:(h+1)*hd`` (GPT-J
``attn.out_proj``, Llama / Qwen / Gemma / Mistral ``self_attn.o_proj``, GPT-NeoX ``attention.dense``,
...). Under grouped-query attention the ablated unit is the *query* head's output (the key/value head
it shares stays). Two replacements:

- ``"zero"``: the slice is set to 0 (equivalent to zeroing the head's columns of the output
  projection's weight; a bias, as in GPT-NeoX, stays);
- ``"mean"``: the slice is set to its mean over a reference batch of prompts, per position and head
  (our choice: default reference = the evaluation batch itself, means taken over all its prompts
  regardless of hop count; computed with the plain HF forward).

Ablation is done with forward pre-hooks on that site (always removed afterwards), so it applies to
every forward that calls that module: the HF forward and ``posym.model.last_token_logits`` (used by
``posym.train.evaluate``; on GPT-J its last layer feeds only the last position, and the hook then uses
the last rows of the per-position means). GPT-J's hooks and results are those of the GPT-J-only
version, bit for bit.

:func:`ablate_head_set` ablates a *set* of heads together (``posym ablate --heads``; a head selection of
:mod:`posym.heads.selection`: explicit, a type read from a head readout, or its matched random control):
one row per mode, with the resolved heads, the selection, the readout and the control's seed recorded.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from posym.errors import PosymError
from posym.model.adapters import eval_mode, get_adapter, hook_handles
from posym.tasks.dataset import SPLIT_SIZES, TaskBatch, make_split
from posym.model.fast import last_token_logits
from posym.train.evaluate import MAX_HOPS, accuracy_table, predict

MODES: tuple[str, ...] = ("zero", "mean")
#: :func:`ablate_heads`'s methods: stacked forwards (default) or the per-head loop (the reference).
ABLATE_METHODS: tuple[str, ...] = ("batched", "loop")
#: Rows (prompt x ablated head) per forward of the batched method on an accelerator; on the CPU (arithmetic-bound,
#: where large forwards were not faster) :data:`CPU_ROWS`, the loop's batch.
DEFAULT_ROWS = 8192
CPU_ROWS = 512
#: Columns of :func:`ablate_heads`'s table.
ABLATION_COLUMNS = ["mode", "layer", "head", "acc"] + [f"acc_hop{h}" for h in range(1, MAX_HOPS + 1)]
#: Columns :func:`ablate_head_set` adds (on every row): the resolved heads (``L0H1+L2H3``), the selection
#: as given (canonical), the readout file it was resolved from (empty for explicit heads) and the random
#: control's seed (empty unless ``random:``).
HEAD_SET_COLUMNS = ["heads", "selection", "readout", "seed"]


def _geometry(model: nn.Module) -> tuple[int, int, int]:
    """``(n_layers, n_heads, head_dim)`` of any supported family (PosymError for an unsupported one)."""
    ad = get_adapter(model)
    return ad.n_layers, ad.n_heads, ad.head_dim


def _check_modes(modes: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(modes, str):
        modes = (modes,)
    modes = tuple(modes)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise PosymError(f"unknown ablation mode(s) {bad or list(modes)} (expected some of: {', '.join(MODES)})")
    return modes


def _check_method(method: str) -> None:
    if method not in ABLATE_METHODS:
        raise PosymError(f"unknown ablation method {method!r} (expected one of: {', '.join(ABLATE_METHODS)})")


def _ids(x) -> np.ndarray:
    ids = x.input_ids if isinstance(x, TaskBatch) else x
    ids = ids.cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if ids.ndim == 1:
        ids = ids[None]
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise PosymError(f"need a non-empty batch of prompts [n, T], got shape {ids.shape}")
    return ids.astype(np.int64, copy=False)


@torch.no_grad()
def head_output_means(model: nn.Module, input_ids, batch_size: int = 512) -> list[torch.Tensor]:
    """Mean input of every layer's head-output site (the heads' outputs before the output
    projection, :meth:`~posym.model.adapters.RopeAdapter.head_output_site`) over a batch of prompts,
    per position.

    ``input_ids``: ``[N, T]`` ids or a TaskBatch. Returns one ``[T, n_heads * head_dim]`` tensor per
    layer in the model's dtype (head ``h`` at columns ``h*hd:(h+1)*hd``), computed with the HF forward
    (all positions).
    """
    ids = _ids(input_ids)
    ad = get_adapter(model)
    model = ad.model
    device = ad.device
    sums: list[torch.Tensor | None] = [None] * ad.n_layers

    def capture(layer: int):
        def hook(module, args):
            s = args[0].detach().double().sum(0)  # [T, D]
            sums[layer] = s if sums[layer] is None else sums[layer] + s
        return hook

    with hook_handles() as handles, eval_mode(model):
        for i in range(ad.n_layers):
            handles.append(ad.head_output_site(i).register_forward_pre_hook(capture(i)))
        for start in range(0, len(ids), batch_size):
            model(input_ids=torch.as_tensor(ids[start:start + batch_size], device=device), use_cache=False)
    if any(s is None for s in sums):
        raise PosymError(f"{ad.family}: the forward did not pass every layer's head-output site")
    dtype = next(model.parameters()).dtype
    return [(s / len(ids)).to(dtype) for s in sums]


@contextmanager
def ablated(model: nn.Module, heads: Iterable[tuple[int, int]], mode: str = "zero",
            means: Sequence[torch.Tensor] | None = None) -> Iterator[nn.Module]:
    """Context manager: inside it, the given ``(layer, head)`` outputs (query heads) are replaced
    (``"zero"`` or ``"mean"``, which needs ``means`` from :func:`head_output_means`), in any supported
    family. Hooks are removed on exit."""
    if not isinstance(mode, str):
        raise PosymError(f"ablated() takes one mode (a string), got {mode!r}")
    (mode,) = _check_modes(mode)
    ad = get_adapter(model)
    L, H, hd = ad.n_layers, ad.n_heads, ad.head_dim
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        if not (0 <= int(layer) < L and 0 <= int(head) < H):
            raise PosymError(f"no head ({layer}, {head}) in a model with {L} layers x {H} heads")
        by_layer.setdefault(int(layer), []).append(int(head))
    if mode == "mean":
        if means is None or len(means) != L:
            raise PosymError("mean ablation needs per-layer means (head_output_means)")
        bad = [tuple(m.shape) for m in means if m.ndim != 2 or m.shape[1] != H * hd]
        if bad:
            raise PosymError(f"mean-ablation means must be [T, {H * hd}] per layer, got {bad[0]}")
    sites = {layer: ad.head_output_site(layer) for layer in by_layer}

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
    try:
        for layer, hs in by_layer.items():
            handles.append(sites[layer].register_forward_pre_hook(make_hook(layer, hs)))
        yield model
    finally:
        for h in handles:
            h.remove()


def ablated_logits(model: nn.Module, input_ids, heads: Iterable[tuple[int, int]], mode: str = "zero",
                   means: Sequence[torch.Tensor] | None = None, batch_size: int = 512) -> np.ndarray:
    """Last-position logits ``[N, V]`` with ``heads`` ablated (the forward ``posym.train.evaluate`` uses)."""
    ids = _ids(input_ids)
    device = next(model.parameters()).device
    with ablated(model, heads, mode, means):
        return predict(model, ids, batch_size=batch_size, device=device)[1]


@torch.no_grad()
def ablated_predictions(model: nn.Module, input_ids, cells: Sequence[tuple[str, int, int]],
                        means: Sequence[torch.Tensor] | None = None, rows: int | None = None,
                        progress: bool = False) -> list[np.ndarray]:
    """Argmax predictions ``[N]`` of the prompts ``input_ids`` ``[N, T]`` for each cell ``(mode, layer, head)``
    of ``cells`` (mode ``"none"`` with layer/head -1: the plain model), from forwards over the cells' prompts
    stacked ``[C * N, T]``, up to ``rows`` rows at a time (None: :data:`DEFAULT_ROWS`, :data:`CPU_ROWS` on the
    CPU): a pre-hook at each layer's head-output site replaces, row by row, the head its cell ablates (0, or
    ``means[layer][-T:]`` of that head: the values :func:`ablated` writes).
    Few large forwards instead of ``C`` loops of small ones (issue 39)."""
    from tqdm.auto import tqdm

    ids = _ids(input_ids)
    ad = get_adapter(model)
    L, H, hd = ad.n_layers, ad.n_heads, ad.head_dim
    for mode, layer, head in cells:
        if mode != "none":
            _check_modes(mode)
            if not (0 <= int(layer) < L and 0 <= int(head) < H):
                raise PosymError(f"no head ({layer}, {head}) in a model with {L} layers x {H} heads")
    if any(c[0] == "mean" for c in cells) and (means is None or len(means) != L):
        raise PosymError("mean ablation needs per-layer means (head_output_means)")
    device = ad.device
    rows = max(1, int(rows if rows is not None else (CPU_ROWS if torch.device(device).type == "cpu" else DEFAULT_ROWS)))
    N, C = len(ids), len(cells)
    c_layer = torch.tensor([int(c[1]) if c[0] != "none" else -1 for c in cells], device=device)
    c_head = torch.tensor([max(int(c[2]), 0) for c in cells], device=device)
    c_mean = torch.tensor([c[0] == "mean" for c in cells], device=device)
    ids_t = torch.as_tensor(ids, device=device)
    cur: dict = {}  # the rows of the forward in flight: their cells' layer, head and mode

    def make_hook(layer: int):
        def hook(module, args):
            if layer not in cur["layers"]:  # no row's cell ablates a head of this layer: input unchanged
                return None
            sel = cur["layer"] == layer  # [R]
            x = args[0]
            R, T = x.shape[0], x.shape[-2]
            hit = sel[:, None] & (torch.arange(H, device=x.device)[None] == cur["head"][:, None])  # [R, H]
            y = x.reshape(R, T, H, hd)
            zero = (hit & ~cur["mean"][:, None])[:, None, :, None]
            y = torch.where(zero, torch.zeros((), dtype=y.dtype, device=y.device), y)
            if (layer, "mean") in cur["layers"]:
                m = means[layer]
                if m.shape[0] < T:
                    raise PosymError(f"mean-ablation reference has {m.shape[0]} positions, the prompts {T}")
                ref = m[-T:].to(device=x.device, dtype=x.dtype).reshape(1, T, H, hd)
                y = torch.where((hit & cur["mean"][:, None])[:, None, :, None], ref, y)
            return (y.reshape(x.shape), *args[1:])
        return hook

    preds = torch.empty(C * N, dtype=torch.long)
    bar = tqdm(total=C * N, desc="ablating heads", unit="row", disable=not progress)
    with hook_handles() as handles, eval_mode(model):
        for layer in range(L):
            handles.append(ad.head_output_site(layer).register_forward_pre_hook(make_hook(layer)))
        for start in range(0, C * N, rows):
            flat = torch.arange(start, min(start + rows, C * N))
            cell, prompt = flat // N, flat % N
            present = {(int(c[1]), c[0]) for c in (cells[i] for i in range(int(cell[0]), int(cell[-1]) + 1))}
            cell = cell.to(device)
            cur.update(layer=c_layer[cell], head=c_head[cell], mean=c_mean[cell],
                       layers={lm[0] for lm in present} | {lm for lm in present if lm[1] == "mean"})
            logits = last_token_logits(model, ids_t[prompt.to(device)]).float()
            preds[start:start + len(flat)] = logits.argmax(-1).cpu()
            bar.update(len(flat))
    bar.close()
    return [p.numpy() for p in preds.view(C, N)]


def _mean_outputs(model: nn.Module, ids: np.ndarray, mean_batch, batch_size: int) -> list[torch.Tensor]:
    """The per-position head outputs that ``"mean"`` ablation puts in (:func:`head_output_means`), over
    ``mean_batch`` (default: the evaluation prompts ``ids``, whose length it must have)."""
    ref = ids if mean_batch is None else _ids(mean_batch)
    if ref.shape[1] != ids.shape[1]:
        raise PosymError(f"mean_batch prompts have length {ref.shape[1]}, the evaluation batch {ids.shape[1]}")
    return head_output_means(model, ref, batch_size=batch_size)


def ablate_heads(model: nn.Module, batch: TaskBatch, modes: str | Sequence[str] = MODES,
                 batch_size: int = 512, mean_batch: TaskBatch | np.ndarray | None = None,
                 progress: bool = False, method: str = "batched", rows: int | None = None) -> pd.DataFrame:
    """Accuracy with each head ablated in turn, per mode (Paper A Fig. 3 right), in any supported family.

    Returns one row per (mode, layer, head) plus a first baseline row (``mode="none"``, layer and head
    -1); columns ``mode, layer, head, acc, acc_hop1..acc_hop4`` (NaN for an absent hop class). The
    ``"mean"`` replacement is the mean over ``mean_batch`` (default: ``batch``) per position and head.
    ``progress`` shows a bar over the ablated heads.

    ``method``: ``"batched"`` (default; :func:`ablated_predictions`: every (mode, layer, head) cell's prompts
    stacked into forwards of up to ``rows`` rows, each row with its own head masked) or ``"loop"`` (the
    reference: one :func:`ablated` context and ``batch_size`` forwards per cell). Both write the same values
    into the head outputs; the tables are equal (tested on several families, GQA and both modes).
    """
    modes = _check_modes(modes)
    _check_method(method)
    if not isinstance(batch, TaskBatch):
        raise PosymError("ablate_heads needs a posym.tasks.TaskBatch (labels and hop counts)")
    ids = _ids(batch)
    labels, hops = np.asarray(batch.labels), np.asarray(batch.hops)
    L, H, _ = _geometry(model)

    def row(mode: str, layer: int, head: int, pred: np.ndarray) -> dict:
        return {"mode": mode, "layer": layer, "head": head, **accuracy_table(pred, labels, hops)}

    means = _mean_outputs(model, ids, mean_batch, batch_size) if "mean" in modes else None
    if method == "batched":
        cells = [("none", -1, -1)] + [(m, layer, h) for m in modes for layer in range(L) for h in range(H)]
        preds = ablated_predictions(model, ids, cells, means, rows=rows, progress=progress)
        return pd.DataFrame([row(*c, p) for c, p in zip(cells, preds)], columns=ABLATION_COLUMNS)
    return _ablate_loop(model, ids, modes, means, row, batch_size, progress)


def _ablate_loop(model: nn.Module, ids: np.ndarray, modes: tuple[str, ...], means: Sequence[torch.Tensor] | None,
                 row, batch_size: int, progress: bool) -> pd.DataFrame:
    """:func:`ablate_heads`'s reference: one :func:`ablated` context and one :func:`predict` per cell."""
    from tqdm.auto import tqdm

    device = next(model.parameters()).device
    L, H, _ = _geometry(model)
    rows = [row("none", -1, -1, predict(model, ids, batch_size=batch_size, device=device)[0])]
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


def ablate_head_set(model: nn.Module, batch: TaskBatch, heads: Sequence[tuple[int, int]],
                    modes: str | Sequence[str] = MODES, batch_size: int = 512,
                    mean_batch: TaskBatch | np.ndarray | None = None) -> pd.DataFrame:
    """Accuracy with the ``(layer, head)`` set ablated *together*, per mode (the ablation of
    :func:`ablated`; Paper A Fig. 3 right, for a head set).

    Returns the baseline row (``mode="none"``) then one row per mode, layer and head -1 (the set: the
    caller records its heads); columns :data:`ABLATION_COLUMNS`. ``mean_batch`` as :func:`ablate_heads`."""
    modes = _check_modes(modes)
    if not isinstance(batch, TaskBatch):
        raise PosymError("ablate_head_set needs a posym.tasks.TaskBatch (labels and hop counts)")
    heads = [(int(layer), int(head)) for layer, head in heads]
    if not heads:
        raise PosymError("ablate_head_set needs at least one (layer, head)")
    ids = _ids(batch)
    labels, hops = np.asarray(batch.labels), np.asarray(batch.hops)
    device = next(model.parameters()).device
    L, H, _ = _geometry(model)
    bad = [(layer, head) for layer, head in heads if not (0 <= layer < L and 0 <= head < H)]
    if bad:
        raise PosymError(f"no head L{bad[0][0]}H{bad[0][1]} in a model with {L} layers x {H} heads")

    def row(mode: str, pred: np.ndarray) -> dict:
        return {"mode": mode, "layer": -1, "head": -1, **accuracy_table(pred, labels, hops)}

    rows = [row("none", predict(model, ids, batch_size=batch_size, device=device)[0])]
    means = _mean_outputs(model, ids, mean_batch, batch_size) if "mean" in modes else None
    for mode in modes:
        with ablated(model, heads, mode, means):
            rows.append(row(mode, predict(model, ids, batch_size=batch_size, device=device)[0]))
    return pd.DataFrame(rows, columns=ABLATION_COLUMNS)


def ablation_for_run(run_or_model_dir: str | os.PathLike, task: str | None = None, n: int = 2000, seed: int = 0,
                     modes: str | Sequence[str] = MODES, split: str = "test", batch_size: int = 512,
                     step: int | str | None = None, progress: bool = False, heads: str | None = None,
                     readout: str | os.PathLike | None = None, method: str = "batched") -> pd.DataFrame:
    """:func:`ablate_heads` (``method``: ``"batched"`` or the ``"loop"`` reference) for a run (newest checkpoint,
    or ``step``) or checkpoint directory on the first ``n`` prompts of ``split`` (default: 2,000 test prompts,
    balanced over hop counts).

    ``heads``: a head selection (:func:`posym.heads.selection.parse_heads`: ``L3H1+L5H0``, a type, or
    ``random:<type>[,seed=S]``; a type needs ``readout``, the head readout table of the same model):
    the set is ablated together instead (:func:`ablate_head_set`), with the columns
    :data:`HEAD_SET_COLUMNS` on every row. The selection and the readout are checked before the model
    is loaded; the heads against the model before any forward.

    ``df.attrs`` records ``task``, ``step``, ``n``, ``split`` and ``seed`` (the data seed); with
    ``heads`` also ``heads`` (resolved), ``selection``, ``readout`` and ``selection_seed``.
    """
    from posym.heads.selection import format_heads, parse_heads, read_readout, resolve_heads
    from posym.runs.resolve import resolve_model

    modes = _check_modes(modes)
    _check_method(method)
    if split not in SPLIT_SIZES:
        raise PosymError(f"unknown split {split!r} (expected one of: {', '.join(SPLIT_SIZES)})")
    selection = table = None
    if heads is not None:
        selection = parse_heads(heads)
        if selection.needs_readout and readout is None:
            raise PosymError(f"--heads {selection.canonical()} needs --readout FILE: the head readout of the same model "
                             "(posym head-types' head_types.csv or a scores.csv)")
        if not selection.needs_readout and readout is not None:
            raise PosymError(f"--heads {selection.canonical()} names its heads; --readout applies to a type or random:<type>")
        table = read_readout(readout) if readout is not None else None
    elif readout is not None:
        raise PosymError("--readout is read for --heads TYPE or random:TYPE; give --heads too")
    model, task, ckpt_step = resolve_model(run_or_model_dir, task=task, step=step)
    if selection is None:
        batch = make_split(task, split, seed, n=n)
        df = ablate_heads(model, batch, modes=modes, batch_size=batch_size, progress=progress, method=method)
        df.attrs.update(task=task, step=ckpt_step, n=int(n), split=split, seed=int(seed))
        return df
    L, H, _ = _geometry(model)
    resolved = resolve_heads(selection, table, L, H)
    batch = make_split(task, split, seed, n=n)
    df = ablate_head_set(model, batch, resolved, modes=modes, batch_size=batch_size)
    sel_seed = selection.seed if selection.random else None
    record = {"heads": format_heads(resolved), "selection": selection.canonical(),
              "readout": "" if readout is None else str(readout), "seed": sel_seed}
    for col, value in record.items():
        df[col] = value
    df.attrs.update(task=task, step=ckpt_step, n=int(n), split=split, seed=int(seed), heads=record["heads"],
                    selection=record["selection"], readout=record["readout"], selection_seed=sel_seed)
    return df


__all__ = ["ABLATE_METHODS", "ABLATION_COLUMNS", "CPU_ROWS", "DEFAULT_ROWS", "HEAD_SET_COLUMNS", "MODES", "ablate_heads",
           "ablate_head_set", "ablated", "ablated_logits", "ablated_predictions", "ablation_for_run", "head_output_means"]
