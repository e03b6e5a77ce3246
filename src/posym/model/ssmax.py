"""Scalable-Softmax trained from the start (Nakanishi 2025; SPEC §2.1): the query projection of a
posym GPT-J with ``--pe ssmax`` — the only posym-only weights (``attn.q_proj.ssmax_s``, one per head).

The logit of query ``p`` is linear in its ``q_proj`` output and RoPE rotates q linearly, so multiplying
that output by ``s_h·ln(p+1)`` (:func:`posym.model.pe.ssmax_factor`) multiplies the head's logits of
that query by exactly that factor, in the HF forward, in the fast training forward and in every
analysis that captures q at ``q_proj`` (the adapters see the scaled q).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posym.model.pe import ssmax_factor, ssmax_init


class SSMaxQuery(nn.Linear):
    """GPT-J's ``q_proj`` (same ``weight``) followed by the per-head SSMax factor ``s_h·ln(p+1)``,
    ``p`` the token index (0..T-1 unless ``positions`` is given)."""

    def __init__(self, linear: nn.Linear, n_head: int, init_length: int):
        super().__init__(linear.in_features, linear.out_features, bias=linear.bias is not None,
                         device=linear.weight.device, dtype=linear.weight.dtype)
        self.weight = linear.weight
        if linear.bias is not None:
            self.bias = linear.bias
        self.n_head = n_head
        self.ssmax_s = nn.Parameter(torch.full((n_head,), ssmax_init(init_length), device=linear.weight.device,
                                               dtype=linear.weight.dtype))

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        out = F.linear(x, self.weight, self.bias)  # [..., T, H*hd]
        T = out.shape[-2]
        pos = torch.arange(T, device=out.device) if positions is None else positions
        fac = ssmax_factor(self.ssmax_s, pos).to(out.dtype)  # [T, H]
        shaped = out.view(*out.shape[:-1], self.n_head, -1) * fac[..., None]
        return shaped.view(out.shape)


def install_ssmax(model: nn.Module, init_length: int) -> nn.Module:
    """Replace every GPT-J attention's ``q_proj`` by an :class:`SSMaxQuery` sharing its weight (in place;
    no random draw, so the other weights stay those of the same seed). Idempotent."""
    for block in model.transformer.h:
        attn = block.attn
        if not isinstance(attn.q_proj, SSMaxQuery):
            attn.q_proj = SSMaxQuery(attn.q_proj, model.config.n_head, init_length)
    return model


__all__ = ["SSMaxQuery", "install_ssmax"]
