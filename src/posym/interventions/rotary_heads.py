"""A rotary change (rope-base, ntk, interpolate, yarn) on some query heads only (``heads=``, ``layers=``;
docs/interventions.md, "Head selections").

RoPE rotations of one pair commute, so the *delta* rotation by the angle ``(c·ω′ − ω)·p`` followed by the
model's own rotation by ``ω·p`` is the rotation by ``c·ω′·p`` (SPEC §4: per pair, R(α)·R(β) = R(α + β)):
a forward hook on the adapter's q/k site (``q_proj``/``k_proj``, or the q/k norms of Qwen3 and
Gemma-3, or GPT-NeoX's fused per-head ``query_key_value``; :mod:`posym.interventions.sites`) rotates the
selected heads' pre-rotary q and k by that delta at each token's absolute position (the ``position_ids``
the model's rotary module is called with: left padding and a KV cache included), and multiplies their
rotary dims by YaRN's attention factor ``a``. The model's own RoPE then finishes the job, so those heads
see ``a·R(c·ω′·p)``, exactly the whole-model intervention's rotation, while every other head's q and k
are bit-identical.

A rotary change rotates the key too, and under grouped-query attention the query heads of a group share
one key: a selection must hold every query head of each key/value group it touches (always true for
multi-head attention); a partial group is refused in one line naming the heads to add.

The head scores' fast path (:func:`posym.heads.scores.scores_fast`) places a key's captured content at
other positions, which a per-head delta rotation does not follow: while a selection is active the model
carries :data:`posym.model.adapters.POSITION_TIED_QK`, and the head scores run the literal re-run
(:func:`posym.heads.scores.scores_reference`, the model's own forward; ``method`` "reference" in the
result) instead. Any other capture of q/k at a selected site (frequency analyses) is refused in one line.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.interventions.registry import format_head_pairs
from posym.interventions.positions import ForwardPositions
from posym.interventions.rope import _family, model_theta, model_thetas
from posym.interventions.sites import PER_HEAD, head_sites, hook_qk
from posym.model.adapters import POSITION_TIED_QK, RopeAdapter, get_adapter, heads_first_layout
from posym.model.pe import PositionalEncoding, config_pe
from posym.model.rope import apply_rotary, expand_pairs

#: ``new_inv_freq(theta, rotary_dim, pe)``: a layer's new angle per position of each pair [rotary_dim/2]
#: from its base θ (``pe``: a GPT-J's training-time variant, None for the other families).
NewFreq = Callable[[float, int, "PositionalEncoding | None"], Tensor]


def layer_heads(model: nn.Module, layers: Sequence[int], name: str) -> tuple[tuple[int, int], ...]:
    """Every query head of ``layers`` as ``(layer, head)`` pairs (``layers=`` of a rotary intervention);
    a one-line PosymError for a layer the model lacks."""
    ad = get_adapter(model)
    try:
        chosen = ad.check_layers(list(layers))
    except PosymError as e:
        raise PosymError(f"{name}: {e}") from None
    return tuple((int(layer), h) for layer in chosen for h in range(ad.n_heads))


def check_whole_groups(ad: RopeAdapter, heads: Sequence[tuple[int, int]], name: str) -> None:
    """One-line PosymError when ``heads`` holds some but not all query heads of a key/value group (GQA):
    the rotary change rotates the group's shared key."""
    chosen = {(int(layer), int(h)) for layer, h in heads}
    g = ad.n_heads // ad.n_kv_heads
    for layer, h in sorted(chosen):
        kv = h // g
        group = [(layer, kv * g + i) for i in range(g)]
        missing = [p for p in group if p not in chosen]
        if missing:
            raise PosymError(f"{name}: query heads {format_head_pairs(group)} share key/value head {kv} of layer {layer} "
                             f"(GQA), and a rotary change rotates that key; add {format_head_pairs(missing)} "
                             "(a part of a group is not supported)")


def _layer_freqs(inner: nn.Module, mt: str, ad: RopeAdapter, layers: Sequence[int],
                 new_inv_freq: NewFreq | None) -> dict[int, tuple[Tensor, Tensor]]:
    """``{layer: (ω, ω′)}`` (float64 [rotary_dim/2]): the model's angle per position of each pair and the
    intervention's, from the layer's own base (each layer type's on Gemma-3); ``new_inv_freq`` None: ω′ = ω."""
    r = ad.rotary_dim
    out = {}
    if new_inv_freq is None:
        return {layer: (ad.layer_inv_freq(layer),) * 2 for layer in layers if mt == "gptj" or ad.has_rope(layer)}
    if mt == "gptj":
        pe = config_pe(inner.config)
        theta = model_theta(inner)
        for layer in layers:
            out[layer] = (ad.layer_inv_freq(layer), new_inv_freq(theta, r, pe).double())
        return out
    thetas = model_thetas(inner)  # one-line errors for a rotary that is not default RoPE
    types = getattr(inner.config, "layer_types", None)
    for layer in layers:
        if not ad.has_rope(layer):  # NoPE: nothing to rotate
            continue
        lt = None if None in thetas else str(types[layer])
        out[layer] = (ad.layer_inv_freq(layer), new_inv_freq(thetas[lt], r, None).double())
    return out


def _is_capture_hook(hook) -> bool:
    """True for the q/k capture hooks of :mod:`posym.model.adapters` (``qk_hooks``)."""
    qual = getattr(hook, "__qualname__", "")
    return "_store_hook" in qual or "qk_hooks" in qual


@contextmanager
def rotary_heads(model: nn.Module, heads: Sequence[tuple[int, int]], name: str, new_inv_freq: NewFreq | None, *,
                 attention_factor: float = 1.0, position_scale: Callable[[int], float] | None = None) -> Iterator[None]:
    """Context manager: query ``heads`` (``(layer, head)`` pairs) see the rotation ``a·R(c·ω′·p)`` of a
    rotary intervention (module docstring), every other head untouched; hooks removed on exit.

    ``new_inv_freq``: a layer's ω′ from its base (None: ω′ = ω); ``attention_factor`` a (YaRN); ``position_scale(n)``: c
    for a forward of ``n`` tokens (position interpolation; None: 1). One-line PosymError (naming ``name``)
    before anything changes for a family outside the rotary and linear-site families, a head or layer the
    model lacks, or a part of a GQA group."""
    inner, mt = _family(model, name)
    ad, per_layer = head_sites(inner, heads, name)
    check_whole_groups(ad, heads, name)
    freqs = _layer_freqs(inner, mt, ad, [site[0] for site, _ in per_layer], new_inv_freq)
    track = ForwardPositions(inner, name)
    conv, r, g = ad.pair_convention, ad.rotary_dim, ad.n_heads // ad.n_kv_heads

    def rotate_fn(omega: Tensor, omega_new: Tensor, sel: tuple[int, ...]):
        def fn(out: Tensor, n: int, heads_first: bool) -> Tensor:
            hf = out.ndim == 4 and heads_first_layout(out, n, heads_first)
            x = out.reshape(*out.shape[:2], n, -1) if out.ndim == 3 else out
            x = x.transpose(1, 2) if hf else x  # [B, T, n, hd]
            B, T = x.shape[:2]
            c = 1.0 if position_scale is None or track.n is None else float(position_scale(track.n))
            delta = track.positions(T, B, out.device)[..., None] * (c * omega_new - omega).to(out.device)  # [B|1, T, r/2]
            cos = expand_pairs(delta.cos() * attention_factor, conv)[:, :, None].to(out.dtype)
            sin = expand_pairs(delta.sin() * attention_factor, conv)[:, :, None].to(out.dtype)
            idx = torch.tensor(sel, device=out.device)
            new = x.clone()
            new[:, :, idx] = apply_rotary(x[:, :, idx], cos, sin, conv)
            new = new.transpose(1, 2) if hf else new
            return new.reshape(out.shape)
        return fn

    def refuse_capture(module, args):
        if any(_is_capture_hook(h) for h in module._forward_hooks.values()):
            raise PosymError(f"{name}: the captured q/k carry a per-head rotation at their own positions, which an "
                             "analysis of captured q/k (the frequency analyses) would misread; apply it to all heads "
                             "or measure this without heads=/layers=")

    handles = track.attach()
    marked = getattr(inner, POSITION_TIED_QK, None)
    setattr(inner, POSITION_TIED_QK, name)
    try:
        for site, hs in per_layer:
            layer = site[0]
            if layer not in freqs:
                continue
            omega, omega_new = freqs[layer]
            omega, omega_new = omega[: r // 2], omega_new[: r // 2]
            kv = tuple(sorted({h // g for h in hs})) if site[3] != PER_HEAD else hs
            handles += hook_qk(ad, [site], rotate_fn(omega, omega_new, hs), rotate_fn(omega, omega_new, kv))
            handles += [m.register_forward_pre_hook(refuse_capture) for m in {id(m): m for m in site[1:3]}.values()]
        yield
    finally:
        for h in handles:
            h.remove()
        if marked is None:
            delattr(inner, POSITION_TIED_QK)
        else:
            setattr(inner, POSITION_TIED_QK, marked)


__all__ = ["NewFreq", "layer_heads", "check_whole_groups", "rotary_heads"]
