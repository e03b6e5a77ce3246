"""Positional and symbolic head scores (SPEC §3: Paper B's metric as Paper A's code computes it).

For a prompt of length ``n`` with the query at ``t = n-1`` (or an earlier ``query_pos``), per layer
``ℓ`` and head ``h``:

1. ``D`` = the query's post-softmax attention (softmax over all causal keys ``0..t``, the query's own
   key included), read on keys ``0..t-1``.
2. For every swap ``(i, j)``, ``0 <= i < j <= t-1``: swap the *hidden states* at ``i`` and ``j`` at the
   input of layer ``ℓ`` (residual stream before ``ln_1`` / ``input_layernorm``), keep position ids,
   re-run layer ``ℓ`` and read the query's new attention ``D'``.
3. ``v = (D_i, D_j)``, ``v' = (D'_i, D'_j)``; ``pos = cos(v', v)``, ``sym = cos(v', (D_j, D_i))``.
4. ``α = softmax_over_swaps(|D_i - D_j| / τ)`` (τ = 1e-4 by default; several τ at once allowed).
5. ``s_POS = Σ α·pos``, ``s_SYM = Σ α·sym``.

Two paths compute the same numbers:

* **reference** (:func:`scores_reference`, :func:`scores_blocks_reference`): the literal re-run. A
  forward pre-hook captures each block's call (input hidden states, masks, position embeddings);
  every swapped version of block ``ℓ``'s input is then run through block ``ℓ`` alone (SPEC §3 step 2:
  re-run layer ``ℓ`` only) with the same masks and positions, a hook on the attention module reading
  its (eager) attention weights (:func:`posym.heads.swaps.rerun_block`). Needs
  ``attn_implementation="eager"``.
* **fast exact** (:func:`scores_fast`, :func:`scores_blocks_fast`): layer norm acts per token and the
  query is never swapped, so a swap only exchanges the pre-rotary keys of ``i`` and ``j`` while
  positions stay fixed. From one forward pass (pre-rotary q, k via :mod:`posym.model.adapters`),
  ``M[a, b] = scaling · q_rot(t) · rotate(k_b, a)`` is the logit of content ``b`` placed at position
  ``a``; the unswapped logits are ``diag(M)`` (the query's own logit ``M[t, t]`` included); swap
  ``(i, j)`` replaces entries ``i, j`` by ``M[i, j]`` and ``M[j, i]``. All swaps are evaluated at once
  in float64 in the log domain (:func:`posym.heads.swaps.token_swaps`: the softmax denominator of
  every swap is assembled from prefix / middle / suffix log-cum-sum-exps, so nothing cancels).

Choices where SPEC is silent (documented, tested):

* **The cosine and degenerate heads** (:func:`pair_cos`, ``cosine=``). ``"torch"`` (default) is the
  authors' ``torch.nn.functional.cosine_similarity`` with its ``eps = 1e-8`` clamp on each norm
  (SPEC §3, degenerate case): a head whose query attends (almost) only to itself has near-zero
  ``v``, ``v'`` and scores (0, 0). ``"exact"`` is scale-invariant (posym's rule before 2026-12): if
  both vectors are exactly zero the swap moved no attention, cos = 1; if one is, cos = 0; such a head
  scores (1, 1). Both paths use the same function on their (D, D') values; the fast path (float64)
  first flushes probabilities the model's attention dtype cannot represent (float32: < 7e-46) to 0,
  so both paths see the same zeros. ``swap_mass`` (the query's attention on the swapped keys or
  blocks, summed) lets a user leave such heads out.
* **Centred scores** (``centred=True``, our choice; default off = Paper B's metric). Paper B's
  cosines compare non-negative vectors, so a head whose two units get nearly equal attention scores
  high on both (uniform attention: (1, 1)). The centred variant subtracts, from ``D`` and ``D'``
  alike, the attention each unit would get from a query that spreads the *same* mass uniformly over
  the swappable tokens: with ``M = Σ_b d_b`` (``swap_mass``, before the swap), ``ℓ_b`` the token
  length of unit ``b`` (1 for token swaps) and ``N = Σ_b ℓ_b``, ``u_b = M·ℓ_b / N`` — for token swaps
  ``u = (D_0 + … + D_{t-1}) / t``, the mean of ``D`` over keys ``0..t-1``; for blocks the mean block
  mass when the blocks have equal length. Swapped units have equal length, so ``u_i = u_j = u`` and
  ``pos = cos((D'_i − u, D'_j − u), (D_i − u, D_j − u))``, ``sym = cos((D'_i − u, D'_j − u),
  (D_j − u, D_i − u))``; ``α`` is unchanged (``|D_i − D_j|`` ignores the shift). The same ``u``
  serves before and after the swap: a uniform query's attention is swap-invariant. Scores lie in
  ``[-1, 1]``; an exactly uniform head has centred vectors of norm < 1e-8 and scores (0, 0) under the
  torch cosine (``cosine="exact"``'s zero-vector rule would give it (1, 1), so the combination is
  refused). The centre is mass-matched, not the whole-row ``ℓ_b/(t+1)``: with the latter a head that
  ignores the units (small ``swap_mass``) would again score (1, 1). Near-uniform heads are scored
  on the direction of their deviations from uniform (the cosine is scale-invariant); filter them
  with ``swap_mass`` / ``entropy``. Both paths apply the same centring to their (D, D') values.
* **Entropy**: Shannon entropy of the query's full causal distribution over keys ``0..t`` (it sums to
  1), divided by ``log(t+1)`` — in [0, 1]; 1 = uniform. Min-max normalisation over training (SPEC §3)
  is left to the dynamics code.
* **Multi-query** (``query_pos``): one int for all prompts or one per prompt; ``t`` must be ``>= 2``
  (at least one swap). Keys after ``t`` are causally invisible, so the fast path truncates the prompt.
* **Blocks** (Paper B's LLM version): ``blocks=m`` splits keys ``0..t-1`` into ``m`` contiguous blocks
  of lengths as equal as possible (the first ``t mod m`` blocks one token longer, like
  ``numpy.array_split``); explicit blocks are edges ``[e0, e1, ..., ek]`` or ``(start, stop)`` pairs
  (keys outside every block are never swapped but stay in the softmax). ``d_b`` = the query's mass on
  block ``b``. Only blocks of *equal length* are swapped (token ``s``-th of one with the ``s``-th of
  the other, wholesale); pairs of unequal length are skipped and ``α`` runs over the eligible pairs.
  At least one eligible pair is required.

* **Excluded keys** (``exclude_keys``; posym's addition for attention sinks, SPEC §3): key
  positions never swapped. Their attention stays in the softmax (as keys outside blocks already
  do); token swaps run over the pairs of the other keys (``pairs`` skips them), ``swap_mass`` and the
  centred scores' ``N`` count only swappable keys. A head attending only to excluded keys has
  ``swap_mass ≈ 0`` and, under the torch cosine, scores (0, 0): uninformative. With ``blocks=m`` the
  excluded keys must be a prefix ``0..K-1`` and the blocks split ``K..t-1``; an explicit block holding
  an excluded key is an error. Default ``()`` = SPEC §3 exactly.
* **Long prompts**: a GPT-J's sinusoidal rotary table is rebuilt to the prompt length for the call
  when the prompts exceed it (:meth:`posym.model.adapters.RopeAdapter.covering`) and restored
  exactly afterwards; families computing their rotary on the fly need nothing.
* **Memory**: :func:`scores_fast` and friends reduce each batch of prompts and each layer to scores as
  they come (peak O(batch_size · H · t²) beyond the O(B · L · H) results); only
  :func:`swap_attention` returns every raw per-swap array.

Layout: the result types and the formula (steps 3–5) are in :mod:`posym.heads.score_formula`, the swap
units and both paths (steps 1–2) in :mod:`posym.heads.score_paths`; the drivers and entry points here.

Shapes: ``B`` prompts, ``L`` requested layers, ``H`` query heads, ``n_tau`` temperatures.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from posym.checks import check_positive_int, check_taus, warn_other_task
from posym.errors import PosymError
from posym.resources import require_memory
from posym.heads.score_formula import (
    COSINES,
    DEFAULT_BLOCKS,
    DEFAULT_COSINE,
    DEFAULT_TAU,
    BlockSpec,
    HeadScores,
    SwapAttention,
    attention_entropy,
    check_centred,
    combine_scores,
    pair_cos,
)
from posym.heads.score_paths import check_eager, position_content_logits, resolve_blocks, swap_layers, swap_units
from posym.heads.swaps import as_ids, ids_length, parse_swap_exclude, query_positions
from posym.model.adapters import RopeAdapter, eval_mode, get_adapter, position_tied_qk


# ================================================================================================
# drivers
# ================================================================================================
def _swap_attention(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int], method: str, blocks, batch_size: int,
                    chunk_size: int, exclude_keys: Sequence[int] = ()) -> SwapAttention:
    """Batched over prompts: the raw (D, D') arrays for one query position ``t`` (all kept: O(B·L·H·S))."""
    units = swap_units(t, blocks, exclude_keys)
    parts = []
    with eval_mode(ad.model), torch.no_grad():
        for s in range(0, ids.shape[0], batch_size):
            res = [tuple(x.cpu().numpy() for x in r)
                   for r in swap_layers(ad, ids[s:s + batch_size], t, layers, method, units, chunk_size)]
            parts.append([np.stack([r[c] for r in res], axis=1) for c in range(4)])
    d, dp_i, dp_j, ent = (np.concatenate([p[c] for p in parts]) for c in range(4))
    return SwapAttention(d=d, pairs=units[2], dp_i=dp_i, dp_j=dp_j, entropy=ent, layers=tuple(layers), query_pos=t,
                         blocks=units[1], exclude=units[0])


def _reduced_scores(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int], method: str, blocks, batch_size: int,
                    chunk_size: int, exclude_keys: Sequence[int], taus: tuple[float, ...], cosine: str,
                    centred: bool, out: tuple[np.ndarray, ...]) -> tuple:
    """Scores of prompts ``ids`` (one query position ``t``) written into ``out`` = (s_pos, s_sym, entropy,
    swap_mass) [B, L, ...], reduced per batch and per layer as they come: peak memory
    O(batch_size · H · t²), whatever the number of prompts and layers. Returns the units used."""
    units = swap_units(t, blocks, exclude_keys)
    with eval_mode(ad.model), torch.no_grad():
        for s in range(0, ids.shape[0], batch_size):
            rows = slice(s, s + batch_size)
            for li, r in enumerate(swap_layers(ad, ids[rows], t, layers, method, units, chunk_size)):
                d, dp_i, dp_j, ent = (x.cpu().numpy()[:, None] for x in r)
                sw = SwapAttention(d=d, pairs=units[2], dp_i=dp_i, dp_j=dp_j, entropy=ent, layers=(layers[li],),
                                   query_pos=t, blocks=units[1], exclude=units[0])
                sp, ss = sw.scores(taus, cosine, centred)
                out[0][rows, li], out[1][rows, li] = sp[:, 0], ss[:, 0]
                out[2][rows, li], out[3][rows, li] = ent[:, 0], sw.swap_mass[:, 0]
                del sw, d, dp_i, dp_j, r
    return units


def vocab_size(model) -> int | None:
    """Rows of the model's input embedding (the ids it can read), or None when it has none to ask."""
    model = model.model if isinstance(model, RopeAdapter) else model
    try:
        return int(model.get_input_embeddings().num_embeddings)
    except (AttributeError, TypeError, ValueError):
        return None


def check_vocab(model, ids: Tensor) -> None:
    """PosymError unless every id lies in ``[0, vocab)`` of the model (before any forward pass)."""
    n = vocab_size(model)
    if n is None or not ids.numel():
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= n:
        raise PosymError(f"token id {lo if lo < 0 else hi} lies outside the model's vocabulary of {n} ids "
                         f"(0..{n - 1}); score prompts of the model's own vocabulary")


def _prepare(ad: RopeAdapter, input_ids, layers, method):
    ids = as_ids(input_ids, ad, min_len=3)
    check_vocab(ad, ids)
    layers = ad.check_layers(layers)
    if method == "reference":
        check_eager(ad)
    return ids, layers


def score_memory(n_heads: int, batch: int, n_tokens: int, t: int, n_units: int) -> float:
    """Bytes one batch of ``batch`` prompts of ``n_tokens`` tokens (query at ``t``, ``n_units`` swappable
    units) needs at its peak: the eager forward's float32 logits and weights [batch, H, T, T], the fast
    path's float64 position × content matrix and its copy [batch, H, t+1, t+1], and four float64 values
    per swap pair [batch, H, C(n_units, 2)] (D, D'_i, D'_j, weights) with the pair index."""
    pairs = n_units * (n_units - 1) // 2
    return float(batch * n_heads * (8 * n_tokens ** 2 + 16 * (t + 1) ** 2 + 32 * pairs) + 16 * pairs)


def _check_memory(ad: RopeAdapter, n_prompts: int, n_tokens: int, t: int, blocks, batch_size: int,
                  method: str) -> None:
    """PosymError before any forward when one batch would not fit in memory (:func:`score_memory`)."""
    bs = min(int(batch_size), n_prompts)
    n_units = t if blocks is None else len(resolve_blocks(blocks, t))
    need = score_memory(ad.n_heads, bs, n_tokens, t, n_units)
    hint = ("score shorter sequences, swap blocks instead of tokens (--blocks N, block_scores) or lower "
            "--batch-size" if bs > 1 or blocks is None else "score shorter sequences")
    device = ad.device
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None  # a GPU's own memory
    require_memory(need, f"scoring {bs} prompt{'s' if bs > 1 else ''} of {n_tokens:,} tokens at once "
                         f"({ad.n_heads} heads, {method} path)", hint=hint, available=free)


def _check_sizes(batch_size: int, chunk_size: int) -> None:
    check_positive_int(batch_size, "batch_size")
    check_positive_int(chunk_size, "chunk_size")


def _scores(model, input_ids, taus, query_pos, layers, method, blocks, batch_size, chunk_size,
            cosine: str = DEFAULT_COSINE, centred: bool = False, exclude_keys: Sequence[int] = ()) -> HeadScores:
    taus = check_taus(taus)
    warn_other_task(model, getattr(input_ids, "task", None), "scored")
    centred = check_centred(centred, cosine)
    _check_sizes(batch_size, chunk_size)
    ad = get_adapter(model)
    if method == "fast" and position_tied_qk(ad.model):  # a per-head rotary change: the re-run sees it, the fast path not
        method = "reference"
    with ad.covering(ids_length(input_ids)):
        ids, layers = _prepare(ad, input_ids, layers, method)
        B, T = ids.shape
        qp = query_positions(query_pos, B, T)
        _check_memory(ad, B, T, int(qp.max()), blocks, batch_size, method)  # before the pair lists exist
        for t in np.unique(qp):  # every check before any work
            swap_units(int(t), blocks, exclude_keys)
        L, H, K = len(layers), ad.n_heads, len(taus)
        s_pos = np.empty((B, L, H, K))
        s_sym = np.empty((B, L, H, K))
        ent = np.empty((B, L, H))
        mass = np.empty((B, L, H))
        used_blocks = {}
        excl = ()
        for t in np.unique(qp):
            idx = np.nonzero(qp == t)[0]
            part = tuple(np.empty((len(idx),) + a.shape[1:]) for a in (s_pos, s_sym, ent, mass))
            units = _reduced_scores(ad, ids[torch.as_tensor(idx, device=ids.device)], int(t), layers, method, blocks,
                                    int(batch_size), int(chunk_size), exclude_keys, taus, cosine, centred, part)
            s_pos[idx], s_sym[idx], ent[idx], mass[idx] = part
            excl = units[0]
            if units[1] is not None:
                used_blocks[int(t)] = units[1]
    return HeadScores(s_pos=s_pos, s_sym=s_sym, entropy=ent, taus=taus, layers=tuple(layers), query_pos=qp,
                      kind="token" if blocks is None else "block", method=method, blocks=used_blocks,
                      swap_mass=mass, cosine=cosine, centred=centred, exclude_keys=excl)


def scores_fast(model, input_ids, taus: float | Sequence[float] = (DEFAULT_TAU,), query_pos=None, *,
                layers: Sequence[int] | None = None, batch_size: int = 64, cosine: str = DEFAULT_COSINE,
                centred: bool = False, exclude_keys: Sequence[int] = ()) -> HeadScores:
    """Positional/symbolic scores of every head by the fast exact path (SPEC §3, "Fast exact path").

    model: HF GPT-J / Llama-style / GPT-NeoX causal LM (or a :class:`RopeAdapter`); any attention
    implementation. input_ids: [B, n] ints (tensor, array, or a ``TaskBatch``), unpadded.
    taus: τ or list of τ. query_pos: None (query ``n-1``), an int (negative counts from the end) or
    one int per prompt (multi-query variant: attention truncated to ``[0..t]``, swaps inside
    ``[0, t)``). layers: subset of layers (default all). cosine: ``"torch"`` (the authors') or
    ``"exact"`` (module doc). centred: cosines on attention minus the mass-matched uniform row
    (module doc, Centred scores; default off = Paper B). exclude_keys: key positions never swapped
    (module doc, Excluded keys; default none = SPEC §3). One forward pass per ``batch_size`` prompts.
    Returns :class:`HeadScores` (s_pos, s_sym [B, L, H, n_tau], entropy [B, L, H]). Equals
    :func:`scores_reference` to float tolerance. The model's training mode is restored afterwards.
    Prompts longer than a GPT-J's rotary table are scored with the table extended for the call
    (module doc, Long prompts). Peak memory is O(batch_size · H · t²) float64 beyond the
    O(B · L · H) results (each batch and layer is reduced as it comes; lower ``batch_size`` for long
    prompts).
    """
    return _scores(model, input_ids, taus, query_pos, layers, "fast", None, batch_size, 1, cosine, centred,
                   exclude_keys)


def scores_reference(model, input_ids, taus: float | Sequence[float] = (DEFAULT_TAU,), query_pos=None, *,
                     layers: Sequence[int] | None = None, batch_size: int = 64, chunk_size: int = 2048,
                     cosine: str = DEFAULT_COSINE, centred: bool = False,
                     exclude_keys: Sequence[int] = ()) -> HeadScores:
    """Positional/symbolic scores by the literal re-run (SPEC §3 steps 1–5; the slow reference).

    Same arguments and result as :func:`scores_fast`. For every layer ``ℓ`` all ``C(t, 2)`` swapped
    copies of each prompt's layer-``ℓ`` input hidden states are re-run (``chunk_size`` sequences per
    forward; only block ``ℓ`` re-runs, as SPEC §3 step 2 says). Needs eager attention (PosymError otherwise).
    """
    return _scores(model, input_ids, taus, query_pos, layers, "reference", None, batch_size, chunk_size, cosine,
                   centred, exclude_keys)


def scores_blocks_fast(model, input_ids, blocks: BlockSpec = DEFAULT_BLOCKS, taus: float | Sequence[float] = (DEFAULT_TAU,),
                       query_pos=None, *, layers: Sequence[int] | None = None, batch_size: int = 64,
                       cosine: str = DEFAULT_COSINE, centred: bool = False,
                       exclude_keys: Sequence[int] = ()) -> HeadScores:
    """Block scores (Paper B's LLM version, SPEC §3 last paragraph) by the fast exact path.

    ``blocks``: number of contiguous blocks over keys ``0..t-1`` (default 16; sizes as equal as
    possible) or explicit edges ``[e0, ..., ek]`` / ``(start, stop)`` pairs. ``d_b`` = the query's
    attention mass on block ``b``; swapping two equal-length blocks exchanges their hidden states
    wholesale; unequal-length pairs are not swapped (module doc). Same formulas on ``(d_a, d_b)``.
    ``exclude_keys``: with ``blocks=m`` an excluded prefix ``0..K-1`` is left out and the ``m`` blocks
    split keys ``K..t-1``; an explicit block holding an excluded key is an error (module doc).
    Other arguments and the result as :func:`scores_fast` (``kind="block"``, ``blocks`` recorded).
    """
    return _scores(model, input_ids, taus, query_pos, layers, "fast", blocks, batch_size, 1, cosine, centred,
                   exclude_keys)


def scores_blocks_reference(model, input_ids, blocks: BlockSpec = DEFAULT_BLOCKS,
                            taus: float | Sequence[float] = (DEFAULT_TAU,), query_pos=None, *,
                            layers: Sequence[int] | None = None, batch_size: int = 64,
                            chunk_size: int = 2048, cosine: str = DEFAULT_COSINE,
                            centred: bool = False, exclude_keys: Sequence[int] = ()) -> HeadScores:
    """Block scores by the literal re-run (reference for :func:`scores_blocks_fast`); eager attention only."""
    return _scores(model, input_ids, taus, query_pos, layers, "reference", blocks, batch_size, chunk_size, cosine,
                   centred, exclude_keys)


def swap_attention(model, input_ids, query_pos: int | None = None, *, blocks: BlockSpec | None = None,
                   layers: Sequence[int] | None = None, method: str = "fast", batch_size: int = 64,
                   chunk_size: int = 2048, exclude_keys: Sequence[int] = ()) -> SwapAttention:
    """The raw attention before/after every swap for one common query position (SPEC §3 steps 1–2).

    Returns :class:`SwapAttention` (``d`` [B, L, H, m], ``dp_i``/``dp_j`` [B, L, H, S], ``pairs``
    [S, 2], ``entropy``); ``blocks=None`` gives token swaps. ``method``: ``"fast"`` | ``"reference"``.
    ``exclude_keys``: as :func:`scores_fast` (``d`` still holds every key; ``pairs`` skip them).
    Every prompt's and layer's per-swap arrays are kept (O(B · L · H · S)); :func:`scores_fast`
    reduces them as it goes.
    """
    if method not in ("fast", "reference"):
        raise PosymError(f"method must be 'fast' or 'reference', got {method!r}")
    _check_sizes(batch_size, chunk_size)
    ad = get_adapter(model)
    if method == "fast" and position_tied_qk(ad.model):  # a per-head rotary change: the re-run sees it, the fast path not
        method = "reference"
    with ad.covering(ids_length(input_ids)):
        ids, layers = _prepare(ad, input_ids, layers, method)
        qp = query_positions(query_pos, ids.shape[0], ids.shape[1])
        if len(np.unique(qp)) != 1:
            raise PosymError("swap_attention needs one query position for all prompts (use scores_fast for several)")
        return _swap_attention(ad, ids, int(qp[0]), layers, method, blocks, int(batch_size), int(chunk_size),
                               exclude_keys)


def head_scores(model, input_ids, taus: float | Sequence[float] = (DEFAULT_TAU,), query_pos=None, *,
                blocks: BlockSpec | None = None, method: str = "fast", layers: Sequence[int] | None = None,
                batch_size: int = 64, chunk_size: int = 2048, cosine: str = DEFAULT_COSINE,
                centred: bool = False, exclude_keys: Sequence[int] = ()) -> HeadScores:
    """Dispatch to the four score functions: token (``blocks=None``) or block scores, ``method``
    ``"fast"`` (default) or ``"reference"`` (SPEC §3)."""
    if method not in ("fast", "reference"):
        raise PosymError(f"method must be 'fast' or 'reference', got {method!r}")
    return _scores(model, input_ids, taus, query_pos, layers, method, blocks, batch_size, chunk_size, cosine, centred,
                   exclude_keys)



__all__ = [
    "DEFAULT_TAU",
    "DEFAULT_BLOCKS",
    "COSINES",
    "DEFAULT_COSINE",
    "HeadScores",
    "SwapAttention",
    "combine_scores",
    "pair_cos",
    "attention_entropy",
    "position_content_logits",
    "scores_fast",
    "scores_reference",
    "scores_blocks_fast",
    "scores_blocks_reference",
    "swap_attention",
    "head_scores",
    "check_vocab",
    "parse_swap_exclude",
    "vocab_size",
]

