"""Another RoPE base for the duration: ``rope_base`` rebuilds the rotary tables with θ′, ``ntk`` with
the NTK-aware rule θ′ = θ·κ^{d/(d−2)} (d = rotary dim). The weights are untouched; the rotary
tables (GPT-J's ``embed_positions``, the ``inv_freq`` of a Llama-like family's default RoPE) are
replaced by new tensors and the original tensors put back on exit, also after an exception.

Covers GPT-J (HF's base 10,000, or the base of a posym run trained with ``--pe rope-base:θ``; the
pairs a p-RoPE / NoPE run does not rotate stay unrotated) and the single default-RoPE module of :data:`ROPE_FAMILIES`; the
base is the model's, for every layer (per-layer bases are not yet supported). A GPT-J table replaced
inside the context (``extend_positions`` past the training length) is rebuilt with θ′ before the
next forward reads it, so a length sweep inside the context stays at θ′. Note: the GPT-J
adapter's ``inv_freq`` (used by frequency analyses) is fixed at base 10,000; the rotation itself
(``cos_sin``, hence the head scores) reads the rebuilt table.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model.adapters import unwrap_model
from posym.model.pe import GPTJ_BASE, config_pe, gptj_rotary_table

#: model_type values whose RoPE base this module can change (one default-RoPE module for all layers).
ROPE_FAMILIES: tuple[str, ...] = ("gptj", "llama", "mistral", "qwen2")


@dataclass(frozen=True)
class RopeBase:
    """A RoPE base change: θ′ given directly (``kappa`` None) or from the NTK factor κ."""

    theta: float | None = None
    kappa: float | None = None


def check_theta(theta: float) -> float:
    """θ′ as a float; one-line PosymError unless finite and > 0."""
    try:
        t = float(theta)
    except (TypeError, ValueError):
        raise PosymError(f"rope-base: theta={theta!r} is not a number; give a base > 0 such as theta=20000") from None
    if not math.isfinite(t) or t <= 0:
        raise PosymError(f"rope-base: theta={theta!r} must be finite and > 0, e.g. theta=20000")
    return t


def check_kappa(kappa: float) -> float:
    """κ as a float; one-line PosymError unless finite and ≥ 1."""
    try:
        k = float(kappa)
    except (TypeError, ValueError):
        raise PosymError(f"ntk: kappa={kappa!r} is not a number; give a factor >= 1 such as kappa=4") from None
    if not math.isfinite(k) or k < 1:
        raise PosymError(f"ntk: kappa={kappa!r} must be finite and >= 1 (1 = no change), e.g. kappa=4")
    return k


def ntk_theta(theta: float, kappa: float, rotary_dim: int) -> float:
    """The NTK-aware base θ·κ^{d/(d−2)} (d = ``rotary_dim``); exactly θ at κ = 1."""
    theta, kappa = check_theta(theta), check_kappa(kappa)
    if rotary_dim <= 2:
        raise PosymError(f"ntk: rotary dim {rotary_dim} must be > 2")
    return theta if kappa == 1 else theta * kappa ** (rotary_dim / (rotary_dim - 2))


def _family(model: nn.Module) -> tuple[nn.Module, str]:
    inner = unwrap_model(model)
    mt = getattr(getattr(inner, "config", None), "model_type", None)
    if mt not in ROPE_FAMILIES:
        raise PosymError(f"rope-base: model_type={mt!r} is not supported; supported: {', '.join(ROPE_FAMILIES)}")
    return inner, mt


def _gptj_tables(model: nn.Module) -> list[nn.Module]:
    mods = [m for m in model.modules() if isinstance(getattr(m, "embed_positions", None), Tensor)]
    if not mods:
        raise PosymError("rope-base: GPT-J model has no rotary table (embed_positions)")
    return mods


def _rope_modules(model: nn.Module) -> list[nn.Module]:
    mods = [m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), Tensor)]
    if not mods:
        raise PosymError("rope-base: no rotary module with inv_freq found")
    bad = [getattr(m, "rope_type", None) for m in mods if getattr(m, "rope_type", "default") != "default"]
    if bad:
        raise PosymError(f"rope-base: rope_type={bad[0]!r} is not supported (only the default RoPE); "
                         "change the base of a model with plain RoPE")
    return mods


def model_theta(model: nn.Module) -> float:
    """The model's RoPE base θ: a posym GPT-J's variant base (10,000 unless trained with
    ``--pe rope-base:θ``), else the config's ``rope_theta``."""
    inner, mt = _family(model)
    if mt == "gptj":
        return float(config_pe(inner.config).theta)
    cfg = inner.config
    params = getattr(cfg, "rope_parameters", None)
    theta = params.get("rope_theta") if isinstance(params, dict) else getattr(cfg, "rope_theta", None)
    if theta is None:
        raise PosymError(f"rope-base: {mt} config has no rope_theta")
    return float(theta)


def rotary_dim(model: nn.Module) -> int:
    """The rotary dimension d (rotated components per head)."""
    inner, mt = _family(model)
    if mt == "gptj":
        return int(_gptj_tables(inner)[0].embed_positions.shape[1])
    return 2 * int(_rope_modules(inner)[0].inv_freq.numel())


def gptj_table(model: nn.Module, n_pos: int, dim: int, *, theta: float | None = None, position_scale: float = 1.0) -> Tensor:
    """The model's GPT-J rotary table (its training-time variant, :mod:`posym.model.pe`) with another
    base θ′ and/or fractional positions ``p·c``; bit-identical to the model's own table at θ′ = θ, c = 1."""
    return gptj_rotary_table(config_pe(unwrap_model(model).config), n_pos, dim, theta=theta,
                             position_scale=position_scale)


def _default_inv_freq(theta: float, dim: int) -> Tensor:
    """transformers' default RoPE ``inv_freq`` with base θ (``compute_default_rope_parameters``)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


@contextmanager
def rope_base(model: nn.Module, theta: float, *, layers: Sequence[int] | None = None) -> Iterator[RopeBase]:
    """Context manager: every layer's RoPE base set to θ′ = ``theta`` (rotary tables rebuilt, weights
    untouched); the original tables restored on exit. ``layers`` must be None (all layers) for now."""
    theta = check_theta(theta)
    if layers is not None:
        raise PosymError("rope-base: per-layer bases are not supported yet; leave layers unset (all layers)")
    inner, mt = _family(model)
    if mt == "gptj":
        mods = _gptj_tables(inner)
        saved = [(m, "embed_positions", m.embed_positions) for m in mods]
        new = [gptj_table(inner, t.shape[0], t.shape[1], theta=theta).to(t.device, t.dtype) for _, _, t in saved]
    else:
        mods = _rope_modules(inner)
        saved = [(m, "inv_freq", m.inv_freq) for m in mods]
        new = [_default_inv_freq(theta, 2 * t.numel()).to(t.device, t.dtype) for _, _, t in saved]
    current = {id(m): t for (m, _, _), t in zip(saved, new)}

    def keep_base(module, args, kwargs):
        # A table rebuilt inside the context (e.g. extend_positions past the training length) would use
        # base 10,000 again: rebuild it with θ′ at its new length before the forward reads it.
        for m, attr, _ in saved:
            t = getattr(m, attr)
            if t is not current[id(m)]:
                t = gptj_table(inner, t.shape[0], t.shape[1], theta=theta).to(t.device, t.dtype)
                setattr(m, attr, t)
                current[id(m)] = t
        return None

    handle = inner.register_forward_pre_hook(keep_base, with_kwargs=True) if mt == "gptj" else None
    try:
        for (m, attr, _), t in zip(saved, new):
            setattr(m, attr, t)
        yield RopeBase(theta=theta)
    finally:
        if handle is not None:
            handle.remove()
        for m, attr, t in saved:
            setattr(m, attr, t)


@contextmanager
def ntk(model: nn.Module, kappa: float) -> Iterator[RopeBase]:
    """Context manager: :func:`rope_base` with the NTK-aware base θ·κ^{d/(d−2)} of the model's θ and
    rotary dim d; κ = 1 leaves the base (and the logits) unchanged."""
    kappa = check_kappa(kappa)
    theta = ntk_theta(model_theta(model), kappa, rotary_dim(model))
    with rope_base(model, theta):
        yield RopeBase(theta=theta, kappa=kappa)


__all__ = ["ROPE_FAMILIES", "GPTJ_BASE", "RopeBase", "check_theta", "check_kappa", "ntk_theta", "model_theta",
           "rotary_dim", "gptj_table", "rope_base", "ntk"]
