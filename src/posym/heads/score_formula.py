"""The result types and the formula of the positional / symbolic scores (SPEC §3 steps 3–5), shared by
the fast and the reference path. "Module doc" below is the module docstring of
:mod:`posym.heads.scores`, which describes the metric, the cosine conventions and the centred scores."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from posym.checks import check_taus
from posym.errors import PosymError

DEFAULT_TAU = 1e-4
DEFAULT_BLOCKS = 16
#: Cosine conventions (module doc): "torch" = the authors' F.cosine_similarity (eps 1e-8), "exact".
COSINES: tuple[str, ...] = ("torch", "exact")
DEFAULT_COSINE = "torch"
TORCH_COS_EPS = 1e-8  # torch.nn.functional.cosine_similarity's default eps

BlockSpec = int | Sequence[int] | Sequence[tuple[int, int]]


# ================================================================================================
# results
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
        centre = self.uniform_centre()[..., i] if check_centred(centred, cosine) else None
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


def check_centred(centred: bool, cosine: str) -> bool:
    """``centred`` as a bool; PosymError unless it is a bool and, when True, ``cosine`` is ``"torch"``
    (centred scores, module doc)."""
    if not isinstance(centred, (bool, np.bool_)):
        raise PosymError(f"centred must be True or False, got {centred!r}")
    if centred and _check_cosine(cosine) != "torch":
        raise PosymError("centred scores need cosine='torch' (the exact rule scores a zero centred vector 1)")
    return bool(centred)


def combine_scores(d_i, d_j, dp_i, dp_j, taus: float | Sequence[float] = (DEFAULT_TAU,),
                   cosine: str = DEFAULT_COSINE, *, centre=None) -> tuple[np.ndarray, np.ndarray]:
    """SPEC §3 steps 3–5 over the last axis (the swaps): arrays [..., S] -> (s_pos, s_sym) [..., n_tau].

    ``pos = cos((D'_i, D'_j), (D_i, D_j))``, ``sym = cos((D'_i, D'_j), (D_j, D_i))`` (:func:`pair_cos`
    with ``cosine``), ``α = softmax_S(|D_i - D_j| / τ)``, ``s = Σ_S α·pos`` (resp. ``sym``), float64.
    ``centre`` [..., S] (optional, broadcastable): subtracted from ``D_i, D_j, D'_i, D'_j`` before the
    cosines, not from the gap in ``α`` (centred scores, module doc).
    """
    taus = check_taus(taus)
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


__all__ = [
    "COSINES",
    "DEFAULT_BLOCKS",
    "DEFAULT_COSINE",
    "DEFAULT_TAU",
    "TORCH_COS_EPS",
    "BlockSpec",
    "HeadScores",
    "SwapAttention",
    "attention_entropy",
    "check_centred",
    "combine_scores",
    "pair_cos",
]
