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

* **Excluded keys** (``exclude_keys``; posym's addition for attention sinks, docs/spec.md §3): key
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

Shapes: ``B`` prompts, ``L`` requested layers, ``H`` query heads, ``n_tau`` temperatures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from posym.checks import check_taus, warn_other_task
from posym.errors import PosymError
from posym.resources import require_memory
from posym.heads.swaps import (
    as_ids,
    ids_length,
    parse_swap_exclude,
    block_calls,
    lse,
    positive_int,
    query_positions,
    rerun_block,
    swap_perms,
    token_swaps,
)
from posym.model.adapters import RopeAdapter, eval_mode, get_adapter, hook_handles

DEFAULT_TAU = 1e-4
DEFAULT_BLOCKS = 16
#: Cosine conventions (module doc): "torch" = the authors' F.cosine_similarity (eps 1e-8), "exact".
COSINES: tuple[str, ...] = ("torch", "exact")
DEFAULT_COSINE = "torch"
TORCH_COS_EPS = 1e-8  # torch.nn.functional.cosine_similarity's default eps

BlockSpec = int | Sequence[int] | Sequence[tuple[int, int]]


# ================================================================================================
# result
# ================================================================================================
@dataclass
class HeadScores:
    """Scores of every (prompt, layer, head, τ) (SPEC §3).

    ``s_pos``, ``s_sym``: float64 [B, L, H, n_tau]; ``entropy``: float64 [B, L, H] (normalised, see
    module doc); ``swap_mass``: float64 [B, L, H], the query's attention on the swappable keys
    ``0..t-1`` (or on the blocks); ``taus`` (n_tau,); ``layers`` (the L model layers, in order);
    ``query_pos`` int [B]; ``kind`` ``"token"`` | ``"block"``; ``method`` ``"fast"`` | ``"reference"``;
    ``cosine`` (module doc); ``blocks``: for block scores, the ``(start, stop)`` blocks used for each
    query position; ``exclude_keys``: the key positions kept out of the swaps (module doc).
    """

    s_pos: np.ndarray
    s_sym: np.ndarray
    entropy: np.ndarray
    taus: tuple[float, ...]
    layers: tuple[int, ...]
    query_pos: np.ndarray
    kind: str = "token"
    method: str = "fast"
    blocks: dict[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    swap_mass: np.ndarray | None = None
    cosine: str = DEFAULT_COSINE
    centred: bool = False
    exclude_keys: tuple[int, ...] = ()

    @property
    def n_prompts(self) -> int:
        return int(self.s_pos.shape[0])

    def to_frame(self, mean_over_prompts: bool = True) -> pd.DataFrame:
        """Tidy table, one row per (layer, head, tau) averaged over prompts (SPEC §3 step 5).

        Columns ``layer, head, tau, s_pos, s_sym, entropy, swap_mass, n_prompts``; with
        ``mean_over_prompts=False`` one row per (prompt, layer, head, tau) with columns
        ``prompt, query_pos, layer, head, tau, s_pos, s_sym, entropy, swap_mass``.
        """
        B, L, H, K = self.s_pos.shape
        layer = np.asarray(self.layers)[None, :, None, None]
        head = np.arange(H)[None, None, :, None]
        tau = np.asarray(self.taus, dtype=float)[None, None, None, :]
        ent = self.entropy[..., None]
        mass = (self.swap_mass if self.swap_mass is not None else np.full_like(self.entropy, np.nan))[..., None]
        if mean_over_prompts:
            shape = (L, H, K)
            return pd.DataFrame({
                "layer": np.broadcast_to(layer[0], shape).ravel(),
                "head": np.broadcast_to(head[0], shape).ravel(),
                "tau": np.broadcast_to(tau[0], shape).ravel(),
                "s_pos": self.s_pos.mean(0).ravel(),
                "s_sym": self.s_sym.mean(0).ravel(),
                "entropy": np.broadcast_to(ent.mean(0), shape).ravel(),
                "swap_mass": np.broadcast_to(mass.mean(0), shape).ravel(),
                "n_prompts": np.full(L * H * K, B, dtype=np.int64),
            })
        shape = (B, L, H, K)
        return pd.DataFrame({
            "prompt": np.broadcast_to(np.arange(B)[:, None, None, None], shape).ravel(),
            "query_pos": np.broadcast_to(np.asarray(self.query_pos)[:, None, None, None], shape).ravel(),
            "layer": np.broadcast_to(layer, shape).ravel(),
            "head": np.broadcast_to(head, shape).ravel(),
            "tau": np.broadcast_to(tau, shape).ravel(),
            "s_pos": self.s_pos.ravel(),
            "s_sym": self.s_sym.ravel(),
            "entropy": np.broadcast_to(ent, shape).ravel(),
            "swap_mass": np.broadcast_to(mass, shape).ravel(),
        })


@dataclass
class SwapAttention:
    """The raw ingredients of the scores for one query position ``t`` (SPEC §3 steps 1–2).

    ``d`` [B, L, H, m]: the query's attention on each unit (key ``0..t-1``, or block) before swapping;
    ``pairs`` int [S, 2]: the swapped unit pairs ``(i, j)``, ``i < j``; ``dp_i``, ``dp_j`` [B, L, H, S]:
    the attention on units ``i`` and ``j`` after swapping them; ``entropy`` [B, L, H]; ``exclude``: the
    key positions kept out of the swaps (module doc, Excluded keys; ``d`` still holds them).
    """

    d: np.ndarray
    pairs: np.ndarray
    dp_i: np.ndarray
    dp_j: np.ndarray
    entropy: np.ndarray
    layers: tuple[int, ...]
    query_pos: int
    blocks: tuple[tuple[int, int], ...] | None = None
    exclude: tuple[int, ...] = ()

    def scores(self, taus: float | Sequence[float] = (DEFAULT_TAU,), cosine: str = DEFAULT_COSINE,
               centred: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(s_pos, s_sym), each [B, L, H, n_tau], by :func:`combine_scores`; ``centred``: on
        attention minus :meth:`uniform_centre` (module doc, Centred scores)."""
        i, j = self.pairs[:, 0], self.pairs[:, 1]
        centre = self.uniform_centre()[..., i] if _check_centred(centred, cosine) else None
        return combine_scores(self.d[..., i], self.d[..., j], self.dp_i, self.dp_j, taus, cosine, centre=centre)

    @property
    def unit_lengths(self) -> np.ndarray:
        """Token length of each unit [m]: 1 per key for token swaps, ``stop - start`` per block."""
        if self.blocks is None:
            ell = np.ones(self.d.shape[-1])
            ell[list(self.exclude)] = 0.0  # excluded keys are not swappable units
            return ell
        return np.array([b - a for a, b in self.blocks], dtype=float)

    def uniform_centre(self) -> np.ndarray:
        """``u_b = M·ℓ_b / N`` [B, L, H, m]: the attention on unit ``b`` of a query spreading the head's
        mass ``M`` on the units (:attr:`swap_mass`) uniformly over their ``N`` tokens (module doc)."""
        ell = self.unit_lengths
        return self.swap_mass[..., None] * (ell / ell.sum())

    @property
    def swap_mass(self) -> np.ndarray:
        """The query's attention on all swappable units (keys ``0..t-1`` but ``exclude``, or the blocks),
        [B, L, H]."""
        if self.blocks is None and self.exclude:
            return np.delete(self.d, list(self.exclude), axis=-1).sum(-1)
        return self.d.sum(-1)


# ================================================================================================
# the formula (SPEC §3 steps 3–5), shared by both paths
# ================================================================================================
def _check_cosine(cosine: str) -> str:
    if cosine not in COSINES:
        raise PosymError(f"unknown cosine {cosine!r}; choose one of {list(COSINES)}")
    return cosine


def pair_cos(x1: Tensor, x2: Tensor, y1: Tensor, y2: Tensor, cosine: str = DEFAULT_COSINE) -> Tensor:
    """Elementwise cosine of the 2-D vectors ``(x1, x2)`` and ``(y1, y2)`` (any equal shapes), float64.

    ``cosine="torch"`` (default, the authors'): ``x·y / (max(|x|, 1e-8) · max(|y|, 1e-8))``, as
    ``torch.nn.functional.cosine_similarity`` — vectors of tiny norm give cos ≈ 0 (SPEC §3).
    ``cosine="exact"``: scale-invariant, computed after scaling each vector by its max-abs (no
    underflow); zero-vector rule: both zero -> 1, exactly one zero -> 0.
    """
    x1, x2, y1, y2 = (torch.as_tensor(a, dtype=torch.float64) for a in (x1, x2, y1, y2))
    if _check_cosine(cosine) == "torch":
        nx = torch.hypot(x1, x2).clamp_min(TORCH_COS_EPS)
        ny = torch.hypot(y1, y2).clamp_min(TORCH_COS_EPS)
        return (x1 / nx) * (y1 / ny) + (x2 / nx) * (y2 / ny)
    sx = torch.maximum(x1.abs(), x2.abs())
    sy = torch.maximum(y1.abs(), y2.abs())
    zx, zy = sx == 0, sy == 0
    sx = torch.where(zx, torch.ones_like(sx), sx)
    sy = torch.where(zy, torch.ones_like(sy), sy)
    a1, a2, b1, b2 = x1 / sx, x2 / sx, y1 / sy, y2 / sy
    nx = torch.hypot(a1, a2)
    ny = torch.hypot(b1, b2)
    c = (a1 * b1 + a2 * b2) / torch.where(zx | zy, torch.ones_like(nx), nx * ny)
    c = c.clamp(-1.0, 1.0)
    c = torch.where(zx & zy, torch.ones_like(c), c)
    return torch.where(zx ^ zy, torch.zeros_like(c), c)


def _check_centred(centred: bool, cosine: str) -> bool:
    if not isinstance(centred, (bool, np.bool_)):
        raise PosymError(f"centred must be True or False, got {centred!r}")
    if centred and _check_cosine(cosine) != "torch":
        raise PosymError("centred scores need cosine='torch' (the exact rule scores a zero centred vector 1)")
    return bool(centred)


def _taus(taus: float | Sequence[float]) -> tuple[float, ...]:
    return check_taus(taus)


def combine_scores(d_i, d_j, dp_i, dp_j, taus: float | Sequence[float] = (DEFAULT_TAU,),
                   cosine: str = DEFAULT_COSINE, *, centre=None) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §3 steps 3–5 over the last axis (the swaps): arrays [..., S] -> (s_pos, s_sym) [..., n_tau].

    ``pos = cos((D'_i, D'_j), (D_i, D_j))``, ``sym = cos((D'_i, D'_j), (D_j, D_i))`` (:func:`pair_cos`
    with ``cosine``), ``α = softmax_S(|D_i - D_j| / τ)``, ``s = Σ_S α·pos`` (resp. ``sym``), float64.
    ``centre`` [..., S] (optional, broadcastable): subtracted from ``D_i, D_j, D'_i, D'_j`` before the
    cosines, not from the gap in ``α`` (centred scores, module doc).
    """
    taus = _taus(taus)
    d_i, d_j, dp_i, dp_j = (torch.as_tensor(np.asarray(a), dtype=torch.float64) for a in (d_i, d_j, dp_i, dp_j))
    gap = (d_i - d_j).abs()
    if centre is not None:
        c = torch.as_tensor(np.asarray(centre), dtype=torch.float64)
        d_i, d_j, dp_i, dp_j = d_i - c, d_j - c, dp_i - c, dp_j - c
    pos = pair_cos(dp_i, dp_j, d_i, d_j, cosine)
    sym = pair_cos(dp_i, dp_j, d_j, d_i, cosine)
    tau = torch.tensor(taus, dtype=torch.float64)
    alpha = torch.softmax(gap[..., None, :] / tau[:, None], dim=-1)  # [..., n_tau, S]
    s_pos = (alpha * pos[..., None, :]).sum(-1)
    s_sym = (alpha * sym[..., None, :]).sum(-1)
    return s_pos.numpy(), s_sym.numpy()


def attention_entropy(p: Tensor) -> Tensor:
    """Attention entropy H / ln K of distributions p [..., K] over the last axis (0 log 0 = 0): the
    ``entropy`` column of ``scores.csv`` (1 = uniform, 0 = one key).

    Returns [...] in [0, 1]; K = 1 gives 0.
    """
    p = torch.as_tensor(p, dtype=torch.float64)
    k = p.shape[-1]
    h = -torch.special.xlogy(p, p).sum(-1)
    return h / math.log(k) if k > 1 else torch.zeros_like(h)


# ================================================================================================
# argument handling
# ================================================================================================
def _resolve_blocks(blocks: BlockSpec, t: int) -> tuple[tuple[int, int], ...]:
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
    """:func:`_resolve_blocks` with excluded keys: ``blocks=m`` splits the keys after an excluded prefix
    ``0..K-1`` (other exclusions are refused); an explicit block holding an excluded key is refused."""
    if not exclude:
        return _resolve_blocks(blocks, t)
    if isinstance(blocks, (int, np.integer)):
        k = len(exclude)
        if exclude != tuple(range(k)):
            raise PosymError(f"blocks={int(blocks)} with excluded keys {list(exclude)}: only an excluded prefix "
                             "0..K-1 can be split around; give explicit blocks")
        if not 2 <= int(blocks) <= t - k:
            raise PosymError(f"blocks={int(blocks)}: need 2 <= blocks <= {t - k} (the keys before the query "
                             f"at position {t} after the {k} excluded)")
        out = _resolve_blocks(int(blocks), t - k)
        return tuple((a + k, b + k) for a, b in out)
    out = _resolve_blocks(blocks, t)
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


def _check_eager(ad: RopeAdapter) -> None:
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


# ================================================================================================
# drivers
# ================================================================================================
def _units(t: int, blocks, exclude_keys: Sequence[int]) -> tuple:
    """``(exclude, blocks or None, pairs [S, 2], keep)`` for the query at ``t`` (module doc)."""
    excl = _resolve_exclude(exclude_keys, t)
    if blocks is not None:
        bl = _excluded_blocks(blocks, t, excl)
        return excl, bl, _block_pairs(bl), None
    pairs, keep = _token_pairs(t, excl)
    return excl, None, pairs, keep


def _swap_layers(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int], method: str, units: tuple,
                 chunk_size: int) -> Iterator[tuple]:
    """One batch of prompts: the raw (D, D'_i, D'_j, entropy) tensors of each layer in turn."""
    _, bl, pairs, keep = units
    if bl is None:
        return (_token_swaps_fast(ad, ids, t, layers, keep) if method == "fast"
                else _token_swaps_reference(ad, ids, t, layers, pairs, chunk_size))
    return (_block_swaps_fast(ad, ids, t, layers, bl, pairs) if method == "fast"
            else _block_swaps_reference(ad, ids, t, layers, bl, pairs, chunk_size))


def _swap_attention(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int], method: str, blocks, batch_size: int,
                    chunk_size: int, exclude_keys: Sequence[int] = ()) -> SwapAttention:
    """Batched over prompts: the raw (D, D') arrays for one query position ``t`` (all kept: O(B·L·H·S))."""
    units = _units(t, blocks, exclude_keys)
    parts = []
    with eval_mode(ad.model), torch.no_grad():
        for s in range(0, ids.shape[0], batch_size):
            res = [tuple(x.cpu().numpy() for x in r)
                   for r in _swap_layers(ad, ids[s:s + batch_size], t, layers, method, units, chunk_size)]
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
    units = _units(t, blocks, exclude_keys)
    with eval_mode(ad.model), torch.no_grad():
        for s in range(0, ids.shape[0], batch_size):
            rows = slice(s, s + batch_size)
            for li, r in enumerate(_swap_layers(ad, ids[rows], t, layers, method, units, chunk_size)):
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
        _check_eager(ad)
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
    n_units = t if blocks is None else len(_resolve_blocks(blocks, t))
    need = score_memory(ad.n_heads, bs, n_tokens, t, n_units)
    hint = ("score shorter sequences, swap blocks instead of tokens (--blocks N, block_scores) or lower "
            "--batch-size" if bs > 1 or blocks is None else "score shorter sequences")
    device = ad.device
    free = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None  # a GPU's own memory
    require_memory(need, f"scoring {bs} prompt{'s' if bs > 1 else ''} of {n_tokens:,} tokens at once "
                         f"({ad.n_heads} heads, {method} path)", hint=hint, available=free)


def _check_sizes(batch_size: int, chunk_size: int) -> None:
    positive_int(batch_size, "batch_size")
    positive_int(chunk_size, "chunk_size")


def _scores(model, input_ids, taus, query_pos, layers, method, blocks, batch_size, chunk_size,
            cosine: str = DEFAULT_COSINE, centred: bool = False, exclude_keys: Sequence[int] = ()) -> HeadScores:
    taus = _taus(taus)
    warn_other_task(model, getattr(input_ids, "task", None), "scored")
    centred = _check_centred(centred, cosine)
    _check_sizes(batch_size, chunk_size)
    ad = get_adapter(model)
    with ad.covering(ids_length(input_ids)):
        ids, layers = _prepare(ad, input_ids, layers, method)
        B, T = ids.shape
        qp = query_positions(query_pos, B, T)
        _check_memory(ad, B, T, int(qp.max()), blocks, batch_size, method)  # before the pair lists exist
        for t in np.unique(qp):  # every check before any work
            _units(int(t), blocks, exclude_keys)
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
