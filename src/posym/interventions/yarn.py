"""YaRN (Peng et al. 2023, arXiv 2309.00071) at inference: every rotary table rebuilt with YaRN's
inverse frequencies and multiplied by its attention factor, for the duration — exactly what
transformers does for a config with ``rope_parameters={"rope_type": "yarn", …}``
(``modeling_rope_utils._compute_yarn_parameters``, the same code in transformers 5.17 and 5.25).

For a rotary of ``d`` dims and base ``b`` (per layer type on Gemma-3), with ``F = factor`` and
``N = original`` (the pre-training context):

* the correction dims ``c(β) = d·ln(N / (2π·β)) / (2·ln b)`` of ``beta_fast`` (low) and
  ``beta_slow`` (high), floored / ceiled when ``truncate`` (the default), clamped to ``[0, d − 1]``;
* the ramp ``ρ_j = clamp((j − low) / (high − low), 0, 1)`` over pair ``j = 0..d/2 − 1`` and the
  extrapolation weight ``γ_j = 1 − ρ_j``: fast pairs (``γ = 1``) keep their frequency, slow pairs
  (``γ = 0``) are interpolated by ``F``;
* ``inv_freq_j = (1/(F·b^(2j/d)))·(1 − γ_j) + (1/b^(2j/d))·γ_j``;
* the attention factor ``a`` (``attention_factor``, else ``mscale(F, mscale)/mscale(F, mscale_all_dim)``
  when both are given, else ``mscale(F) = 0.1·ln F + 1``, 1 for ``F ≤ 1``) multiplies cos and sin, so
  q and k's rotary dims each by ``a`` and a fully rotary logit by ``a²``.

How: the ``inv_freq`` (``{layer_type}_inv_freq``) buffers of the default-RoPE rotaries of
:data:`~posym.interventions.rope.ROPE_FAMILIES` are replaced by new tensors and their
``attention_scaling`` set to ``a``, as transformers' own YaRN rotary holds them; GPT-J's sinusoidal
table is rebuilt as ``a·[sin | cos](p·inv_freq)`` (the pairs a p-RoPE / NoPE run does not rotate stay
unrotated), also when it is extended inside the context. The original tensors and values are put back
on exit, also after an exception. The score engine reads the same rotary (``RopeAdapter.cos_sin``), so
the fast and reference head scores see the change. With ``layers=`` / ``heads=`` only those query heads
change, by a delta rotation of their q and k (:mod:`posym.interventions.rotary_heads`). ``factor=1`` keeps every table (and with no
attention factor other than 1, the logits) bit for bit. Exact under a KV cache: it changes the rotation
at absolute positions."""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ContextManager, Iterator, Mapping

import numpy as np
import torch
from torch import Tensor, nn

from posym.checks import check_float, check_int
from posym.errors import PosymError
from posym.interventions.registry import MAX_N_TRAIN, Intervention, format_number, parse_heads_key, register
from posym.interventions.rope import (_family, _gptj_tables, _rope_tables, gptj_table, model_thetas, parse_layers_key,
                                      selected_heads, selection_suffix, selection_words)
from posym.interventions.rotary_heads import rotary_heads
from posym.interventions.sites import with_full_forward
from posym.model.pe import config_pe, gptj_inv_freq

#: transformers' defaults of the ramp's bounds (rotations per original context).
BETA_FAST, BETA_SLOW = 32.0, 1.0
#: The largest ``factor`` (as interpolate's) and attention factor / mscale accepted.
MAX_FACTOR, MAX_ATTENTION_FACTOR = 1e6, 1e3


@register("yarn")
@dataclass(frozen=True)
class Yarn(Intervention):
    """YaRN with ``factor`` F and ``original`` context N (module docstring); the optional fields as
    transformers' ``rope_parameters`` keys of the same names (``truncate`` True by default; ``mscale``
    and ``mscale_all_dim`` given together or not at all; ``attention_factor`` overrides both)."""

    factor: float
    original: int
    beta_fast: float = BETA_FAST
    beta_slow: float = BETA_SLOW
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    truncate: bool = True
    layers: tuple[int, ...] | None = None
    heads: tuple[tuple[int, int], ...] | None = None

    keys = ("factor", "original", "beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate",
            "layers", "heads")
    example = "yarn:factor=4,original=17"
    per_layer = True
    per_head = True
    exact_under_kv_cache = True  # new angles at absolute positions (a selection reads the model's position ids)

    def __post_init__(self) -> None:
        check_yarn(self)

    @classmethod
    def parse(cls, kv: Mapping[str, str]) -> Yarn:
        """``factor`` and ``original`` (required), ``beta_fast``, ``beta_slow``, ``attention_factor``,
        ``mscale`` + ``mscale_all_dim``, ``truncate`` (1 | 0)."""
        missing = [k for k in ("factor", "original") if k not in kv]
        if missing:
            raise PosymError(f"yarn needs {' and '.join(missing)}, e.g. yarn:factor=4,original=17")
        try:
            original = int(kv["original"])
        except ValueError:
            raise PosymError(f"yarn: original={kv['original']!r} must be an integer (the pre-training context "
                             "length, e.g. original=17)") from None
        if kv.get("truncate", "1") not in ("0", "1"):
            raise PosymError("yarn: truncate must be 1 (floor/ceil the correction dims, transformers' default) or 0")
        opt = {k: kv[k] for k in ("attention_factor", "mscale", "mscale_all_dim") if k in kv}
        layers = parse_layers_key(kv, "yarn")
        return cls(kv["factor"], original, kv.get("beta_fast", BETA_FAST), kv.get("beta_slow", BETA_SLOW),
                   truncate=kv.get("truncate", "1") == "1", layers=layers, heads=parse_heads_key(kv, layers), **opt)

    def canonical(self) -> str:
        """``yarn:factor=F,original=N`` then each optional key that differs from its default, in
        :attr:`keys` order."""
        parts = [f"factor={format_number(self.factor)}", f"original={self.original}"]
        for key, default in (("beta_fast", BETA_FAST), ("beta_slow", BETA_SLOW), ("attention_factor", None),
                             ("mscale", None), ("mscale_all_dim", None)):
            value = getattr(self, key)
            if value is not None and value != default:
                parts.append(f"{key}={format_number(value)}")
        if not self.truncate:
            parts.append("truncate=0")
        return "yarn:" + ",".join(parts) + selection_suffix(self)

    def describe(self) -> str:
        where = "" if self.layers is None and self.heads is None else f" in {selection_words(self)}"
        return (f"YaRN: RoPE frequencies blended between x1 and /{self.factor:g} by a ramp over original context "
                f"{self.original}, logits x{self.scaling() ** 2:.4g} (attention factor {self.scaling():.4g}){where}")

    def scaling(self) -> float:
        """The attention factor ``a`` that multiplies cos and sin (transformers' ``attention_scaling``)."""
        return yarn_attention_factor(self.factor, self.attention_factor, self.mscale, self.mscale_all_dim)

    def apply(self, model: nn.Module) -> ContextManager[Yarn]:
        return yarn(model, self)

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any]:
        """Frequency ID ``i`` times ``inv_freq′_i / inv_freq_i = (1 − γ)/F + γ`` (its ramp), every
        logit of the one-plane constructions times ``a²``."""
        gamma = 1.0 - yarn_ramp(self, base, rotary_dim).numpy().astype(np.float64)
        ratio = (1.0 - gamma) / self.factor + gamma
        a2 = self.scaling() ** 2
        return {"freq_ratio": lambda i: float(ratio[int(i) - 1]),
                "logit_scale": lambda ns: np.full(np.shape(ns), a2, dtype=np.float64)}


def check_yarn(spec: Yarn) -> None:
    """Normalise and check ``spec``'s fields in place (frozen dataclass): one-line PosymError for a
    factor outside [1, 1e6], ``original`` outside 1..1e9, β's not finite and > 0 or ``beta_fast <
    beta_slow``, an attention factor or mscale not in (0, 1e3], mscale without mscale_all_dim."""
    set_ = object.__setattr__
    set_(spec, "factor", check_float(spec.factor, "yarn: factor", 1, MAX_FACTOR, hint=" (1 = no change), e.g. factor=4"))
    original = check_int(spec.original, "yarn: original", 1)
    if original > MAX_N_TRAIN:
        raise PosymError(f"yarn: original={original} must be <= {MAX_N_TRAIN:.0e} (the pre-training context length)")
    set_(spec, "original", original)
    for key in ("beta_fast", "beta_slow"):
        set_(spec, key, check_float(getattr(spec, key), f"yarn: {key}", 0, MAX_ATTENTION_FACTOR, lo_open=True,
                                    hint=" (rotations per original context; defaults 32 and 1)"))
    if spec.beta_fast < spec.beta_slow:
        raise PosymError(f"yarn: beta_fast={spec.beta_fast:g} must be >= beta_slow={spec.beta_slow:g} "
                         "(the fast bound of the ramp; defaults 32 and 1)")
    for key in ("attention_factor", "mscale", "mscale_all_dim"):
        if getattr(spec, key) is not None:
            set_(spec, key, check_float(getattr(spec, key), f"yarn: {key}", 0, MAX_ATTENTION_FACTOR, lo_open=True))
    if (spec.mscale is None) != (spec.mscale_all_dim is None):
        raise PosymError("yarn: give mscale and mscale_all_dim together (transformers uses them only as a pair), "
                         "or attention_factor=A")
    if spec.attention_factor is not None and spec.mscale is not None:
        raise PosymError("yarn: attention_factor overrides mscale/mscale_all_dim; give one or the other")
    set_(spec, "truncate", bool(spec.truncate))


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's ``0.1·mscale·ln(scale) + 1`` (Eq. 21), 1 for ``scale ≤ 1`` (transformers' ``yarn_get_mscale``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(factor: float, attention_factor: float | None = None, mscale: float | None = None,
                          mscale_all_dim: float | None = None) -> float:
    """The factor on cos and sin: ``attention_factor`` if given, else ``mscale(F, mscale)/mscale(F,
    mscale_all_dim)`` when both are given, else ``mscale(F)`` (transformers' rule)."""
    if attention_factor is not None:
        return float(attention_factor)
    if mscale and mscale_all_dim:
        return float(yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim))
    return yarn_get_mscale(factor)


def yarn_ramp(spec: Yarn, base: float, dim: int) -> Tensor:
    """The ramp ``ρ`` [dim/2] (float32; 0 = keep the frequency, 1 = divide it by F) of a rotary of
    ``dim`` dims and base ``base``, as transformers computes it."""
    if not base > 1:
        raise PosymError(f"yarn: the RoPE base {base:g} must be > 1 (the correction dims divide by ln base)")

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(spec.original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(spec.beta_fast), correction_dim(spec.beta_slow)
    if spec.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # transformers: prevents a singularity
    return torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)


def yarn_inv_freq(spec: Yarn, base: float, dim: int) -> Tensor:
    """YaRN's inverse frequencies [dim/2] (float32) for base ``base`` and rotary dim ``dim``: the
    expressions of transformers' ``_compute_yarn_parameters``, so equal to its ``inv_freq`` bit for bit."""
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype=torch.float) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (spec.factor * pos_freqs)
    extrapolation_factor = 1 - yarn_ramp(spec, base, dim)
    return inv_freq_interpolation * (1 - extrapolation_factor) + inv_freq_extrapolation * extrapolation_factor


def _gptj_yarn_table(inner: nn.Module, spec: Yarn, n_pos: int, dim: int) -> Tensor:
    """GPT-J's table ``a·[sin | cos](p·inv_freq′)`` [n_pos, dim] of the model's variant base; the
    pairs its variant does not rotate keep angle 0 (sin 0, cos ``a``)."""
    if spec.factor == 1:  # the model's own angles, only scaled
        return gptj_table(inner, n_pos, dim) * spec.scaling()
    pe = config_pe(inner.config)
    inv = yarn_inv_freq(spec, float(pe.theta), dim)
    inv = torch.where(gptj_inv_freq(pe, dim) == 0, torch.zeros_like(inv), inv)
    ang = torch.arange(n_pos, dtype=torch.int64).float()[:, None] * inv
    return torch.cat((torch.sin(ang), torch.cos(ang)), dim=1) * spec.scaling()


def _scaling_attr(attr: str) -> str:
    """The rotary module's attention-factor attribute beside the ``inv_freq`` buffer ``attr``."""
    return attr.replace("inv_freq", "attention_scaling")


@with_full_forward
@contextmanager
def yarn(model: nn.Module, spec: Yarn) -> Iterator[Yarn]:
    """Context manager: every rotary of ``model`` under YaRN ``spec`` (module docstring): new
    ``inv_freq`` tables and ``attention_scaling`` (GPT-J: its table rebuilt, times the factor), the
    originals restored on exit, also after an exception. A family outside
    :data:`~posym.interventions.rope.ROPE_FAMILIES` or a rotary that is not default RoPE is refused in
    one line before anything changes. Yields ``spec``."""
    sel = selected_heads(model, spec.layers, spec.heads, "yarn")
    if sel is not None:
        def new(base: float, dim: int, pe) -> Tensor:
            if pe is None:
                return yarn_inv_freq(spec, base, dim)
            inv = yarn_inv_freq(spec, float(pe.theta), dim)
            return torch.where(gptj_inv_freq(pe, dim) == 0, torch.zeros_like(inv), inv)
        with rotary_heads(model, sel, spec.canonical(), new, attention_factor=spec.scaling()):
            yield spec
        return
    inner, mt = _family(model, "yarn")
    a = spec.scaling()
    saved: list[tuple[nn.Module, str, Any]] = []
    new: list[Any] = []
    if mt == "gptj":
        for m in _gptj_tables(inner):
            t = m.embed_positions
            saved.append((m, "embed_positions", t))
            new.append(t if spec.factor == 1 and a == 1 else _gptj_yarn_table(inner, spec, *t.shape).to(t.device, t.dtype))
    else:
        thetas = model_thetas(inner)  # checks every table is default RoPE with the config's base
        for m, attr, lt in _rope_tables(inner):
            t = getattr(m, attr)
            sc = _scaling_attr(attr)
            if not hasattr(m, sc):
                raise PosymError(f"yarn: the rotary module of {mt} has no {sc} (unsupported transformers version)")
            saved += [(m, attr, t), (m, sc, getattr(m, sc))]
            new += [t if spec.factor == 1 else yarn_inv_freq(spec, thetas[lt], 2 * t.numel()).to(t.device, t.dtype),
                    getattr(m, sc) if a == 1 else a]
    tables = [(m, attr) for m, attr, _ in saved if attr == "embed_positions"]
    current = {(id(m), attr): t for (m, attr, _), t in zip(saved, new)}

    def keep_yarn(module, args, kwargs):
        # A GPT-J table rebuilt inside the context (extend_positions) is rebuilt under YaRN at its length.
        for m, attr in tables:
            t = getattr(m, attr)
            if t is not current[(id(m), attr)]:
                t = _gptj_yarn_table(inner, spec, *t.shape).to(t.device, t.dtype)
                setattr(m, attr, t)
                current[(id(m), attr)] = t
        return None

    handle = inner.register_forward_pre_hook(keep_yarn, with_kwargs=True) if tables else None
    try:
        for (m, attr, _), value in zip(saved, new):
            setattr(m, attr, value)
        yield spec
    finally:
        if handle is not None:
            handle.remove()
        for m, attr, value in reversed(saved):
            setattr(m, attr, value)


__all__ = ["BETA_FAST", "BETA_SLOW", "Yarn", "check_yarn", "yarn_get_mscale", "yarn_attention_factor", "yarn_ramp",
           "yarn_inv_freq", "yarn"]
