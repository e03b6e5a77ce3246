"""Frequency masks at inference: keep only a set of RoPE frequency IDs (1 = fastest, the numbering of
``theory/restricted.py`` and Paper B) in q and k of the chosen layers; the dropped rotary pairs are
zeroed right after ``q_proj``/``k_proj``, so they contribute nothing to the logit (p-RoPE at
inference: keep the fastest IDs; a band: keep a range). The non-rotary dims of a partial rotary are
untouched. Exact for the families of :data:`~posym.interventions.temperature.TEMPERATURE_FAMILIES`
(nothing non-linear between the projections and the logit); restored on exit by removing the hooks.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.interventions.temperature import TEMPERATURE_FAMILIES
from posym.model.adapters import get_adapter, unwrap_model
from posym.model.rope import expand_pairs


@dataclass(frozen=True)
class FreqMask:
    """A frequency mask: the kept IDs (1 = fastest) and the layers (None = all)."""

    keep: tuple[int, ...]
    layers: tuple[int, ...] | None = None


def check_keep(keep: Iterable[int], n_freq: int) -> tuple[int, ...]:
    """The kept IDs sorted; one-line PosymError for an ID outside 1..``n_freq`` or a non-integer."""
    try:
        ids = sorted({int(k) for k in keep})
    except (TypeError, ValueError):
        raise PosymError(f"freq-mask: keep={keep!r} must be integer frequency IDs in 1..{n_freq}") from None
    bad = [k for k in ids if not 1 <= k <= n_freq]
    if bad:
        raise PosymError(f"freq-mask: frequency IDs must be in 1..{n_freq} (1 = fastest), got {bad}")
    return tuple(ids)


def _dim_mask(keep: tuple[int, ...], n_heads: int, head_dim: int, rotary_dim: int, convention: str) -> Tensor:
    """[n_heads·head_dim] of 1 (kept or non-rotary) and 0 (dropped rotary pair) in the projection's layout."""
    per_pair = torch.tensor([float(i + 1 in keep) for i in range(rotary_dim // 2)])
    head = torch.ones(head_dim)
    head[:rotary_dim] = expand_pairs(per_pair, convention)
    return head.repeat(n_heads)


def _mask_hook(mask: Tensor):
    def hook(module: nn.Module, args, out: Tensor) -> Tensor:
        return out * mask.to(out.device, out.dtype)
    return hook


@contextmanager
def freq_mask(model: nn.Module, keep: Iterable[int], *, layers: Sequence[int] | None = None) -> Iterator[FreqMask]:
    """Context manager: only RoPE frequency IDs ``keep`` (1 = fastest) of q and k in ``layers`` (None =
    all) for the duration; all IDs kept multiplies by exactly 1.0 (a bit-for-bit no-op)."""
    inner = unwrap_model(model)
    mt = getattr(getattr(inner, "config", None), "model_type", None)
    if mt not in TEMPERATURE_FAMILIES:
        raise PosymError(f"freq-mask: model_type={mt!r} is not supported; supported: {', '.join(TEMPERATURE_FAMILIES)}")
    ad = get_adapter(inner)
    keep = check_keep(keep, ad.rotary_dim // 2)
    chosen = ad.check_layers(layers)
    qm = _dim_mask(keep, ad.n_heads, ad.head_dim, ad.rotary_dim, ad.pair_convention)
    km = _dim_mask(keep, ad.n_kv_heads, ad.head_dim, ad.rotary_dim, ad.pair_convention)
    projections = []
    for layer in chosen:
        attn = ad.attention_module(layer)
        q, k = getattr(attn, "q_proj", None), getattr(attn, "k_proj", None)
        if not isinstance(q, nn.Module) or not isinstance(k, nn.Module):
            raise PosymError(f"freq-mask: layer {layer} of {mt} has no q_proj/k_proj")
        projections += [(q, qm), (k, km)]
    handles = []
    try:
        for proj, mask in projections:
            handles.append(proj.register_forward_hook(_mask_hook(mask)))
        yield FreqMask(keep, None if layers is None else tuple(chosen))
    finally:
        for h in handles:
            h.remove()


__all__ = ["FreqMask", "check_keep", "freq_mask"]
