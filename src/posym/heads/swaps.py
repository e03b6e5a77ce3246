"""The swap engine shared by the head scores and the per-frequency scores (Paper B §3; SPEC §3).

For the query at ``t`` and every token swap ``(i, j)``, ``0 <= i < j < t`` (``torch.triu_indices(t, t, 1)``
order, ``S = t(t-1)/2`` swaps), the query's attention on ``i`` and ``j`` after exchanging them:

* **fast exact** (:func:`token_swaps`): a swap only exchanges the contents of keys ``i`` and ``j``
  while positions stay, so everything follows from the position×content logits ``M[a, b]`` (content
  ``b`` placed at position ``a``). All swaps at once, in the log domain: the softmax denominator of
  each swap is assembled from prefix / middle / suffix log-cum-sum-exps, so nothing cancels.
* **literal re-run** (:func:`block_inputs`, :func:`rerun_swapped`): capture each block's input hidden
  states, then re-run the model on every swapped copy with a pre-hook substituting them at the input
  of block ``ℓ`` (position ids kept); the caller reads what it needs (attention weights, q/k) from the
  forward, which it stops right after block ``ℓ`` (:meth:`RopeAdapter.run`, :meth:`RopeAdapter.capture`).
  :func:`block_calls` / :func:`rerun_block` instead call block ``ℓ`` alone on each swapped copy with
  the masks and position embeddings of the unswapped forward (SPEC §3 step 2: re-run layer ``ℓ`` only;
  the head scores' reference).

Also the argument checks both callers share (:func:`as_ids`, :func:`ids_length`, :func:`query_positions`,
:func:`query_position`) and :func:`parse_swap_exclude` (the ``--swap-exclude`` forms).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from posym.errors import PosymError
from posym.model.adapters import RopeAdapter, hook_handles


# ================================================================================================
# fast exact path
# ================================================================================================
def lse(*xs: Tensor) -> Tensor:
    """Elementwise ``log Σ exp`` of tensors of broadcastable shapes -> their broadcast shape."""
    return torch.logsumexp(torch.stack(torch.broadcast_tensors(*xs), dim=-1), dim=-1)


def token_swaps(m: Tensor, t: int) -> tuple[Tensor, Tensor, Tensor]:
    """Attention after every token swap from position×content logits (SPEC §3 fast path).

    m [..., t+1, t+1]: ``m[..., a, b]`` = logit of key content ``b`` placed at position ``a`` for the
    query at ``t`` (``-inf`` where masked). Swap ``(i, j)`` puts content ``j`` at ``i`` and ``i`` at
    ``j``; the softmax runs over keys ``0..t`` (the query's own key included).
    Returns ``(lg [..., t+1], D'_i [..., S], D'_j [..., S])``: ``lg = diag(m)`` the unswapped logits
    (the unswapped attention is their softmax, left to the caller) and the attention on ``i`` / ``j``
    after each swap, in m's dtype.
    """
    I, J = torch.triu_indices(t, t, 1, device=m.device)
    lg = torch.diagonal(m, dim1=-2, dim2=-1)  # [..., t+1] unswapped logits (self at t)
    ninf = torch.full_like(lg[..., :1], float("-inf"))
    # log-sum-exp of logits strictly before i / strictly after j (self included) / strictly between
    pre = torch.cat((ninf, torch.logcumsumexp(lg, dim=-1)[..., :-1]), dim=-1)  # pre[i] = lse(l[:i])
    suf = torch.cat((torch.logcumsumexp(lg.flip(-1), dim=-1).flip(-1)[..., 1:], ninf), dim=-1)  # lse(l[j+1:])
    idx = torch.arange(t + 1, device=m.device)
    after = idx[None, :] > idx[:, None]  # [i, k]: k > i
    mid = torch.logcumsumexp(lg[..., None, :].masked_fill(~after, float("-inf")), dim=-1)  # mid[i,k]=lse(l[i+1..k])
    rest = lse(pre[..., I], mid[..., I, J - 1], suf[..., J])  # mid: -inf when j = i+1
    a = m[..., I, J]  # content j at position i
    b = m[..., J, I]  # content i at position j
    den = lse(rest, a, b)  # never all -inf: the query's own key is always visible
    return lg, (a - den).exp(), (b - den).exp()


# ================================================================================================
# literal re-run
# ================================================================================================
def _hidden_arg(args: tuple, kwargs: dict) -> Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextmanager
def block_inputs(ad: RopeAdapter, layers: Sequence[int]) -> Iterator[dict[int, Tensor]]:
    """Context manager: pre-hooks on the blocks of ``layers`` store a detached copy of each block's input
    hidden states [B, T, D] (residual stream before the first norm) in the yielded dict; removed on exit."""
    hidden: dict[int, Tensor] = {}

    def grab(l):
        def hook(module, args, kwargs):
            hidden[l] = _hidden_arg(args, kwargs).detach().clone()
        return hook

    with hook_handles() as handles:
        for l in layers:
            handles.append(ad.blocks[l].register_forward_pre_hook(grab(l), with_kwargs=True))
        yield hidden


@contextmanager
def block_calls(ad: RopeAdapter, layers: Sequence[int]) -> Iterator[dict[int, tuple[tuple, dict]]]:
    """Context manager: pre-hooks on the blocks of ``layers`` store each block's call ``(args, kwargs)``
    (the input hidden states detached and copied; masks, position embeddings and ids as passed) in the
    yielded dict, so :func:`rerun_block` can call that block alone; removed on exit."""
    calls: dict[int, tuple[tuple, dict]] = {}

    def grab(l):
        def hook(module, args, kwargs):
            kwargs = dict(kwargs)
            if args:
                args = (args[0].detach().clone(),) + tuple(args[1:])
            else:
                kwargs["hidden_states"] = kwargs["hidden_states"].detach().clone()
            calls[l] = (args, kwargs)
        return hook

    with hook_handles() as handles:
        for l in layers:
            handles.append(ad.blocks[l].register_forward_pre_hook(grab(l), with_kwargs=True))
        yield calls


def _batch_rows(x: Any, rows: Tensor, B: int) -> Any:
    """``x`` with every per-prompt tensor (>= 2-D, first axis ``B``) taken at ``rows``; others as they are."""
    if isinstance(x, Tensor):
        return x[rows] if x.ndim >= 2 and x.shape[0] == B else x
    if isinstance(x, (tuple, list)):
        return type(x)(_batch_rows(v, rows, B) for v in x)
    return x


def rerun_block(ad: RopeAdapter, call: tuple[tuple, dict], perms: Tensor, layer: int, chunk_size: int,
                read: Callable[[Callable[[], Any]], Tensor]) -> Tensor:
    """Re-run block ``layer`` alone on every swapped copy of every prompt (SPEC §3 step 2, literally:
    swap at the layer input, re-run that layer only).

    ``call``: the block's captured call (:func:`block_calls`) for B prompts, hidden states [B, T, D];
    perms [S, T] one position permutation per swap (``x'[p] = x[perms[s, p]]``). Copies are built
    ``chunk_size`` at a time and the block is called with the swapped hidden states and the same
    masks / position embeddings / ids (taken at each copy's prompt); ``read(run)`` calls ``run()`` (the
    block's forward) and returns the chunk's rows [c, ...]. The result is [B, S, ...].
    """
    args, kwargs = call
    hidden = args[0] if args else kwargs["hidden_states"]
    B = hidden.shape[0]
    S = perms.shape[0]
    block = ad.blocks[layer]
    rows = []
    for n0 in range(0, B * S, chunk_size):
        flat = torch.arange(n0, min(n0 + chunk_size, B * S), device=hidden.device)
        b_idx, s_idx = flat // S, flat % S
        x = hidden[b_idx[:, None], perms[s_idx]]  # [c, T, D] swapped copies
        kw = {k: _batch_rows(v, b_idx, B) for k, v in kwargs.items()}
        if args:
            a = (x,) + tuple(_batch_rows(v, b_idx, B) for v in args[1:])
        else:
            a, kw["hidden_states"] = (), x
        rows.append(read(lambda: block(*a, **kw)))
    return torch.cat(rows).reshape(B, S, *rows[0].shape[1:])


def swap_perms(T: int, swaps: Sequence[tuple[Sequence[int], Sequence[int]]], device) -> Tensor:
    """[S, T] position permutations exchanging positions ``a[k] <-> b[k]`` for each swap ``(a, b)``."""
    perms = torch.arange(T, device=device).repeat(len(swaps), 1)
    for s, (a, b) in enumerate(swaps):
        a = torch.as_tensor(a, device=device)
        b = torch.as_tensor(b, device=device)
        perms[s, a], perms[s, b] = b, a
    return perms


def token_perms(T: int, t: int, device) -> Tensor:
    """[S, T] permutations of the token swaps ``(i, j)``, ``i < j < t``, in ``triu_indices`` order."""
    I, J = (x.tolist() for x in torch.triu_indices(t, t, 1))
    return swap_perms(T, [([i], [j]) for i, j in zip(I, J)], device)


def rerun_swapped(ad: RopeAdapter, ids: Tensor, hidden: Tensor, perms: Tensor, layer: int, chunk_size: int,
                  read: Callable[[Tensor], Tensor]) -> Tensor:
    """Re-run ``layer`` on every swapped copy of every prompt (SPEC §3 step 2, literally).

    ids [B, T] prompts; hidden [B, T, D] their layer-``layer`` input hidden states; perms [S, T] one
    position permutation per swap (``x'[p] = x[perms[s, p]]``). Copies are built lazily,
    ``chunk_size`` at a time; while ``read(ids[b] [c, T])`` runs the chunk's forward (stopping it after
    block ``layer``), a pre-hook on block ``layer`` replaces its input by the swapped hidden states
    (the prompt ids only feed the layers below). ``read`` returns the chunk's rows [c, ...];
    the result is [B, S, ...].
    """
    B, T = ids.shape
    S = perms.shape[0]
    rows = []
    cur: dict[str, Tensor] = {}

    def swap_in(module, args, kwargs):
        if args:
            return (cur["x"],) + tuple(args[1:]), kwargs
        kwargs = dict(kwargs)
        kwargs["hidden_states"] = cur["x"]
        return args, kwargs

    with hook_handles() as handles:
        handles.append(ad.blocks[layer].register_forward_pre_hook(swap_in, with_kwargs=True))
        for n0 in range(0, B * S, chunk_size):
            flat = torch.arange(n0, min(n0 + chunk_size, B * S), device=ids.device)
            b_idx, s_idx = flat // S, flat % S
            cur["x"] = hidden[b_idx[:, None], perms[s_idx]]  # [c, T, D] swapped copies
            rows.append(read(ids[b_idx]))
    return torch.cat(rows).reshape(B, S, *rows[0].shape[1:])


# ================================================================================================
# argument checks
# ================================================================================================
def as_ids(input_ids: Any, ad: RopeAdapter, min_len: int = 1) -> Tensor:
    """Prompts (tensor, array, nested list or a ``TaskBatch``) -> LongTensor [B, T] on the model's device
    (:meth:`RopeAdapter.check_ids`); PosymError when ``T < min_len``."""
    if hasattr(input_ids, "input_ids") and not isinstance(input_ids, (Tensor, np.ndarray)):
        input_ids = input_ids.input_ids  # a posym.tasks.TaskBatch
    ids = ad.check_ids(input_ids if isinstance(input_ids, Tensor) else np.asarray(input_ids))
    if ids.shape[1] < min_len:
        why = " (two keys to swap and a query)" if min_len >= 3 else ""
        raise PosymError(f"prompts must have at least {min_len} tokens{why}, got {ids.shape[1]}")
    return ids


def ids_length(input_ids: Any) -> int:
    """The length ``T`` (last axis) of prompts given as :func:`as_ids` takes them, before any check
    (0 when it cannot tell; :func:`as_ids` then names the problem)."""
    if hasattr(input_ids, "input_ids") and not isinstance(input_ids, (Tensor, np.ndarray)):
        input_ids = input_ids.input_ids
    try:
        shape = input_ids.shape if isinstance(input_ids, (Tensor, np.ndarray)) else np.shape(input_ids)
    except (TypeError, ValueError):
        return 0
    return int(shape[-1]) if len(shape) else 0


#: The ``--swap-exclude`` forms (:func:`parse_swap_exclude`).
SWAP_EXCLUDE_FORMS = "none | bos | first:K"


def parse_swap_exclude(spec: str, ids: Any = None) -> tuple[int, ...]:
    """Key positions kept out of the swaps from a CLI form: ``none`` -> (), ``bos`` -> (0,) (the start
    token), ``first:K`` -> (0, ..., K-1) (posym's addition to SPEC §3 for real LLMs' attention sinks).

    ``ids`` (optional, prompts [B, T] or one prompt [T]): the keys must leave at least two swappable keys
    before the last position (PosymError otherwise).
    """
    text = str(spec).strip().lower()
    if text == "none":
        keys: tuple[int, ...] = ()
    elif text == "bos":
        keys = (0,)
    elif text.startswith("first:"):
        try:
            k = int(text.split(":", 1)[1])
        except ValueError:
            k = -1
        if k < 1:
            raise PosymError(f"--swap-exclude {spec!r}: first:K needs a positive integer K")
        keys = tuple(range(k))
    else:
        raise PosymError(f"unknown --swap-exclude {spec!r}; use {SWAP_EXCLUDE_FORMS}")
    if ids is not None and keys:
        T = ids_length(ids)
        if T - 1 - len(keys) < 2:
            raise PosymError(f"--swap-exclude {spec!r} leaves fewer than two keys to swap in prompts of {T} tokens")
    return keys


def query_positions(query_pos: Any, B: int, T: int, min_t: int = 2) -> np.ndarray:
    """Query position of each of ``B`` prompts of length ``T`` -> int64 [B].

    None = ``T-1``; one int for all prompts or one per prompt, negative counting from the end; each
    must lie in ``[min_t, T-1]`` (``min_t = 2``: at least one swap).
    """
    if query_pos is None:
        return np.full(B, T - 1, dtype=np.int64)
    qp = np.asarray(query_pos)
    if qp.dtype.kind not in "iu":
        raise PosymError(f"query_pos must be an integer or one integer per prompt, got {query_pos!r}")
    qp = np.broadcast_to(qp, (B,)).astype(np.int64) if qp.ndim == 0 else qp.astype(np.int64)
    if qp.shape != (B,):
        raise PosymError(f"query_pos must be one integer or {B} integers (one per prompt), got shape {qp.shape}")
    qp = np.where(qp < 0, qp + T, qp)
    if qp.min() < min_t or qp.max() > T - 1:
        why = " (at least two earlier keys to swap)" if min_t >= 2 else ""
        raise PosymError(f"query_pos must lie in [{min_t}, {T - 1}] for prompts of length {T}{why}, got {query_pos!r}")
    return qp


def query_position(query_pos: Any, T: int, min_t: int = 0) -> int:
    """One query position for all prompts (None = the last; negative counts from the end), in ``[min_t, T-1]``."""
    if query_pos is not None and (isinstance(query_pos, bool) or not isinstance(query_pos, (int, np.integer))):
        raise PosymError(f"query_pos must be one integer (None = the last position), got {query_pos!r}")
    return int(query_positions(query_pos, 1, T, min_t)[0])



__all__ = [
    "SWAP_EXCLUDE_FORMS",
    "as_ids",
    "block_calls",
    "block_inputs",
    "ids_length",
    "lse",
    "parse_swap_exclude",
    "query_position",
    "query_positions",
    "rerun_block",
    "rerun_swapped",
    "swap_perms",
    "token_perms",
    "token_swaps",
]
