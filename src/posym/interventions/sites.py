"""Where temperature and freq-mask change q and k: the adapter's own capture sites
(:meth:`~posym.model.adapters.RopeAdapter.qk_sites`) — ``q_proj`` / ``k_proj``, or the q/k norms of
the families that have them (Qwen3, Gemma-3): after the norm, q and k reach the logit through the
rotation and the scaling only, both linear. So a hook there changes the logit exactly as intended, and
the score engine (:mod:`posym.heads.scores`) captures the changed q/k: the fast and reference score
paths see the same change. The intervention's hooks are prepended, so they run before any capture hook
on the same module, whenever that one was registered.

GPT-NeoX's fused per-head projection (``query_key_value``: per head ``[q | k | v]``) is one site for
both: :func:`hook_qk` changes its q and k slices in one hook, which is exact in the same way (the
rotation acts after the projection).

Exact only where nothing non-linear follows the site (no logit soft-capping, no q clipping):
:data:`LINEAR_QK_FAMILIES`, and a model with a soft-cap is refused whatever its family.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator, Sequence, TypeVar

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model.adapters import RopeAdapter, get_adapter, heads_first_layout, unwrap_model
from posym.model.fast import full_forward

T = TypeVar("T")

#: model_type values whose attention logit is linear in the q (and k) the adapter captures.
LINEAR_QK_FAMILIES: tuple[str, ...] = ("gptj", "llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gpt_neox")
#: The marker :func:`linear_sites` gives in place of ``heads_first`` for a fused per-head q|k|v site.
PER_HEAD = "per_head"


def linear_sites(model: nn.Module, layers: Sequence[int] | None,
                 name: str) -> tuple[RopeAdapter, list[tuple[int, nn.Module, nn.Module, bool]]]:
    """The adapter and ``(layer, q module, k module, heads_first)`` of ``layers`` (None = all); for a
    fused per-head q|k|v projection (GPT-NeoX) q and k are that one module and ``heads_first`` is
    :data:`PER_HEAD` (apply hooks with :func:`hook_qk`). A one-line PosymError (naming intervention
    ``name``) for a family outside :data:`LINEAR_QK_FAMILIES`, a soft-capped logit or a layer out of range."""
    inner = unwrap_model(model)
    mt = getattr(getattr(inner, "config", None), "model_type", None)
    if mt not in LINEAR_QK_FAMILIES:
        raise PosymError(f"{name}: model_type={mt!r} is not supported (the logit must be linear in the captured q/k); "
                         f"supported: {', '.join(LINEAR_QK_FAMILIES)}")
    ad = get_adapter(inner)
    if ad.softcap is not None:
        raise PosymError(f"{name}: {mt} caps its attention logits (attn_logit_softcapping={ad.softcap:g}), "
                         "so scaling or masking q is not exact; use a model without logit soft-capping")
    out = []
    for layer in ad.check_layers(layers):
        sites = ad.qk_sites(layer)
        if sites is None and getattr(getattr(ad, "spec", None), "qkv", None) == "per_head":
            attn = ad.attention_module(layer)
            sites = (attn.query_key_value, attn.query_key_value, PER_HEAD)
        if sites is None:
            raise PosymError(f"{name}: layer {layer} of {mt} has no separate q/k projections or norms")
        out.append((layer, *sites))
    return ad, out


def head_sites(model: nn.Module, heads: Sequence[tuple[int, int]],
               name: str) -> tuple[RopeAdapter, list[tuple[tuple[int, nn.Module, nn.Module, bool], tuple[int, ...]]]]:
    """The adapter and, per layer named in ``heads`` (``(layer, query head)`` pairs), its site (as
    :func:`linear_sites`) with that layer's query heads; a one-line PosymError (naming ``name``) for a
    head or layer the model lacks, or anything :func:`linear_sites` refuses."""
    ad, sites = linear_sites(model, sorted({int(layer) for layer, _ in heads}), name)
    bad = [f"L{layer}H{h}" for layer, h in heads if not 0 <= int(h) < ad.n_heads]
    if bad:
        raise PosymError(f"{name}: no head {bad[0]}: the model has {ad.n_heads} query heads per layer (H0..H{ad.n_heads - 1})")
    return ad, [(site, tuple(sorted({int(h) for layer, h in heads if int(layer) == site[0]}))) for site in sites]


QKFn = Callable[[Tensor, int, bool], Tensor]


def hook_qk(ad: RopeAdapter, sites: list, q_fn: QKFn | None, k_fn: QKFn | None) -> list:
    """Prepend forward hooks applying ``q_fn(out, n_heads, heads_first)`` to each site's q output and
    ``k_fn(out, n_kv_heads, heads_first)`` to its k output (None: left as is); returns the handles.
    Separate q and k modules get a hook each; a fused per-head ``[q | k | v]`` projection
    (:data:`PER_HEAD`) one hook that changes its q and k slices, seen as ``[B, T, H, hd]``."""
    handles = []
    for _, q, k, heads_first in sites:
        if heads_first == PER_HEAD:
            def fused(module, args, out, H=ad.n_heads, hd=ad.head_dim):
                B, T = out.shape[:2]
                qkv = out.reshape(B, T, H, 3, hd)
                qs, ks, vs = qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :]
                qs = q_fn(qs, H, False) if q_fn is not None else qs
                ks = k_fn(ks, H, False) if k_fn is not None else ks
                return torch.stack((qs, ks, vs), dim=3).reshape(out.shape)
            handles.append(prepend_hook(q, fused))
            continue
        for module, fn, n in ((q, q_fn, ad.n_heads), (k, k_fn, ad.n_kv_heads)):
            if fn is not None:
                handles.append(prepend_hook(module, lambda m, a, out, fn=fn, n=n, hf=heads_first: fn(out, n, hf)))
    return handles


def time_axis(out: Tensor, n: int, heads_first: bool) -> int:
    """The token axis of a site's output with ``n`` heads: ``[B, T, n·hd]`` and ``[B, T, n, hd]`` -> 1,
    ``[B, n, T, hd]`` -> 2."""
    if out.ndim == 4 and heads_first_layout(out, n, heads_first):
        return 2
    return 1


def scale_token_heads(out: Tensor, f: Tensor, n: int, heads_first: bool) -> Tensor:
    """``out`` with row ``b``'s token ``t`` of head ``h`` times ``f[b, t, h]`` (``f``: ``[B or 1, T or 1, n or 1]``,
    or with a fourth axis ``[hd or 1]`` for per-dim factors), in any site layout (``[B, T, n·hd]``,
    ``[B, T, n, hd]``, ``[B, n, T, hd]``); a factor of exactly 1.0 leaves a head's values bit-identical."""
    f = f.to(out.device, out.dtype)
    f = f[..., None] if f.ndim == 3 else f  # [B|1, T|1, n|1, hd|1]
    if out.ndim == 3:
        B, T, D = out.shape
        return (out.reshape(B, T, n, D // n) * f).reshape(out.shape)
    if heads_first_layout(out, n, heads_first):
        return out * f.transpose(1, 2)
    return out * f


def scale_dims(out: Tensor, per_head: Tensor, n: int) -> Tensor:
    """``out`` with each head's dims multiplied by ``per_head`` [hd] (a 3-D output holds the ``n`` heads side by side)."""
    m = per_head.to(out.device, out.dtype)
    return out * (m.repeat(n) if out.ndim == 3 else m)


def scale_heads(out: Tensor, m: Tensor, n: int, heads_first: bool) -> Tensor:
    """``out`` with token ``t``'s head ``h`` times ``m[t, h]`` (``m``: ``[T or 1, n, hd or 1]``), in any
    site layout: the per-query-head form of :func:`scale_dims` (``heads=``), every row alike
    (:func:`scale_token_heads`). A factor of exactly 1.0 leaves a head's values bit-identical."""
    return scale_token_heads(out, m[None], n, heads_first)


def prepend_hook(module: nn.Module, hook) -> torch.utils.hooks.RemovableHandle:
    """``hook`` as a forward hook of ``module`` that runs before the module's other forward hooks."""
    return module.register_forward_hook(hook, prepend=True)


def with_full_forward(context: Callable[..., ContextManager[T]]) -> Callable[..., ContextManager[T]]:
    """Decorator of an intervention's context manager: while it is active, the model's fast last-token
    path (:func:`posym.model.fast.last_token_logits`, used by ``lengthgen`` and evaluation) runs the
    plain forward, which the intervention's hooks (a pre-hook of the model's forward, a query scaled
    by its row's position) are written for (:func:`posym.model.fast.full_forward`)."""
    @functools.wraps(context)
    @contextmanager
    def wrapped(model: nn.Module, *args, **kwargs) -> Iterator[T]:
        with context(model, *args, **kwargs) as value, full_forward(unwrap_model(model)):
            yield value
    return wrapped


__all__ = ["LINEAR_QK_FAMILIES", "PER_HEAD", "hook_qk", "linear_sites", "head_sites", "time_axis",
           "scale_token_heads", "scale_dims", "scale_heads", "prepend_hook", "with_full_forward"]
