"""RoPE frequency analysis (SPEC §4, first part; Paper A Table 1, Fig. 4B, Fig. 8).

**Decomposition.** With RoPE, the logit of the query at ``t`` (default ``n-1``) for key ``j`` is a sum
of ``K = rotary_dim/2`` per-frequency terms plus, for partial rotary, one non-rotary term::

    logit_j = Σ_k λ^(k)_j + λ^(nr)_j,    λ^(k)_j = scaling · q^(k)ᵀ ρ(g_k)^(t-j) k_j^(k)

where ``ρ(g)`` is the 2-D rotation by ``-g`` in the model's orientation (``λ`` depends on positions
only through ``t - j``), ``q^(k)``, ``k_j^(k)`` are the 2-D slices of the *pre-rotary* query/key on the model's own pair
of frequency ``k`` (GPT-J interleaved dims ``(2k-2, 2k-1)``; Llama/NeoX half-split dims
``(k-1, k-1 + r/2)``) and ``λ^(nr)_j = scaling · q[r:] · k_j[r:]`` (dims beyond ``rotary_dim``).
It is computed as ``scaling · Σ_{d ∈ pair k} q_rot(t)_d · k_rot(j)_d`` with the model's own rotary
(:meth:`RopeAdapter.rotate`: its cos/sin table, convention and any ``attention_scaling``), in float64,
so the terms sum to the model's pre-softmax logits (tested ≤ 1e-5 for GPT-J full/partial rotary,
Llama GQA, GPT-NeoX, Gemma-3's per-layer RoPE and SmolLM3's NoPE layers). Each layer uses its own
rotary (:meth:`RopeAdapter.layer_inv_freq`): the ``angle`` of a term is the layer's (0 on a NoPE layer).
Known answers per layout (``tests/heads/test_frequencies_layouts.py``): a head whose q/k live on one
pair in the family's own convention puts all its use on that pair — GPT-J, Cohere and GLM
interleaved pairs, Llama / Qwen3 / Gemma-3 / GPT-NeoX rotate-half, partial rotary (GPT-J, GPT-NeoX,
GLM), Gemma-3's sliding/full bases, Qwen3 / Gemma-3 q/k read after the norm, Llama GQA key heads —
and a built previous-token head's dominant ID is 1.

**Frequency IDs.** ``freq_id = k = 1..K`` in the order of the model's ``inv_freq`` (ID 1 = fastest,
angle ``base^0 = 1`` for the standard RoPE); the non-rotary term, when present, gets
``freq_id = K + 1`` with ``angle = 0`` and ``rotary = False`` (our choice: a rotation by angle 0 is
exactly a non-rotating term). Tensor index ``i`` along the frequency axis is ``freq_id - 1``.

Choices where SPEC is silent (our choices, documented and parameterised):

* **Per-frequency heads** (:func:`frequency_scores`): each term (and the non-rotary term) is treated
  as a head of its own — the query's attention is ``softmax_j(λ^(k)_j)`` over keys ``0..t`` (query's
  own key included, scaled as the logits are, no soft-capping), and SPEC §3's swap metric is computed
  from the per-frequency content×position matrix ``M^(k)[a, b] = λ^(k)`` of content ``b`` placed at
  position ``a``; swaps, α-weights and cosines exactly as :func:`posym.heads.scores.combine_scores`.
  A literal reference (``method="reference"``: swap the hidden states at the layer input, re-capture
  the keys, recompute the terms) is kept and tested against the fast path.
* **Frequency use** (:func:`frequency_use`, SPEC §4 "our choice"): ``u_k = mean over prompts of
  max_j |λ^(k)_{t,j}|``, ``j = 0..t`` (the query's own key included); ``weighting="centered"``
  uses ``max_j |λ_j - mean_j λ_j|`` instead (a term constant over keys cannot move attention).
  ``use_frac`` is ``u_k / Σ u`` over the rotary frequencies (NaN on the non-rotary row). Weighted ID ``Σ k·u_k / Σ u_k`` and the
  dominant ID ``argmax u_k`` use rotary frequencies only.
* **Soft-capping / sliding windows** (Gemma2, Mistral): terms are pre-soft-cap (the cap acts on the
  sum). :func:`frequency_logits` returns the raw terms for every key; :func:`frequency_use` and
  :func:`frequency_scores` drop keys outside the model's window.
* **Q/K geometry** (:func:`qk_geometry`, Fig. 4B): the query at ``t`` and the keys of all positions
  are projected onto one frequency plane (default: the head's dominant frequency) *after* rotating
  each by its own position (``R(t) q``, ``R(j) k_j``); the pre-rotary coordinates are kept too. A
  query's ``value`` is its integer offset (number task), its right letter index 0..7 (letter task),
  or its token id (no task); a key's ``value`` is its position.
* the verb ``posym freqs`` (``posym.verbs.freqs``) analyses the first ``n`` test prompts; the geometry figure
  uses the (layer, head) with the smallest weighted ID (or the given layer and its smallest-ID head).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from posym.errors import PosymError
from posym.checks import check_taus as _taus
from posym.heads.scores import DEFAULT_TAU, combine_scores
from posym.heads.swaps import as_ids, block_inputs, positive_int, query_position, rerun_swapped, token_perms, token_swaps
from posym.model import rope
from posym.model.adapters import RopeAdapter, eval_mode, get_adapter

DEFAULT_N = 512
#: ``u_k`` per prompt: ``"max_abs"`` = ``max_j |λ_j|`` (SPEC §4, default); ``"centered"`` =
#: ``max_j |λ_j - mean_j λ_j|`` (our alternative: drops the part of a term that is constant over keys,
#: to which the softmax is blind).
WEIGHTINGS = ("max_abs", "centered")
DEFAULT_GEOMETRY_PROMPTS = 128


# ================================================================================================
# argument handling
# ================================================================================================
def _prepare(model, input_ids, query_pos, layers, batch_size,
             min_t: int = 0) -> tuple[RopeAdapter, Tensor, int, list[int], int]:
    """Checked ``(adapter, ids [B, T], query position t, layers, batch_size)`` (:mod:`posym.heads.swaps`);
    ``min_t = 2``: at least one swap before the query."""
    ad = get_adapter(model)
    ids = as_ids(input_ids, ad, min_len=min_t + 1)
    t = query_position(query_pos, ids.shape[1], min_t=min_t)
    return ad, ids, t, ad.check_layers(layers), positive_int(batch_size, "batch_size")


def n_terms(model) -> int:
    """Number of terms per logit: ``rotary_dim/2`` (+ 1 non-rotary term for partial rotary)."""
    ad = get_adapter(model)
    return ad.rotary_dim // 2 + (ad.head_dim > ad.rotary_dim)


def frequency_ids(model, layer: int | None = None) -> pd.DataFrame:
    """One row per term: ``freq_id`` (1 = fastest), ``angle`` (radians per position at ``layer``; 0
    on a NoPE layer), ``rotary``, ``dim_a``, ``dim_b`` (the head dims of the pair in the model's
    convention; -1 for the non-rotary term, which covers dims ``rotary_dim..head_dim-1``).
    ``layer=None`` needs a model whose layers share one rotary (else PosymError; Gemma-3: pass it)."""
    ad = get_adapter(model)
    K, r = ad.rotary_dim // 2, ad.rotary_dim
    k = np.arange(K)
    a, b = (2 * k, 2 * k + 1) if ad.pair_convention == "interleaved" else (k, k + r // 2)
    df = pd.DataFrame({"freq_id": k + 1, "angle": ad.layer_inv_freq(layer).numpy().astype(float), "rotary": True,
                       "dim_a": a, "dim_b": b})
    if ad.head_dim > r:
        df.loc[K] = dict(freq_id=K + 1, angle=0.0, rotary=False, dim_a=-1, dim_b=-1)
    return df.astype({"freq_id": int, "angle": float, "rotary": bool, "dim_a": int, "dim_b": int})


def layer_angles(ad: RopeAdapter, layers: Sequence[int]) -> np.ndarray:
    """The ``angle`` of every term (:func:`frequency_ids`) at each of ``layers``: float64 [L, K(+1)]."""
    return np.stack([frequency_ids(ad, l)["angle"].to_numpy() for l in layers])


# ================================================================================================
# decomposition
# ================================================================================================
def _pair_sum(prod: Tensor, ad: RopeAdapter) -> Tensor:
    """Per-dim products [..., hd] -> per-term sums [..., K(+1)] (pairs of the model's convention)."""
    r = ad.rotary_dim
    terms = rope.to_pairs(prod, ad.pair_convention, r).sum(-1)
    if ad.head_dim > r:
        terms = torch.cat((terms, prod[..., r:].sum(-1, keepdim=True)), dim=-1)
    return terms


def frequency_terms_from_qk(ad: RopeAdapter, q: Tensor, k: Tensor, t: int, layer: int | None = None) -> Tensor:
    """Per-frequency logit terms of one query from pre-rotary vectors of ``layer`` (its rotary).

    q [B, H, hd] (the query at position ``t``), k [B, Hkv, T, hd] (keys at positions ``0..T-1``).
    Returns float64 [B, H, K(+1), T]: ``terms[..., i, j]`` = term ``freq_id = i+1`` of the logit of
    key ``j``; summed over ``i`` it is ``scaling · q_rot(t) · k_rot(j)`` (the pre-softmax logit).
    """
    ad = get_adapter(ad)
    T = k.shape[-2]
    qr = ad.rotate(q.double()[:, :, None, :], [t], layer)  # [B, H, 1, hd]
    kr = ad.rotate(k.double(), torch.arange(T, device=k.device), layer)[:, ad.kv_index.to(k.device)]  # [B, H, T, hd]
    return _pair_sum(qr * kr * ad.scaling, ad).transpose(-1, -2)


def frequency_content_position_logits(ad: RopeAdapter, q: Tensor, k: Tensor, t: int, layer: int | None = None) -> Tensor:
    """Per-frequency content×position matrices of ``layer`` (SPEC §3's ``M`` split by frequency).

    q [B, H, hd] pre-rotary query at ``t``; k [B, Hkv, t+1, hd] pre-rotary keys ``0..t``. Returns
    float64 [B, H, K(+1), t+1, t+1]: ``[..., i, a, b]`` = term ``i`` of the logit of key content ``b``
    placed at position ``a`` (diagonal = :func:`frequency_terms_from_qk`; summed over ``i`` it is
    :func:`posym.heads.scores.position_content_logits` before soft-capping).
    """
    ad = get_adapter(ad)
    n = k.shape[-2]
    pos = torch.arange(n, device=k.device)
    qr = ad.rotate(q.double()[:, :, None, :], [t], layer)
    qa = ad.rotate_t(qr.expand(-1, -1, n, -1), pos, layer) * ad.scaling  # row a: scaling · R(a)ᵀ q_rot(t)
    kx = k.double()[:, ad.kv_index.to(k.device)]  # [B, H, n, hd]
    r = ad.rotary_dim
    qp = rope.to_pairs(qa, ad.pair_convention, r)  # [B, H, n, K, 2]
    kp = rope.to_pairs(kx, ad.pair_convention, r)
    m = torch.einsum("bhakc,bhjkc->bhkaj", qp, kp)
    if ad.head_dim > r:
        nr = torch.matmul(qa[..., r:], kx[..., r:].transpose(-1, -2))  # [B, H, n, n]
        m = torch.cat((m, nr[:, :, None]), dim=2)
    return m


def _capture(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int]) -> tuple[Tensor, Tensor]:
    """Pre-rotary q at ``t`` [L, B, H, hd] and keys ``0..t`` [L, B, Hkv, t+1, hd]."""
    q, k = ad.capture_qk(ids[:, : t + 1], layers)
    return q[:, :, :, t], k


@torch.no_grad()
def frequency_logits(model, input_ids, query_pos: int | None = None, layers: Sequence[int] | None = None, *,
                     batch_size: int = 64) -> Tensor:
    """Per-frequency decomposition of the query's logits (SPEC §4).

    model: an HF causal LM of any supported family (docs/models.md) or a RopeAdapter. input_ids: [B, n] ints
    (tensor, array or TaskBatch). query_pos: None (``n-1``) or one int (negative from the end).
    Returns float64 [L, B, H, K(+1), t+1] (``t`` the query position, keys ``0..t``): term ``freq_id-1``
    of the pre-softmax, scaled logit of each key; the sum over the term axis is the model's logit
    (pre soft-cap). The extra last term exists only for partial rotary (see :func:`frequency_ids`).
    """
    ad, ids, t, layers, bs = _prepare(model, input_ids, query_pos, layers, batch_size)
    parts = []
    for s in range(0, ids.shape[0], bs):
        q, k = _capture(ad, ids[s:s + bs], t, layers)
        parts.append(torch.stack([frequency_terms_from_qk(ad, q[i], k[i], t, l) for i, l in enumerate(layers)]))
    return torch.cat(parts, dim=1)


def _window_mask(ad: RopeAdapter, layer: int, t: int, device) -> Tensor | None:
    """Bool [t+1]: keys outside ``layer``'s sliding window (None when it has none)."""
    win = ad.sliding_window(layer)
    if win is None:
        return None
    return (t - torch.arange(t + 1, device=device)) >= win


# ================================================================================================
# per-frequency scores
# ================================================================================================
def _masked_m(ad: RopeAdapter, q: Tensor, k: Tensor, t: int, layer: int) -> Tensor:
    m = frequency_content_position_logits(ad, q, k, t, layer)
    win = _window_mask(ad, layer, t, m.device)
    if win is not None:
        m = m.masked_fill(win[:, None], float("-inf"))  # positions a outside the window
    return m


def _masked_terms(ad: RopeAdapter, store: dict[str, Tensor], t: int, layer: int) -> Tensor:
    """Per-frequency terms [B, H, F, t+1] of the query at ``t`` from one layer's captured q/k, ``-inf``
    outside the layer's window."""
    terms = frequency_terms_from_qk(ad, store["q"][:, :, t], store["k"], t, layer)
    win = _window_mask(ad, layer, t, terms.device)
    return terms if win is None else terms.masked_fill(win, float("-inf"))


def _swap_fast(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int]) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Per layer: (D [B, H, F, t], D'_i, D'_j [B, H, F, S]) of every frequency head (:func:`token_swaps`)."""
    q, k = _capture(ad, ids, t, layers)
    out = []
    for i, l in enumerate(layers):
        lg, dp_i, dp_j = token_swaps(_masked_m(ad, q[i], k[i], t, l), t)
        out.append((torch.softmax(lg, dim=-1)[..., :t], dp_i, dp_j))
    return out


def _swap_reference(ad: RopeAdapter, ids: Tensor, t: int, layers: list[int],
                    chunk_size: int) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Literal path: swap the hidden states at the input of layer ℓ (keep positions), re-capture the
    pre-rotary q/k of layer ℓ, recompute the terms of the query and soft-max each term alone."""
    ids = ids[:, : t + 1]
    I, J = (x.tolist() for x in torch.triu_indices(t, t, 1))
    ar = torch.arange(len(I))
    perms = token_perms(ids.shape[1], t, ids.device)
    with block_inputs(ad, layers) as hidden:
        stores = ad.capture(ids, layers)
    out = []
    for l in layers:
        d = torch.softmax(_masked_terms(ad, stores[l], t, l), dim=-1)[..., :t]
        rows = rerun_swapped(ad, ids, hidden[l], perms, l, chunk_size,
                             lambda x: torch.softmax(_masked_terms(ad, ad.capture(x, [l])[l], t, l), dim=-1))
        # rows [B, S, H, F, t+1]; advanced indices separated by slices: the swap axis comes first -> [S, B, H, F]
        dp_i = rows[:, ar, ..., I].permute(1, 2, 3, 0)
        dp_j = rows[:, ar, ..., J].permute(1, 2, 3, 0)
        out.append((d, dp_i, dp_j))
    return out


@torch.no_grad()
def frequency_swap_attention(model, input_ids, query_pos: int | None = None, *,
                             layers: Sequence[int] | None = None, method: str = "fast", batch_size: int = 32,
                             chunk_size: int = 2048) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Raw per-frequency attention before/after every swap (SPEC §3 steps 1–2, per frequency head).

    Returns ``(d [B, L, H, F, t], dp_i [B, L, H, F, S], dp_j [B, L, H, F, S], pairs [S, 2])`` in
    float64 (``F`` = K(+1) terms, swaps ``(i, j)``, ``i < j < t``). ``method``: ``"fast"`` (one
    forward per batch, content×position matrices) or ``"reference"`` (literal hidden-state swaps).
    """
    if method not in ("fast", "reference"):
        raise PosymError(f"method must be 'fast' or 'reference', got {method!r}")
    ad, ids, t, layers, bs = _prepare(model, input_ids, query_pos, layers, batch_size, min_t=2)
    cs = positive_int(chunk_size, "chunk_size")
    parts = []
    with eval_mode(ad.model):
        for s in range(0, ids.shape[0], bs):
            chunk = ids[s:s + bs]
            res = _swap_fast(ad, chunk, t, layers) if method == "fast" else _swap_reference(ad, chunk, t, layers, cs)
            parts.append([torch.stack([r[c] for r in res], dim=1).cpu().numpy() for c in range(3)])
    d, dp_i, dp_j = (np.concatenate([p[c] for p in parts]) for c in range(3))
    pairs = torch.triu_indices(t, t, 1).T.numpy()
    return d, dp_i, dp_j, pairs


def frequency_scores(model, input_ids, taus: float | Sequence[float] = (DEFAULT_TAU,), query_pos: int | None = None,
                     *, layers: Sequence[int] | None = None, method: str = "fast", batch_size: int = 32,
                     chunk_size: int = 2048, mean_over_prompts: bool = True) -> pd.DataFrame:
    """Positional/symbolic scores of every frequency treated as its own head (module doc).

    Returns one row per (layer, head, freq_id, tau) averaged over prompts, columns ``layer, head,
    freq_id, angle, rotary, tau, s_pos, s_sym, n_prompts`` (``mean_over_prompts=False``: one row per
    prompt, with a ``prompt`` column instead of ``n_prompts``). ``method="reference"`` runs the
    literal swaps (slow; for tests).
    """
    taus = _taus(taus)
    d, dp_i, dp_j, pairs = frequency_swap_attention(model, input_ids, query_pos, layers=layers, method=method,
                                                    batch_size=batch_size, chunk_size=chunk_size)
    i, j = pairs[:, 0], pairs[:, 1]
    s_pos, s_sym = combine_scores(d[..., i], d[..., j], dp_i, dp_j, taus)  # [B, L, H, F, n_tau]
    ad = get_adapter(model)
    layers = ad.check_layers(layers)
    info = frequency_ids(ad, layers[0])
    angles = layer_angles(ad, layers)  # [L, F]
    B, L, H, F, NT = s_pos.shape
    if mean_over_prompts:
        s_pos, s_sym, shape = s_pos.mean(0), s_sym.mean(0), (L, H, F, NT)
        lead = {}
    else:
        shape = (B, L, H, F, NT)
        lead = {"prompt": np.broadcast_to(np.arange(B)[:, None, None, None, None], shape).ravel()}
    off = len(shape) - 4

    def bc(x, axis):
        sh = [1] * len(shape)
        sh[off + axis] = -1
        return np.broadcast_to(np.asarray(x).reshape(sh), shape).ravel()

    df = pd.DataFrame({
        **lead,
        "layer": bc(layers, 0), "head": bc(np.arange(H), 1), "freq_id": bc(info["freq_id"], 2),
        "angle": np.broadcast_to(angles[:, None, :, None].reshape((1,) * off + (L, 1, F, 1)), shape).ravel(),
        "rotary": bc(info["rotary"], 2), "tau": bc(taus, 3),
        "s_pos": s_pos.ravel(), "s_sym": s_sym.ravel(),
    })
    if mean_over_prompts:
        df["n_prompts"] = B
    return df


# ================================================================================================
# frequency use (SPEC §4, our weighting)
# ================================================================================================
@torch.no_grad()
def frequency_use_array(model, input_ids, query_pos: int | None = None, *, layers: Sequence[int] | None = None,
                        batch_size: int = 64, weighting: str = "max_abs") -> np.ndarray:
    """``max_j |λ^(k)_{t,j}|`` per prompt: float64 [B, L, H, K(+1)] (keys ``0..t`` inside any window);
    ``weighting="centered"`` subtracts each term's mean over those keys first (see :data:`WEIGHTINGS`)."""
    if weighting not in WEIGHTINGS:
        raise PosymError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    ad, ids, t, layers, bs = _prepare(model, input_ids, query_pos, layers, batch_size)
    parts = []
    with eval_mode(ad.model):
        for s in range(0, ids.shape[0], bs):
            q, k = _capture(ad, ids[s:s + bs], t, layers)
            per_layer = []
            for i, l in enumerate(layers):
                a = frequency_terms_from_qk(ad, q[i], k[i], t, l)
                win = _window_mask(ad, l, t, a.device)
                keep = torch.ones(t + 1, dtype=torch.bool, device=a.device) if win is None else ~win
                if weighting == "centered":
                    a = a - a[..., keep].mean(-1, keepdim=True)
                per_layer.append(a.abs().masked_fill(~keep, 0.0).amax(-1))
            parts.append(torch.stack(per_layer, dim=1).cpu().numpy())
    return np.concatenate(parts)


def frequency_use(model, input_ids, query_pos: int | None = None, *, layers: Sequence[int] | None = None,
                  batch_size: int = 64, weighting: str = "max_abs") -> pd.DataFrame:
    """Frequency use ``u_k`` (SPEC §4): one row per (layer, head, freq_id), columns ``layer, head,
    freq_id, angle, rotary, use, use_frac, n_prompts`` (``use_frac`` = share among rotary terms,
    NaN on the non-rotary row). ``weighting``: see :data:`WEIGHTINGS` (default SPEC's ``max_abs``)."""
    ad = get_adapter(model)
    layers = ad.check_layers(layers)
    per = frequency_use_array(ad, input_ids, query_pos, layers=layers, batch_size=batch_size, weighting=weighting)
    return use_frame(ad, per.mean(0), per.shape[0], layers)


def use_frame(ad: RopeAdapter, use: np.ndarray, n_prompts: int, layers: Sequence[int] | None = None) -> pd.DataFrame:
    """Mean frequency use ``use [L, H, F]`` -> the :func:`frequency_use` table (``use_frac`` = share
    among rotary terms, NaN on the non-rotary row); ``layers`` labels the L axis (default 0..L-1)."""
    L, H, F = use.shape
    layers = np.arange(L) if layers is None else np.asarray(layers)
    info = frequency_ids(ad, int(layers[0]))
    rot = info["rotary"].to_numpy()
    tot = use[..., rot].sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(rot, use / np.where(tot > 0, tot, np.nan), np.nan)
    shape = (L, H, F)
    return pd.DataFrame({
        "layer": np.broadcast_to(layers[:, None, None], shape).ravel(),
        "head": np.broadcast_to(np.arange(H)[None, :, None], shape).ravel(),
        "freq_id": np.broadcast_to(info["freq_id"].to_numpy()[None, None], shape).ravel(),
        "angle": np.broadcast_to(layer_angles(ad, layers.tolist())[:, None, :], shape).ravel(),
        "rotary": np.broadcast_to(rot[None, None], shape).ravel(),
        "use": use.ravel(),
        "use_frac": frac.ravel(),
        "n_prompts": n_prompts,
    })


TABLE_COLUMNS = ["layer", "head", "weighted_id", "weighted_angle", "dominant_id", "dominant_angle", "nonrotary_share"]


def weighted_frequency_id(use_df: pd.DataFrame) -> pd.DataFrame:
    """Paper A Table 1 from a :func:`frequency_use` table: one row per (layer, head).

    ``weighted_id = Σ k·u_k / Σ u_k`` and ``dominant_id = argmax_k u_k`` over rotary frequencies;
    ``weighted_angle`` is the angle of the rounded weighted ID (the paper's "frequency" column),
    ``dominant_angle`` that of the dominant ID; ``nonrotary_share = u_nr / (Σ u_k + u_nr)`` (0 for
    full rotary). A head whose rotary use is all zero gets NaN IDs.
    """
    need = {"layer", "head", "freq_id", "angle", "use"}
    missing = need - set(use_df.columns)
    if missing:
        raise PosymError(f"frequency-use table lacks column(s) {sorted(missing)}")
    rotary = use_df["rotary"].astype(bool) if "rotary" in use_df else pd.Series(True, index=use_df.index)
    rows = []
    for (layer, head), g in use_df.groupby(["layer", "head"], sort=True):
        rg = g[rotary.loc[g.index]].sort_values("freq_id")
        ids, u = rg["freq_id"].to_numpy(dtype=float), rg["use"].to_numpy(dtype=float)
        angle = dict(zip(rg["freq_id"].astype(int), rg["angle"].astype(float)))
        tot = u.sum()
        nr = g.loc[~rotary.loc[g.index], "use"].sum()
        if tot > 0 and np.isfinite(tot):
            w = float((ids * u).sum() / tot)
            dom = int(ids[int(np.argmax(u))])
            wa, da = angle.get(int(round(w)), math.nan), angle[dom]
        else:
            w, dom, wa, da = math.nan, -1, math.nan, math.nan
        share = float(nr / (tot + nr)) if tot + nr > 0 else 0.0
        rows.append(dict(layer=int(layer), head=int(head), weighted_id=w, weighted_angle=wa, dominant_id=dom,
                         dominant_angle=da, nonrotary_share=share))
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


# ================================================================================================
# Q/K geometry (Fig. 4B)
# ================================================================================================
def query_values(input_ids: np.ndarray, t: int, task: str | None) -> np.ndarray:
    """Colour value of each prompt's query token (module doc): number task — its integer offset
    (NaN if the token is a letter); letter task — its right letter index 0..7 (NaN for a
    letter-number token); no task — the token id."""
    from posym.tasks.vocab import INT_OFFSET, LL_OFFSET, N_INTEGERS, N_LETTERS

    tok = np.asarray(input_ids)[:, t].astype(np.int64)
    if task == "number":
        v = tok - INT_OFFSET
        return np.where((v >= 1) & (v <= N_INTEGERS), v, np.nan).astype(float)
    if task == "letter":
        x = tok - LL_OFFSET
        return np.where((x >= 0) & (x < N_LETTERS * N_LETTERS), x % N_LETTERS, np.nan).astype(float)
    return tok.astype(float)


@torch.no_grad()
def qk_geometry(model, input_ids, layer: int, head: int = 0, freq_id: int | None = None, task: str | None = None,
                query_pos: int | None = None) -> pd.DataFrame:
    """Points of Fig. 4B: the query at ``t`` and the keys ``0..t`` of every prompt in one RoPE plane.

    ``freq_id`` defaults to the head's dominant frequency (largest use on these prompts). Columns:
    ``prompt, kind ("query"|"key"), position, token, value, x, y`` (after rotating by the point's
    own position), ``x_pre, y_pre`` (pre-rotary), plus ``layer, head, freq_id, angle``. ``value``:
    see :func:`query_values` for queries; the position for keys.
    """
    ad = get_adapter(model)
    ids = as_ids(input_ids, ad)
    t = query_position(query_pos, ids.shape[1])
    layer = ad.check_layers([layer])[0]
    if isinstance(head, bool) or not 0 <= int(head) < ad.n_heads:
        raise PosymError(f"head {head} out of range [0, {ad.n_heads})")
    head = int(head)
    K = ad.rotary_dim // 2
    if freq_id is None:
        use = frequency_use_array(ad, ids, t, layers=[layer])[:, 0, head, :K].mean(0)
        freq_id = int(np.argmax(use)) + 1
    if isinstance(freq_id, bool) or not 1 <= int(freq_id) <= K:
        raise PosymError(f"freq_id must be a rotary frequency in [1, {K}], got {freq_id!r}")
    f = int(freq_id) - 1
    with eval_mode(ad.model):
        q, k = _capture(ad, ids, t, [layer])
    q, k = q[0][:, head].double(), k[0][:, ad.kv_head_of(head)].double()  # [B, hd], [B, t+1, hd]
    pos = torch.arange(t + 1, device=k.device)
    qr = ad.rotate(q[:, None], [t], layer)[:, 0]
    kr = ad.rotate(k, pos, layer)

    def plane(x):
        return rope.to_pairs(x, ad.pair_convention, ad.rotary_dim)[..., f, :].cpu().numpy()

    B = ids.shape[0]
    ids_np = ids.cpu().numpy()
    qp, qpre, kp, kpre = plane(qr), plane(q), plane(kr), plane(k)  # [B, 2], [B, t+1, 2]
    queries = pd.DataFrame({"prompt": np.arange(B), "kind": "query", "position": t, "token": ids_np[:, t],
                            "value": query_values(ids_np, t, task), "x": qp[:, 0], "y": qp[:, 1],
                            "x_pre": qpre[:, 0], "y_pre": qpre[:, 1]})
    keys = pd.DataFrame({"prompt": np.repeat(np.arange(B), t + 1), "kind": "key",
                         "position": np.tile(np.arange(t + 1), B), "token": ids_np[:, : t + 1].ravel(),
                         "value": np.tile(np.arange(t + 1), B).astype(float),
                         "x": kp[..., 0].ravel(), "y": kp[..., 1].ravel(),
                         "x_pre": kpre[..., 0].ravel(), "y_pre": kpre[..., 1].ravel()})
    df = pd.concat([keys, queries], ignore_index=True)
    df["layer"], df["head"], df["freq_id"], df["angle"] = layer, head, int(freq_id), float(ad.layer_inv_freq(layer)[f])
    if task is not None:
        df.attrs["task"] = task
    return df


# ================================================================================================
# the q/k geometry head of the freqs verb
# ================================================================================================
def pick_geometry_head(table: pd.DataFrame, layer: int | None) -> tuple[int, int]:
    ok = table[np.isfinite(table["weighted_id"])]
    if layer is not None:
        if not (table["layer"] == layer).any():
            raise PosymError(f"layer {layer} out of range [0, {int(table['layer'].max())}]")
        ok = ok[ok["layer"] == layer]
        if ok.empty:
            return int(layer), 0
    if ok.empty:
        raise PosymError("no head uses any rotary frequency on these prompts (all queries/keys zero)")
    row = ok.sort_values(["weighted_id", "layer", "head"]).iloc[0]
    return int(row["layer"]), int(row["head"])


__all__ = [
    "DEFAULT_GEOMETRY_PROMPTS",
    "DEFAULT_N",
    "TABLE_COLUMNS",
    "WEIGHTINGS",
    "frequency_content_position_logits",
    "frequency_ids",
    "layer_angles",
    "frequency_logits",
    "frequency_scores",
    "frequency_swap_attention",
    "frequency_terms_from_qk",
    "frequency_use",
    "frequency_use_array",
    "n_terms",
    "pick_geometry_head",
    "qk_geometry",
    "query_values",
    "use_frame",
    "weighted_frequency_id",
]
