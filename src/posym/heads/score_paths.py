"""The two paths to the swapped attention of the positional / symbolic scores (SPEC §3 steps 1–2): the
swap units (keys or blocks, excluded keys), the fast exact path from one forward's pre-rotary q and k,
and the literal re-run of block ``ℓ`` (the reference). :mod:`posym.heads.scores` describes both and
drives them ("module doc" below is its module docstring); each yields, per layer,
``(D, D'_i, D'_j, entropy)``."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from posym.errors import PosymError
from posym.heads.score_formula import BlockSpec, attention_entropy
from posym.heads.swaps import block_calls, lse, rerun_block, swap_perms, token_swaps
from posym.model.adapters import RopeAdapter, hook_handles


# ================================================================================================
# swap units (module doc: Blocks, Excluded keys)
# ================================================================================================
def resolve_blocks(blocks: BlockSpec, t: int) -> tuple[tuple[int, int], ...]:
    """Blocks over keys ``0..t-1`` as sorted, disjoint ``(start, stop)`` pairs (module doc, Blocks)."""
    if isinstance(blocks, (int, np.integer)):
        m = int(blocks)
        if not 2 <= m <= t:
            raise PosymError(f"blocks={m}: need 2 <= blocks <= {t} (the number of keys before the query)")
        base, extra = divmod(t, m)
        sizes = [base + 1] * extra + [base] * (m - extra)
        edges = np.concatenate(([0], np.cumsum(sizes)))
        return tuple((int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]))
    try:
        items = list(blocks)
    except TypeError:
        raise PosymError(f"blocks must be an int, a list of edges or (start, stop) pairs, got {blocks!r}") from None
    if items and all(isinstance(x, (int, np.integer)) for x in items):
        edges = [int(x) for x in items]
        if len(edges) < 3 or any(b <= a for a, b in zip(edges[:-1], edges[1:])):
            raise PosymError("block edges must be strictly increasing with at least 3 entries (2 blocks)")
        out = list(zip(edges[:-1], edges[1:]))
    else:
        try:
            out = sorted((int(a), int(b)) for a, b in items)
        except (TypeError, ValueError):
            raise PosymError(f"blocks must be an int, a list of edges or (start, stop) pairs, got {blocks!r}") from None
    if len(out) < 2:
        raise PosymError("need at least two blocks")
    prev = 0
    for a, b in out:
        if a < prev or b <= a:
            raise PosymError(f"blocks must be non-empty and disjoint, got {out}")
        prev = b
    if out[0][0] < 0 or out[-1][1] > t:
        raise PosymError(f"blocks must lie within keys [0, {t}) before the query at position {t}")
    return tuple(out)


def _resolve_exclude(exclude_keys: Sequence[int], t: int) -> tuple[int, ...]:
    """Sorted distinct excluded key positions, each in ``[0, t)`` (module doc, Excluded keys)."""
    try:
        keys = [int(k) for k in exclude_keys]
        if any(isinstance(k, bool) or int(k) != k for k in exclude_keys):
            raise ValueError
    except (TypeError, ValueError):
        raise PosymError(f"exclude_keys must be key positions (integers), got {exclude_keys!r}") from None
    bad = [k for k in keys if not 0 <= k < t]
    if bad:
        raise PosymError(f"excluded key {bad[0]} lies outside the keys [0, {t}) before the query at position {t}")
    return tuple(sorted(set(keys)))


def _token_pairs(t: int, exclude: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """The swapped key pairs [S, 2] (``triu_indices`` order, pairs touching an excluded key dropped) and
    the boolean selection of them among all ``C(t, 2)`` swaps (None when nothing is excluded)."""
    pairs = torch.triu_indices(t, t, 1).T.numpy()
    if not exclude:
        return pairs, None
    keep = ~np.isin(pairs, exclude).any(1)
    if not keep.any():
        raise PosymError(f"excluding keys {list(exclude)} leaves fewer than two keys to swap before the query "
                         f"at position {t}")
    return pairs[keep], keep


def _excluded_blocks(blocks: BlockSpec, t: int, exclude: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """:func:`resolve_blocks` with excluded keys: ``blocks=m`` splits the keys after an excluded prefix
    ``0..K-1`` (other exclusions are refused); an explicit block holding an excluded key is refused."""
    if not exclude:
        return resolve_blocks(blocks, t)
    if isinstance(blocks, (int, np.integer)):
        k = len(exclude)
        if exclude != tuple(range(k)):
            raise PosymError(f"blocks={int(blocks)} with excluded keys {list(exclude)}: only an excluded prefix "
                             "0..K-1 can be split around; give explicit blocks")
        if not 2 <= int(blocks) <= t - k:
            raise PosymError(f"blocks={int(blocks)}: need 2 <= blocks <= {t - k} (the keys before the query "
                             f"at position {t} after the {k} excluded)")
        out = resolve_blocks(int(blocks), t - k)
        return tuple((a + k, b + k) for a, b in out)
    out = resolve_blocks(blocks, t)
    for a, b in out:
        hit = [k for k in exclude if a <= k < b]
        if hit:
            raise PosymError(f"block ({a}, {b}) holds the excluded key {hit[0]}; leave excluded keys out of the blocks")
    return out


def _block_pairs(blocks: tuple[tuple[int, int], ...]) -> np.ndarray:
    """Index pairs (a, b), a < b, of blocks with equal length; PosymError if none."""
    lens = [b - a for a, b in blocks]
    pairs = [(a, b) for a in range(len(blocks)) for b in range(a + 1, len(blocks)) if lens[a] == lens[b]]
    if not pairs:
        raise PosymError(f"no two blocks of equal length to swap in {list(blocks)}")
    return np.asarray(pairs, dtype=np.int64)


def swap_units(t: int, blocks, exclude_keys: Sequence[int]) -> tuple:
    """``(exclude, blocks or None, pairs [S, 2], keep)`` for the query at ``t`` (module doc)."""
    excl = _resolve_exclude(exclude_keys, t)
    if blocks is not None:
        bl = _excluded_blocks(blocks, t, excl)
        return excl, bl, _block_pairs(bl), None
    pairs, keep = _token_pairs(t, excl)
    return excl, None, pairs, keep


def swap_layers(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int], method: str, units: tuple,
                chunk_size: int) -> Iterator[tuple]:
    """One batch of prompts: the raw (D, D'_i, D'_j, entropy) tensors of each layer in turn."""
    _, bl, pairs, keep = units
    if bl is None:
        return (_token_swaps_fast(ad, ids, t, layers, keep) if method == "fast"
                else _token_swaps_reference(ad, ids, t, layers, pairs, chunk_size))
    return (_block_swaps_fast(ad, ids, t, layers, bl, pairs) if method == "fast"
            else _block_swaps_reference(ad, ids, t, layers, bl, pairs, chunk_size))


# ================================================================================================
# fast exact path
# ================================================================================================
def _flusher(dtype: torch.dtype):
    """Flush probabilities that the model's attention dtype cannot represent (below half its smallest
    subnormal; float32: 7e-46) to exactly 0, so the fast path sees the same zeros as the reference."""
    fi = torch.finfo(dtype if dtype.is_floating_point else torch.float32)
    thr = fi.tiny * fi.eps / 2

    def flush(x: Tensor) -> Tensor:
        return x.masked_fill(x < thr, 0.0)

    return flush


def _capture_query_keys(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int]) -> tuple[dict, dict]:
    """Pre-rotary query at ``t`` [B, H, hd] and keys ``0..t`` [B, Hkv, t+1, hd] of each layer, from one
    forward of the whole prompt, as the reference path runs it (causal attention makes the later
    tokens irrelevant to the query, but an intervention that depends on the input length, such as
    dynamic position interpolation, must see the same length in both paths)."""
    stores = ad.capture(ids, layers)
    return {l: stores[l]["q"][:, :, t] for l in layers}, {l: stores[l]["k"][:, :, : t + 1] for l in layers}


def position_content_logits(ad: RopeAdapter, q: Tensor, k: Tensor, t: int, layer: int) -> Tensor:
    """``M[a, b]`` = logit of key content ``b`` placed at position ``a`` for the query at ``t`` (SPEC §3).

    q [B, H, hd] pre-rotary query of position ``t``; k [B, Hkv, t+1, hd] pre-rotary keys ``0..t``.
    Returns float64 [B, H, t+1, t+1] (positions a, contents b); ``diag(M)`` are the model's own logits
    (soft-capped where the model caps; positions outside a sliding window are ``-inf``).
    """
    n = k.shape[-2]
    pos = torch.arange(n, device=k.device)
    qr = ad.rotate(q.double()[:, :, None, :], [t], layer)  # [B, H, 1, hd]
    qa = ad.rotate_t(qr.expand(-1, -1, n, -1), pos, layer)  # row a: R(a)^T q_rot(t)
    kx = k.double()[:, ad.kv_index.to(k.device)]  # [B, H, n, hd]
    m = torch.matmul(qa, kx.transpose(-1, -2)) * ad.scaling
    if ad.softcap is not None:
        m = torch.tanh(m / ad.softcap) * ad.softcap
    win = ad.sliding_window(layer)
    if win is not None:
        m = m.masked_fill((t - pos >= win)[:, None], float("-inf"))
    return m


def _token_swaps_fast(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int],
                      keep: np.ndarray | None = None) -> Iterator[tuple]:
    """Per layer, one at a time: (D [B,H,t], D'_i, D'_j [B,H,S], entropy [B,H]) for the token swaps
    (all of them, or those selected by ``keep`` [C(t, 2)] bool), all float64."""
    qs, ks = _capture_query_keys(ad, ids, t, layers)
    sel = None if keep is None else torch.as_tensor(keep, device=ids.device)
    for l in layers:
        m = position_content_logits(ad, qs[l], ks[l], t, l)  # [B, H, t+1, t+1]
        lg, dp_i, dp_j = token_swaps(m, t)
        del m
        if sel is not None:
            dp_i, dp_j = dp_i[..., sel], dp_j[..., sel]
        p = torch.log_softmax(lg, dim=-1).exp()
        fl = _flusher(qs[l].dtype)
        yield fl(p[..., :t]), fl(dp_i), fl(dp_j), attention_entropy(p)


def _block_swaps_fast(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int],
                      blocks: tuple[tuple[int, int], ...], pairs: np.ndarray) -> Iterator[tuple]:
    """Per layer, one at a time: (d [B,H,m], d'_a, d'_b [B,H,P], entropy [B,H]) for all equal-length block swaps."""
    qs, ks = _capture_query_keys(ad, ids, t, layers)
    dev = ids.device
    nb = len(blocks)
    member = torch.full((t + 1,), nb, dtype=torch.long, device=dev)  # block of each key; nb = no block / self
    for c, (a, b) in enumerate(blocks):
        member[a:b] = c
    onehot = torch.nn.functional.one_hot(member, nb + 1).bool()  # [t+1, nb+1]
    lengths = np.array([b - a for a, b in blocks])
    pa, pb = pairs[:, 0], pairs[:, 1]
    groups = {}
    for L in np.unique(lengths[pa]):
        sel = np.nonzero(lengths[pa] == L)[0]
        rows_a = torch.as_tensor(np.array([blocks[x][0] for x in pa[sel]])[:, None] + np.arange(L), device=dev)
        rows_b = torch.as_tensor(np.array([blocks[x][0] for x in pb[sel]])[:, None] + np.arange(L), device=dev)
        groups[int(L)] = (torch.as_tensor(sel, device=dev), rows_a, rows_b)
    excl = torch.zeros((len(pairs), nb + 1), dtype=torch.bool, device=dev)
    ar_p = torch.arange(len(pairs), device=dev)
    excl[ar_p, torch.as_tensor(pa, device=dev)] = True
    excl[ar_p, torch.as_tensor(pb, device=dev)] = True
    for l in layers:
        m = position_content_logits(ad, qs[l], ks[l], t, l)
        lg = torch.diagonal(m, dim1=-2, dim2=-1)  # [B, H, t+1]
        logp = torch.log_softmax(lg, dim=-1)
        # lse of logits per block (and of the unblocked keys incl. self, column nb)
        lb = torch.logsumexp(lg[..., :, None].masked_fill(~onehot, float("-inf")), dim=-2)  # [B, H, nb+1]
        total = torch.logsumexp(lg, dim=-1, keepdim=True)
        d = (lb[..., :nb] - total).exp()
        rest = torch.logsumexp(lb[..., None, :].masked_fill(excl, float("-inf")), dim=-1)  # [B, H, P]
        new_a = torch.empty_like(rest)
        new_b = torch.empty_like(rest)
        for sel, rows_a, rows_b in groups.values():
            new_a[..., sel] = torch.logsumexp(m[..., rows_a, rows_b], dim=-1)  # block b's contents at a's positions
            new_b[..., sel] = torch.logsumexp(m[..., rows_b, rows_a], dim=-1)
        den = lse(rest, new_a, new_b)
        fl = _flusher(qs[l].dtype)
        yield fl(d), fl((new_a - den).exp()), fl((new_b - den).exp()), attention_entropy(logp.exp())


# ================================================================================================
# reference path (literal re-run)
# ================================================================================================
def _attn_weights(output: Any, T: int) -> Tensor | None:
    """The [B, H, T, T] attention weights in an attention module's output tuple (eager), else None."""
    items = output if isinstance(output, (tuple, list)) else (output,)
    for x in items:
        if isinstance(x, Tensor) and x.ndim == 4 and x.shape[-1] == T and x.shape[-2] == T:
            return x
    return None


def check_eager(ad: RopeAdapter) -> None:
    """PosymError unless the model runs eager attention (the reference path reads its weights)."""
    impl = getattr(ad.model.config, "_attn_implementation", None)
    if impl not in (None, "eager"):
        raise PosymError(f"the reference path reads attention weights and needs eager attention; "
                         f"load/build the model with attn_implementation='eager' (got {impl!r})")


def _attention_rows(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int]) -> dict[int, Tensor]:
    """One forward of ids [B, T] stopped after the last of ``layers``: the query's attention [B, H, t+1]
    (float64) in each layer, read from the attention modules' eager weights."""
    rows: dict[int, Tensor] = {}
    with hook_handles() as handles:
        for l in layers:
            handles.append(ad.attention_module(l).register_forward_hook(_row_hook(rows, l, t, ids.shape[1])))
        ad.run(ids, stop_after=max(layers), output_attentions=True)
    return rows


def _row_hook(rows: dict, layer: int, t: int, T: int):
    """A forward hook on an attention module storing the query's row [B, H, t+1] (float64) in ``rows[layer]``."""
    def hook(module, args, output):
        w = _attn_weights(output, T)
        if w is None:
            raise PosymError("the attention module returned no weights; use attn_implementation='eager'")
        rows[layer] = w[:, :, t, : t + 1].double()
    return hook


def _reference_base(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int]) -> tuple[dict, dict]:
    """One unswapped forward: each block's call (input hidden states [B, T, D], masks, position
    embeddings) and the query's attention [B, H, t+1] per layer."""
    with block_calls(ad, layers) as calls:
        att = _attention_rows(ad, ids, t, layers)
    return calls, att


def _rerun_layer(ad: RopeAdapter, ids: Tensor, call: tuple, perms: Tensor, layer: int, t: int,
                 chunk_size: int) -> Tensor:
    """The query's attention rows after re-running block ``layer`` alone on every swapped copy (perms
    [S, T]) of every prompt (:func:`posym.heads.swaps.rerun_block`): float64 [B, H, S, t+1]."""
    T = ids.shape[1]

    def read(run):
        rows: dict[int, Tensor] = {}
        with hook_handles() as handles:
            handles.append(ad.attention_module(layer).register_forward_hook(_row_hook(rows, layer, t, T)))
            run()
        return rows[layer]

    return rerun_block(ad, call, perms, layer, chunk_size, read).permute(0, 2, 1, 3)


def _token_swaps_reference(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int], pairs: np.ndarray,
                           chunk_size: int) -> Iterator[tuple]:
    """Literal re-run of the token swaps ``pairs`` [S, 2]; same outputs as :func:`_token_swaps_fast`."""
    I, J = pairs[:, 0].tolist(), pairs[:, 1].tolist()
    ar = np.arange(len(I))
    perms = swap_perms(ids.shape[1], [([i], [j]) for i, j in zip(I, J)], ids.device)
    hidden, att = _reference_base(ad, ids, t, layers)
    for l in layers:
        rows = _rerun_layer(ad, ids, hidden.pop(l), perms, l, t, chunk_size)  # [B, H, S, t+1]
        p = att[l]
        yield p[..., :t], rows[..., ar, I], rows[..., ar, J], attention_entropy(p)


def _block_swaps_reference(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int],
                           blocks: tuple[tuple[int, int], ...], pairs: np.ndarray, chunk_size: int) -> Iterator[tuple]:
    """Literal re-run of every (equal-length) block swap; same outputs as :func:`_block_swaps_fast`."""
    T = ids.shape[1]
    rng = [range(a, b) for a, b in blocks]
    perms = swap_perms(T, [(list(rng[a]), list(rng[b])) for a, b in pairs], ids.device)
    hidden, att = _reference_base(ad, ids, t, layers)
    for l in layers:
        rows = _rerun_layer(ad, ids, hidden.pop(l), perms, l, t, chunk_size)  # [B, H, P, t+1]
        dp_a = torch.stack([rows[..., s, blocks[a][0]:blocks[a][1]].sum(-1) for s, (a, _) in enumerate(pairs)], -1)
        dp_b = torch.stack([rows[..., s, blocks[b][0]:blocks[b][1]].sum(-1) for s, (_, b) in enumerate(pairs)], -1)
        p = att[l]
        d = torch.stack([p[..., a:b].sum(-1) for a, b in blocks], -1)
        yield d, dp_a, dp_b, attention_entropy(p)


__all__ = ["check_eager", "position_content_logits", "resolve_blocks", "swap_layers", "swap_units"]
