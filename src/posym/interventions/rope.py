"""Another RoPE base for the duration: ``rope_base`` rebuilds the rotary tables with θ′, ``ntk`` with
the NTK-aware rule θ′ = θ·κ^{d/(d−2)} (d = rotary dim). The weights are untouched; the rotary
tables (GPT-J's ``embed_positions``, the ``inv_freq`` of a Llama-like family's default RoPE, and the
``{layer_type}_inv_freq`` of a per-layer-type rotary such as Gemma-3's sliding/full layers) are
replaced by new tensors and the original tensors put back on exit, also after an exception.

Covers GPT-J (HF's base 10,000, or the base of a posym run trained with ``--pe rope-base:θ``; the
pairs a p-RoPE / NoPE run does not rotate stay unrotated) and the default-RoPE rotaries of
:data:`ROPE_FAMILIES`. With several bases (Gemma-3: 10,000 on sliding, 1,000,000 on full layers)
``ntk`` scales each base by the NTK rule, while one θ′ for all is ambiguous and refused. A GPT-J table
replaced inside the context (``extend_positions`` past the training length) is rebuilt with θ′ before
the next forward reads it, so a length sweep inside the context stays at θ′. Note: the GPT-J
adapter's ``inv_freq`` (used by frequency analyses) is fixed at base 10,000; the rotation itself
(``cos_sin``, hence the head scores) reads the rebuilt table. With ``layers=`` / ``heads=`` only those
query heads change, by a delta rotation of their q and k (:mod:`posym.interventions.rotary_heads`).
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from posym.checks import check_float
from posym.errors import PosymError
from posym.interventions.registry import (Intervention, check_heads_arg, format_head_pairs, format_ids, format_number,
                                          parse_heads_key, parse_ids, register)
from posym.interventions.sites import with_full_forward
from posym.model.adapters import unwrap_model
from posym.model.pe import GPTJ_BASE, MAX_ROPE_BASE, MIN_ROPE_BASE, config_pe, gptj_inv_freq, gptj_rotary_table

#: model_type values whose RoPE base and positions this module can change (default RoPE: one base for
#: all layers, or one per layer type).
ROPE_FAMILIES: tuple[str, ...] = ("gptj", "llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gpt_neox")


@register("rope-base")
@dataclass(frozen=True)
class RopeBase(Intervention):
    """A RoPE base change to θ′ = ``theta``, on every layer, on ``layers`` or on query ``heads`` only
    (:mod:`posym.interventions.rotary_heads`). ``RopeBase(kappa=κ)`` (the one class of both before
    :class:`Ntk` existed) builds the :class:`Ntk` of κ."""

    theta: float | None = None
    kappa: float | None = None
    layers: tuple[int, ...] | None = None
    heads: tuple[tuple[int, int], ...] | None = None

    keys = ("theta", "layers", "heads")
    example = "rope-base:theta=20000"
    per_layer = True
    per_head = True
    exact_under_kv_cache = True  # new angles at absolute positions (a selection reads the model's position ids)

    def __new__(cls, theta: float | None = None, kappa: float | None = None, *args: Any, **kwargs: Any) -> RopeBase:
        return super().__new__(Ntk if cls is RopeBase and kappa is not None else cls)

    def __post_init__(self) -> None:
        if self.theta is None:
            raise PosymError("rope-base needs theta, e.g. rope-base:theta=20000")

    @classmethod
    def parse(cls, kv: Mapping[str, str]) -> RopeBase:
        """``theta`` (in [1e-30, 1e30]), ``layers`` (``0+2``) or ``heads`` (``L0H1+L2H3``)."""
        if "theta" not in kv:
            raise PosymError("rope-base needs theta, e.g. rope-base:theta=20000")
        layers = parse_layers_key(kv, "rope-base")
        return cls(theta=check_theta(kv["theta"]), layers=layers, heads=parse_heads_key(kv, layers))

    def canonical(self) -> str:
        """``rope-base:theta=T`` then ``layers=…`` or ``heads=…`` when restricted."""
        return f"rope-base:theta={format_number(self.theta)}" + selection_suffix(self)

    def describe(self) -> str:
        if self.layers is None and self.heads is None:
            return f"every RoPE base set to {self.theta:g}"
        return f"RoPE base set to {self.theta:g} in {selection_words(self)}"

    def apply(self, model: nn.Module) -> ContextManager[RopeBase]:
        return rope_base(model, self.theta, layers=self.layers, heads=self.heads)

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any]:
        """The new base θ′."""
        return {"base": float(self.theta)}


@register("ntk")
@dataclass(frozen=True)
class Ntk(RopeBase):
    """An NTK-aware base change: each base θ becomes θ·κ^{d/(d−2)} (d = rotary dim); ``theta``: the
    new base once applied to a model with one base (None when unknown or several)."""

    keys = ("kappa", "layers", "heads")
    example = "ntk:kappa=4"

    def __post_init__(self) -> None:
        if self.kappa is None:
            raise PosymError("ntk needs kappa, e.g. ntk:kappa=4")

    @classmethod
    def parse(cls, kv: Mapping[str, str]) -> Ntk:
        """``kappa`` (in [1, 1e30]), ``layers`` or ``heads``."""
        if "kappa" not in kv:
            raise PosymError("ntk needs kappa, e.g. ntk:kappa=4")
        layers = parse_layers_key(kv, "ntk")
        return cls(kappa=check_kappa(kv["kappa"]), layers=layers, heads=parse_heads_key(kv, layers))

    def canonical(self) -> str:
        """``ntk:kappa=K`` then ``layers=…`` or ``heads=…`` (the applied ``theta`` is not part of it)."""
        return f"ntk:kappa={format_number(self.kappa)}" + selection_suffix(self)

    def describe(self) -> str:
        if self.layers is None and self.heads is None:
            return f"every RoPE base θ set to θ·{self.kappa:g}^(d/(d-2)) (NTK-aware, d the rotary dim)"
        return f"RoPE base θ set to θ·{self.kappa:g}^(d/(d-2)) (NTK-aware, d the rotary dim) in {selection_words(self)}"

    def apply(self, model: nn.Module) -> ContextManager[Ntk]:
        return ntk(model, self.kappa, layers=self.layers, heads=self.heads)

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any]:
        """The NTK base of ``base`` at ``rotary_dim`` (:func:`ntk_theta`)."""
        return {"base": float(ntk_theta(base, self.kappa, rotary_dim))}


def parse_layers_key(kv: Mapping[str, str], name: str) -> tuple[int, ...] | None:
    """The ``layers=`` value (``0+2``) of a rotary intervention's keys (None when absent); one-line PosymError."""
    if "layers" not in kv:
        return None
    try:
        return parse_ids(kv["layers"])
    except ValueError:
        raise PosymError(f"{name}: layers must be integers joined by '+', e.g. layers=0+2") from None


def selection_suffix(spec: Any) -> str:
    """``,layers=0+2`` / ``,heads=L0H1`` of a restricted rotary intervention (empty for every layer)."""
    if spec.heads is not None:
        return ",heads=" + format_head_pairs(spec.heads)
    return ",layers=" + format_ids(spec.layers) if spec.layers is not None else ""


def selection_words(spec: Any) -> str:
    """``every layer``, ``layers 0+2`` or ``query heads L0H1`` (for :meth:`~Intervention.describe`)."""
    if spec.heads is not None:
        return "query heads " + format_head_pairs(spec.heads)
    return "layers " + format_ids(spec.layers) if spec.layers is not None else "every layer"


_BASE_RANGE = f"[{MIN_ROPE_BASE:g}, {MAX_ROPE_BASE:g}]"
_WHY = "so every inverse frequency is a finite, nonzero float32 number"


def check_theta(theta: float) -> float:
    """θ′ as a float; one-line PosymError unless > 0 and in [MIN_ROPE_BASE, MAX_ROPE_BASE]
    (:mod:`posym.model.pe`: every inverse frequency ``θ′^(−2k/d)`` a finite, nonzero float32 number)."""
    t = check_float(theta, "rope-base: theta", hint="; give a base > 0 such as theta=20000")
    if not MIN_ROPE_BASE <= t <= MAX_ROPE_BASE:
        raise PosymError(f"rope-base: theta={theta!r} must be > 0 and in {_BASE_RANGE} ({_WHY}), e.g. theta=20000")
    return t


def check_kappa(kappa: float) -> float:
    """κ as a float; one-line PosymError unless in [1, MAX_ROPE_BASE]."""
    return check_float(kappa, "ntk: kappa", 1, MAX_ROPE_BASE, hint=" (1 = no change), e.g. kappa=4")


def ntk_theta(theta: float, kappa: float, rotary_dim: int) -> float:
    """The NTK-aware base θ·κ^{d/(d−2)} (d = ``rotary_dim``); exactly θ at κ = 1. One-line PosymError
    when the new base leaves [MIN_ROPE_BASE, MAX_ROPE_BASE] (never an OverflowError)."""
    theta, kappa = check_theta(theta), check_kappa(kappa)
    if rotary_dim <= 2:
        raise PosymError(f"ntk: rotary dim {rotary_dim} must be > 2")
    if kappa == 1:
        return theta
    log10 = math.log10(theta) + rotary_dim / (rotary_dim - 2) * math.log10(kappa)
    if log10 > math.log10(MAX_ROPE_BASE):
        raise PosymError(f"ntk: kappa={kappa:g} turns the base {theta:g} into 1e{log10:.0f}, beyond {MAX_ROPE_BASE:g} "
                         f"({_WHY}); give a smaller kappa, e.g. kappa=4")
    return theta * kappa ** (rotary_dim / (rotary_dim - 2))


def _family(model: nn.Module, what: str = "rope-base") -> tuple[nn.Module, str]:
    inner = unwrap_model(model)
    mt = getattr(getattr(inner, "config", None), "model_type", None)
    if mt not in ROPE_FAMILIES:
        raise PosymError(f"{what}: model_type={mt!r} is not supported; supported: {', '.join(ROPE_FAMILIES)}")
    return inner, mt


def _gptj_tables(model: nn.Module) -> list[nn.Module]:
    mods = [m for m in model.modules() if isinstance(getattr(m, "embed_positions", None), Tensor)]
    if not mods:
        raise PosymError("rope-base: GPT-J model has no rotary table (embed_positions)")
    return mods


def _rope_tables(model: nn.Module) -> list[tuple[nn.Module, str, str | None]]:
    """``(rotary module, inv_freq buffer name, layer type or None)`` of every default-RoPE table of a
    Llama-like model: ``inv_freq``, or ``{layer_type}_inv_freq`` of a per-layer-type rotary (Gemma-3).
    One-line PosymError when there is none or one is not ``rope_type="default"``."""
    out: list[tuple[nn.Module, str, str | None]] = []
    for m in model.modules():
        if isinstance(getattr(m, "inv_freq", None), Tensor):
            out.append((m, "inv_freq", None))
        types = getattr(m, "layer_types", None)
        if isinstance(types, (list, tuple)):
            out += [(m, f"{lt}_inv_freq", str(lt)) for lt in types if isinstance(getattr(m, f"{lt}_inv_freq", None), Tensor)]
    if not out:
        raise PosymError("rope-base: no rotary module with inv_freq found")
    for m, _, lt in out:
        rt = getattr(m, "rope_type", "default")
        rt = rt.get(lt, "default") if isinstance(rt, dict) else rt
        if rt != "default":
            where = f" on {lt} layers" if lt else ""
            raise PosymError(f"rope-base: rope_type={rt!r}{where} is not supported (only the default RoPE); "
                             "change the base of a model with plain RoPE")
    return out


def _rope_modules(model: nn.Module) -> list[nn.Module]:
    """The rotary modules of :func:`_rope_tables` (each once)."""
    mods: list[nn.Module] = []
    for m, _, _ in _rope_tables(model):
        if not any(m is x for x in mods):
            mods.append(m)
    return mods


def _config_theta(cfg, layer_type: str | None) -> float | None:
    params = getattr(cfg, "rope_parameters", None)
    if isinstance(params, dict) and layer_type is not None and isinstance(params.get(layer_type), dict):
        params = params[layer_type]
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    if theta is None and layer_type is None:
        theta = getattr(cfg, "rope_theta", None)
    return None if theta is None else float(theta)


def model_thetas(model: nn.Module) -> dict[str | None, float]:
    """The model's RoPE base per layer type (``{None: θ}`` for one rotary for all layers, Gemma-3:
    ``{"sliding_attention": 1e4, "full_attention": 1e6}``); a posym GPT-J's is its variant base."""
    inner, mt = _family(model)
    if mt == "gptj":
        return {None: float(config_pe(inner.config).theta)}
    out: dict[str | None, float] = {}
    for m, attr, lt in _rope_tables(inner):
        where = f" for {lt} layers" if lt else ""
        theta = _config_theta(inner.config, lt)
        if theta is None:
            raise PosymError(f"rope-base: {mt} config has no rope_theta{where}")
        table = getattr(m, attr).detach().float().cpu()
        if not torch.allclose(table, _default_inv_freq(theta, 2 * table.numel()), rtol=1e-2, atol=0):
            # e.g. a second rotary module with its own base (Gemma-3 on transformers 4.x)
            raise PosymError(f"rope-base: a rotary table of {mt}{where} does not match the config's "
                             f"rope_theta={theta:g}, so its base is unknown; use a model whose rotaries follow its config")
        out[lt] = theta
    return out


def model_theta(model: nn.Module) -> float:
    """The model's RoPE base θ: a posym GPT-J's variant base (10,000 unless trained with
    ``--pe rope-base:θ``), else the config's ``rope_theta``; one-line PosymError for a model with
    several bases (:func:`model_thetas`)."""
    thetas = model_thetas(model)
    if len(set(thetas.values())) > 1:
        bases = ", ".join(f"{lt} {t:g}" for lt, t in thetas.items())
        raise PosymError(f"rope-base: the model has {len(thetas)} RoPE bases ({bases}), so one theta is ambiguous; "
                         "use ntk:kappa=K, which scales each base")
    return next(iter(thetas.values()))


def rotary_dim(model: nn.Module) -> int:
    """The rotary dimension d (rotated components per head)."""
    inner, mt = _family(model)
    if mt == "gptj":
        return int(_gptj_tables(inner)[0].embed_positions.shape[1])
    m, name, _ = _rope_tables(inner)[0]
    return 2 * int(getattr(m, name).numel())


def gptj_table(model: nn.Module, n_pos: int, dim: int, *, theta: float | None = None, position_scale: float = 1.0) -> Tensor:
    """The model's GPT-J rotary table (its training-time variant, :mod:`posym.model.pe`) with another
    base θ′ and/or fractional positions ``p·c``; bit-identical to the model's own table at θ′ = θ, c = 1."""
    return gptj_rotary_table(config_pe(unwrap_model(model).config), n_pos, dim, theta=theta,
                             position_scale=position_scale)


def _default_inv_freq(theta: float, dim: int) -> Tensor:
    """transformers' default RoPE ``inv_freq`` with base θ (``compute_default_rope_parameters``)."""
    return 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))


@contextmanager
def _bases(model: nn.Module, theta_of: Callable[[float], float]) -> Iterator[None]:
    """Every rotary table rebuilt with the base ``theta_of(θ)`` of its own base θ (a table whose base
    does not change keeps its tensor); the original tensors restored on exit."""
    inner, mt = _family(model)
    if mt == "gptj":
        theta = theta_of(model_theta(inner))
        mods = _gptj_tables(inner)
        saved = [(m, "embed_positions", m.embed_positions) for m in mods]
        new = [gptj_table(inner, t.shape[0], t.shape[1], theta=theta).to(t.device, t.dtype) for _, _, t in saved]
    else:
        thetas = model_thetas(inner)
        saved, new = [], []
        for m, attr, lt in _rope_tables(inner):
            t = getattr(m, attr)
            theta = theta_of(thetas[lt])
            saved.append((m, attr, t))
            new.append(t if theta == thetas[lt] else _default_inv_freq(theta, 2 * t.numel()).to(t.device, t.dtype))
    current = {(id(m), attr): t for (m, attr, _), t in zip(saved, new)}

    def keep_base(module, args, kwargs):
        # A table rebuilt inside the context (e.g. extend_positions past the training length) would use
        # base 10,000 again: rebuild it with θ′ at its new length before the forward reads it.
        for m, attr, _ in saved:
            t = getattr(m, attr)
            if t is not current[(id(m), attr)]:
                t = gptj_table(inner, t.shape[0], t.shape[1], theta=theta).to(t.device, t.dtype)
                setattr(m, attr, t)
                current[(id(m), attr)] = t
        return None

    handle = inner.register_forward_pre_hook(keep_base, with_kwargs=True) if mt == "gptj" else None
    try:
        for (m, attr, _), t in zip(saved, new):
            setattr(m, attr, t)
        yield
    finally:
        if handle is not None:
            handle.remove()
        for m, attr, t in saved:
            setattr(m, attr, t)


def selected_heads(model: nn.Module, layers: Sequence[int] | None, heads: Sequence[tuple[int, int]] | None,
                   name: str) -> tuple[tuple[int, int], ...] | None:
    """The query heads a rotary intervention acts on: ``heads`` (checked), every head of ``layers``, or
    None for every layer (the whole-model tables); one-line PosymError for both or a bad pair/layer."""
    from posym.interventions.rotary_heads import layer_heads

    heads = check_heads_arg(heads, layers, name)
    if heads is None and layers is not None:
        return layer_heads(model, layers, name)
    return heads


@with_full_forward
@contextmanager
def rope_base(model: nn.Module, theta: float, *, layers: Sequence[int] | None = None,
              heads: Sequence[tuple[int, int]] | None = None) -> Iterator[RopeBase]:
    """Context manager: the RoPE base set to θ′ = ``theta`` (rotary tables rebuilt, weights untouched) on
    every layer, or with ``layers`` / ``heads`` on those query heads only (a delta rotation of their q and
    k, :mod:`posym.interventions.rotary_heads`); restored on exit. A model with several bases (Gemma-3)
    is refused in one line (use :func:`ntk`)."""
    from posym.interventions.rotary_heads import rotary_heads

    theta = check_theta(theta)
    sel = selected_heads(model, layers, heads, "rope-base")
    model_theta(model)  # one base, or a one-line error
    applied = RopeBase(theta=theta, layers=None if layers is None else tuple(int(l) for l in layers),
                       heads=None if heads is None else sel)
    if sel is not None:
        new = lambda base, dim, pe: gptj_inv_freq(pe, dim, theta) if pe is not None else _default_inv_freq(theta, dim)  # noqa: E731
        with rotary_heads(model, sel, applied.canonical(), new):
            yield applied
        return
    with _bases(model, lambda _: theta):
        yield applied


@with_full_forward
@contextmanager
def ntk(model: nn.Module, kappa: float, *, layers: Sequence[int] | None = None,
        heads: Sequence[tuple[int, int]] | None = None) -> Iterator[Ntk]:
    """Context manager: every rotary's base θ (each layer type's own, Gemma-3) set to the NTK-aware
    θ·κ^{d/(d−2)}, d the rotary dim — on every layer, or with ``layers`` / ``heads`` on those query heads
    only (:mod:`posym.interventions.rotary_heads`); κ = 1 leaves the logits unchanged. Yields the
    applied :class:`Ntk` (its ``theta`` None when the model has several bases)."""
    from posym.interventions.rotary_heads import rotary_heads

    kappa = check_kappa(kappa)
    sel = selected_heads(model, layers, heads, "ntk")
    d = rotary_dim(model)
    thetas = set(model_thetas(model).values())
    applied = Ntk(theta=ntk_theta(thetas.pop(), kappa, d) if len(thetas) == 1 else None, kappa=kappa,
                  layers=None if layers is None else tuple(int(l) for l in layers), heads=None if heads is None else sel)
    if sel is not None:
        def new(base: float, dim: int, pe) -> Tensor:
            t = ntk_theta(base, kappa, dim)
            return gptj_inv_freq(pe, dim, t) if pe is not None else _default_inv_freq(t, dim)
        with rotary_heads(model, sel, applied.canonical(), new):
            yield applied
        return
    with _bases(model, lambda theta: ntk_theta(theta, kappa, d)):
        yield applied


__all__ = ["ROPE_FAMILIES", "GPTJ_BASE", "RopeBase", "Ntk", "check_theta", "check_kappa", "ntk_theta", "model_theta",
           "model_thetas", "rotary_dim", "gptj_table", "rope_base", "ntk", "parse_layers_key", "selection_suffix",
           "selection_words", "selected_heads"]
