"""Pure RoPE helpers (SPEC §4): angles, rotations in both pair conventions, and conversions.

Two pair conventions exist among HF RoPE models:

* ``"interleaved"`` (GPT-J): frequency ``k`` acts on dims ``(2k, 2k+1)``; the rotation partner of
  ``(x0, x1)`` is ``(-x1, x0)`` (HF ``rotate_every_two``).
* ``"half"`` (GPT-NeoX, Llama, Qwen2, ...): frequency ``k`` acts on dims ``(k, k + r/2)`` of the
  rotary slice of width ``r``; the partner is ``cat(-x2, x1)`` (HF ``rotate_half``).

Only the first ``rotary_dim`` dims of a head are rotated ("partial rotary"); the rest pass through.

A RoPE rotation at position ``p`` is the linear map ``R(p) x = cos_p * x + sin_p * J x`` where
``cos_p`` / ``sin_p`` are per-dim vectors (each pair's angle repeated on its two dims, possibly
multiplied by an ``attention_scaling`` factor) and ``J`` is the partner map above (``Jᵀ = -J``).
Its transpose is ``R(p)ᵀ y = cos_p * y - J (sin_p * y)``; with it a logit
``q_rot(t) · k_rot(a) = (R(a)ᵀ q_rot(t)) · k`` can be evaluated for any key content at any position
with one matmul (used by :mod:`posym.heads.scores`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from posym.errors import PosymError

CONVENTIONS = ("interleaved", "half")


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise PosymError(f"unknown RoPE pair convention {convention!r}; choose one of {CONVENTIONS}")


def angles(dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float64) -> Tensor:
    """RoPE angles ``g_k = base^(-2(k-1)/dim)``, ``k = 1..dim/2`` (SPEC §4; ID 1 is the fastest).

    Returns a tensor [dim/2]. ``dim`` is the rotary width (``rotary_dim``), which must be even.
    """
    if dim <= 0 or dim % 2:
        raise PosymError(f"rotary dim must be a positive even number, got {dim}")
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim).to(dtype)


def partner(x: Tensor, convention: str) -> Tensor:
    """``J x`` on the last dim (the whole last dim is treated as rotary): [..., r] -> [..., r]."""
    _check_convention(convention)
    if convention == "interleaved":
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def expand_pairs(per_pair: Tensor, convention: str) -> Tensor:
    """Repeat per-pair values [..., r/2] onto the two dims of each pair: -> [..., r]."""
    _check_convention(convention)
    if convention == "interleaved":
        return per_pair.repeat_interleave(2, dim=-1)
    return torch.cat((per_pair, per_pair), dim=-1)


def pair_values(per_dim: Tensor, convention: str) -> Tensor:
    """Inverse of :func:`expand_pairs`: per-dim values [..., r] (equal on the two dims of each pair)
    -> the per-pair values [..., r/2]."""
    _check_convention(convention)
    if convention == "interleaved":
        return per_dim[..., ::2]
    return per_dim[..., : per_dim.shape[-1] // 2]


def cos_sin(positions: Tensor, inv_freq: Tensor, convention: str, scale: float = 1.0) -> tuple[Tensor, Tensor]:
    """Per-dim cos/sin tables for integer ``positions`` [T] and ``inv_freq`` [r/2] -> two [T, r] tensors.

    ``scale`` multiplies both (HF's ``attention_scaling``). Computed in ``inv_freq``'s dtype.
    """
    ang = positions.to(inv_freq.dtype)[:, None] * inv_freq[None, :]
    return expand_pairs(ang.cos() * scale, convention), expand_pairs(ang.sin() * scale, convention)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor, convention: str) -> Tensor:
    """``R x`` on the first ``r = cos.shape[-1]`` dims of x [..., T, hd]; cos/sin [T, r] (or broadcastable).

    Dims ``r..hd`` pass through unchanged (partial rotary).
    """
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    out = xr * cos + partner(xr, convention) * sin
    return torch.cat((out, xp), dim=-1) if xp.shape[-1] else out


def apply_rotary_transpose(y: Tensor, cos: Tensor, sin: Tensor, convention: str) -> Tensor:
    """``Rᵀ y`` (the transpose of :func:`apply_rotary`'s linear map) on the first ``r`` dims of y.

    For unit cos/sin this is the rotation by minus the angle; with an ``attention_scaling`` factor s
    it is ``s² R(-p) / s``, i.e. still the exact transpose, so ``(Rᵀ y) · x == y · (R x)``.
    """
    r = cos.shape[-1]
    yr, yp = y[..., :r], y[..., r:]
    out = yr * cos - partner(yr * sin, convention)
    return torch.cat((out, yp), dim=-1) if yp.shape[-1] else out


def to_pairs(x: Tensor, convention: str, rotary_dim: int | None = None) -> Tensor:
    """The rotary slice of x [..., hd] as 2-D pairs [..., r/2, 2] (pair k = frequency k+1)."""
    _check_convention(convention)
    r = x.shape[-1] if rotary_dim is None else rotary_dim
    xr = x[..., :r]
    if convention == "interleaved":
        return xr.reshape(*xr.shape[:-1], r // 2, 2)
    return torch.stack((xr[..., : r // 2], xr[..., r // 2:]), dim=-1)


def from_pairs(pairs: Tensor, convention: str) -> Tensor:
    """Inverse of :func:`to_pairs` (rotary slice only): [..., r/2, 2] -> [..., r]."""
    _check_convention(convention)
    if convention == "interleaved":
        return pairs.flatten(-2)
    return torch.cat((pairs[..., 0], pairs[..., 1]), dim=-1)


def convert_convention(x: Tensor, src: str, dst: str, rotary_dim: int | None = None) -> Tensor:
    """Permute the rotary dims of x [..., hd] from pair convention ``src`` to ``dst``.

    The non-rotary dims (``rotary_dim..hd``) are kept. For vectors q, k converted together (and a
    rotation table converted likewise) the RoPE logit is unchanged.
    """
    r = x.shape[-1] if rotary_dim is None else rotary_dim
    out = from_pairs(to_pairs(x, src, r), dst)
    return torch.cat((out, x[..., r:]), dim=-1) if x.shape[-1] > r else out


__all__ = [
    "CONVENTIONS",
    "angles",
    "partner",
    "expand_pairs",
    "pair_values",
    "cos_sin",
    "apply_rotary",
    "apply_rotary_transpose",
    "to_pairs",
    "from_pairs",
    "convert_convention",
]
