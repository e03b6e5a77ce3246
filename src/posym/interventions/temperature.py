"""Length-dependent attention temperature: the chosen layers' logits of the query at position ``p``
(context length ``n = p + 1``) times

* ``form="log"`` (the log-n temperature laws), floored (the default, ``floor=1``):
  ``s(n) = max(1, 1 + β·ln(n / n_train))``, so queries with ``n ≤ n_train`` keys are untouched and later
  ones sharpened (as Llama-4's temperature tuning, ``≥ 1`` by construction); unfloored (``floor=0``):
  ``s(n) = 1 + β·ln(n / n_train)``, below 1 for ``n < n_train`` and negative for the first queries when
  ``β > 1/ln(n_train)`` (β = 0.5, n_train = 17: ``s(2) = −0.07``), which inverts their attention;
* ``form="ssmax"``: ``s(n) = β·ln n`` (Scalable-Softmax, Nakanishi 2025, arXiv 2501.19399; no floor);
* ``form="llama4"``: ``s(n) = ln(⌊n / floor_scale⌋ + 1)·attn_scale + 1`` (transformers'
  ``Llama4TextAttention`` temperature tuning of its NoPE layers, computed as it does in float32;
  ``≥ 1``). Its string is ``temperature:form=llama4,floor_scale=S,attn_scale=A``; the class stores
  ``attn_scale`` as ``beta`` and ``floor_scale`` as ``n_train``.

β must be in ``[0, MAX_BETA]`` (:data:`MAX_BETA`): a negative β is no temperature law (its scale turns
negative at long contexts), and a larger one overflows float32 logits.

Exact for the eager path: the query of position ``p`` is multiplied by ``s(p+1)`` by a forward hook
where the adapter captures q (``q_proj``, or the q norm of Qwen3 / Gemma-3: after it q is linear up to
the logit; :mod:`posym.interventions.sites`). RoPE rotates q linearly and the logit is linear in q, so
the row of logits of that query is multiplied by ``s`` and nothing else changes; the hook runs before
the capture hook of :mod:`posym.heads.scores`, so the fast and the reference score paths see the same
change. This holds only where nothing non-linear acts on q after that point (no q clipping, no logit
soft-capping): :data:`TEMPERATURE_FAMILIES`. ``n`` is the number of keys the query attends, read from the
forward's call (:class:`posym.interventions.positions.ForwardPositions`): the running sum of its 2-D padding mask,
or the KV cache's length plus the token index plus 1 — so the temperature is exact under a KV cache and padding
(``exact_under_kv_cache``); on a full forward without padding it is the token index plus 1.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ContextManager, Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from posym.checks import check_float
from posym.errors import PosymError
from posym.interventions.registry import (DEFAULT_N_TRAIN, MAX_N_TRAIN, Intervention, check_heads_arg, format_head_pairs,
                                          format_ids, format_number, parse_heads_key, parse_ids, register)
from posym.interventions.positions import ForwardPositions
from posym.interventions.sites import (LINEAR_QK_FAMILIES, head_sites, hook_qk, linear_sites, scale_token_heads, time_axis,
                                       with_full_forward)

#: model_type values whose attention logit is linear in the captured q (:mod:`posym.interventions.sites`).
TEMPERATURE_FAMILIES: tuple[str, ...] = LINEAR_QK_FAMILIES
FORMS: tuple[str, ...] = ("log", "ssmax", "llama4")
#: Llama-4's defaults (``Llama4TextConfig``): ``floor_scale`` 8192, ``attn_scale`` 0.1.
LLAMA4_FLOOR_SCALE, LLAMA4_ATTN_SCALE = 8192, 0.1
#: The largest β accepted: ``s(n) ≤ 1 + 1000·ln(10⁹/1) ≈ 2·10⁴``, so float32 logits keep their range.
MAX_BETA = 1000.0


@register("temperature")
@dataclass(frozen=True)
class Temperature(Intervention):
    """The parameters of a temperature intervention (``layers`` None = every layer; ``floor``: the log
    form's scale floored at 1, the default; ignored by ``form="ssmax"``;
    ``heads``: ``(layer, query head)`` pairs, None = every head of ``layers``)."""

    beta: float
    n_train: int
    form: str = "log"
    layers: tuple[int, ...] | None = None
    floor: bool = True
    heads: tuple[tuple[int, int], ...] | None = None

    keys = ("beta", "n_train", "floor", "form", "layers", "floor_scale", "attn_scale", "heads")
    example = "temperature:beta=1"
    per_layer = True
    per_head = True
    exact_under_kv_cache = True  # n read from the forward's padding mask and KV cache (module docstring)

    @classmethod
    def parse(cls, kv: Mapping[str, str]) -> Temperature:
        """``beta`` (required, in [0, 1000]), ``n_train`` (default 17), ``floor`` (``1``, the default:
        s ≥ 1; ``0``: unfloored; log form only), ``form``, ``layers`` (``0+2``); ``form=llama4`` takes
        ``floor_scale`` (default 8192) and ``attn_scale`` (default 0.1) instead of beta, n_train and floor."""
        if kv.get("form") == "llama4" or "floor_scale" in kv or "attn_scale" in kv:
            beta, n_train, form, layers = _parse_llama4(kv)
            return cls(beta, n_train, form, layers, True, parse_heads_key(kv, layers))
        if "beta" not in kv:
            raise PosymError("temperature needs beta, e.g. temperature:beta=1")
        try:
            n_train = int(kv.get("n_train", DEFAULT_N_TRAIN))
            layers = parse_ids(kv["layers"]) if "layers" in kv else None
        except ValueError:
            raise PosymError("temperature: n_train and layers must be integers (layers joined by '+', e.g. layers=0+2)") from None
        beta, n_train, form = check_temperature(kv["beta"], n_train, kv.get("form", FORMS[0]))
        if "floor" in kv and form != "log":
            raise PosymError(f"temperature: floor applies to the log form only (form={form} is never floored); drop floor=")
        if kv.get("floor", "1") not in ("0", "1"):
            raise PosymError("temperature: floor must be 1 (s(n) = max(1, 1 + beta*ln(n/n_train)), the default) "
                             "or 0 (unfloored)")
        heads = parse_heads_key(kv, layers)
        return cls(beta, n_train, form, layers, kv.get("floor", "1") == "1", heads)

    def canonical(self) -> str:
        """``temperature:beta=B,n_train=N`` then ``floor=0|1`` (log form, always written) or
        ``form=ssmax``, then ``layers=…`` when restricted."""
        if self.form == "llama4":
            parts = ["form=llama4", f"floor_scale={self.n_train}", f"attn_scale={format_number(self.beta)}"]
            parts += [f"layers={format_ids(self.layers)}"] if self.layers is not None else []
            parts += ["heads=" + format_head_pairs(self.heads)] if self.heads is not None else []
            return "temperature:" + ",".join(parts)
        parts = [f"beta={format_number(self.beta)}", f"n_train={self.n_train}"]
        parts.append(f"floor={int(bool(self.floor))}" if self.form == "log" else f"form={self.form}")
        if self.layers is not None:
            parts.append("layers=" + format_ids(self.layers))
        if self.heads is not None:
            parts.append("heads=" + format_head_pairs(self.heads))
        return "temperature:" + ",".join(parts)

    def describe(self) -> str:
        law = {"log": f"{'max(1, ' if self.floor else '('}1 + {self.beta:g}·ln(n/{self.n_train}))",
               "ssmax": f"{self.beta:g}·ln n",
               "llama4": f"(ln(floor(n/{self.n_train}) + 1)·{self.beta:g} + 1) (Llama-4)"}[self.form]
        where = "every layer" if self.layers is None else "layers " + format_ids(self.layers)
        if self.heads is not None:
            where = "query heads " + format_head_pairs(self.heads)
        return f"attention logits of the query with n keys times {law} in {where}"

    def apply(self, model: nn.Module) -> ContextManager[Temperature]:
        return temperature(model, self.beta, n_train=self.n_train, layers=self.layers, form=self.form, floor=self.floor,
                           heads=self.heads)

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any]:
        """The logits times ``s(n)`` (:func:`temperature_scale`)."""
        return {"logit_scale": lambda ns: temperature_scale(torch.as_tensor(ns), self.beta, self.n_train, self.form,
                                                            self.floor).numpy()}


def _parse_llama4(kv: Mapping[str, str]) -> tuple[float, int, str, tuple[int, ...] | None]:
    """``(attn_scale, floor_scale, "llama4", layers)`` of a ``form=llama4`` spec; one-line PosymError for
    the other forms' keys or a Llama-4 key with another form."""
    if kv.get("form") != "llama4":
        raise PosymError("temperature: floor_scale and attn_scale belong to form=llama4; add form=llama4 or drop them")
    other = [k for k in ("beta", "n_train", "floor") if k in kv]
    if other:
        raise PosymError(f"temperature: form=llama4 takes floor_scale and attn_scale, not {', '.join(other)} "
                         "(e.g. temperature:form=llama4,floor_scale=8192,attn_scale=0.1)")
    try:
        floor_scale = int(kv.get("floor_scale", LLAMA4_FLOOR_SCALE))
        layers = parse_ids(kv["layers"]) if "layers" in kv else None
    except ValueError:
        raise PosymError("temperature: floor_scale and layers must be integers (layers joined by '+', e.g. layers=0+2)") from None
    attn_scale, floor_scale, form = check_temperature(kv.get("attn_scale", LLAMA4_ATTN_SCALE), floor_scale, "llama4")
    return attn_scale, floor_scale, form, layers


def check_temperature(beta: float, n_train: int, form: str) -> tuple[float, int, str]:
    """``(beta, n_train, form)`` checked: β in ``[0, MAX_BETA]`` (> 0 for SSMax), ``n_train`` an integer
    in ``1..MAX_N_TRAIN``, ``form`` one of :data:`FORMS`; a one-line PosymError otherwise. For
    ``form="llama4"`` β is ``attn_scale`` and ``n_train`` is ``floor_scale`` (same ranges, named so)."""
    if form == "llama4":
        a = check_float(beta, "temperature: attn_scale", 0, MAX_BETA, hint=" (Llama-4's is 0.1)")
        if isinstance(n_train, bool) or not isinstance(n_train, int) or not 1 <= n_train <= MAX_N_TRAIN:
            raise PosymError(f"temperature: floor_scale={n_train!r} must be an integer >= 1 and <= {MAX_N_TRAIN:.0e} "
                             "(Llama-4's is 8192)")
        return a, n_train, form
    b = check_float(beta, "temperature: beta", hint="; give a finite float such as beta=1")
    if not 0 <= b <= MAX_BETA:
        raise PosymError(f"temperature: beta={beta!r} must be finite and in [0, {MAX_BETA:g}] (a negative beta turns the scale "
                         "negative at long contexts, a larger one overflows float32 logits); give e.g. beta=1")
    if isinstance(n_train, bool) or not isinstance(n_train, int) or not 1 <= n_train <= MAX_N_TRAIN:
        raise PosymError(f"temperature: n_train={n_train!r} must be an integer >= 1 and <= {MAX_N_TRAIN:.0e} "
                         "(the training length, 17 for posym runs)")
    if form not in FORMS:
        raise PosymError(f"temperature: form={form!r} is not one of {', '.join(FORMS)}")
    if form == "ssmax" and b == 0:
        raise PosymError("temperature: beta=0 with form=ssmax sets every logit to 0 (uniform attention); "
                         "give beta > 0, e.g. beta=0.35 (1/ln 17)")
    return b, n_train, form


def temperature_scale(n: Tensor, beta: float, n_train: int, form: str = "log", floor: bool = True) -> Tensor:
    """``s(n)`` for context lengths ``n`` (float64): ``max(1, 1 + β·ln(n / n_train))`` (``floor``, the
    default), ``1 + β·ln(n / n_train)`` (``floor=False``), ``β·ln n`` (SSMax, never floored) or
    ``ln(⌊n / n_train⌋ + 1)·β + 1`` (``form="llama4"``: β = attn_scale, n_train = floor_scale; in
    float32 with transformers' expression, then widened, so its values are Llama-4's bit for bit)."""
    beta, n_train, form = check_temperature(beta, n_train, form)
    if form == "llama4":  # Llama4TextAttention: log1p(floor((positions + 1) / floor_scale)) * attn_scale + 1
        return (torch.log1p(torch.floor(n.to(torch.float32) / n_train)) * beta + 1.0).to(torch.float64)
    n = n.to(torch.float64)
    if form == "ssmax":
        return beta * torch.log(n)
    s = 1.0 + beta * torch.log(n / n_train)
    return s.clamp(min=1.0) if floor else s


def _scale_q(beta: float, n_train: int, form: str, floor: bool, track: ForwardPositions,
             heads: tuple[int, ...] | None = None):
    """``q_fn`` of :func:`~posym.interventions.sites.hook_qk`: each query (of ``heads`` only, None = all;
    every other head's times exactly 1.0, bit-identical) times ``s(n)``, ``n`` the keys it attends
    (:meth:`~posym.interventions.positions.ForwardPositions.key_counts`: padding and a KV cache included)."""
    def scale(out: Tensor, n_heads: int, heads_first: bool) -> Tensor:
        T = out.shape[time_axis(out, n_heads, heads_first)]
        s = temperature_scale(track.key_counts(T, out.shape[0], out.device), beta, n_train, form, floor)  # [B|1, T]
        if heads is None:
            return scale_token_heads(out, s[..., None], n_heads, heads_first)
        m = torch.ones(*s.shape, n_heads, dtype=s.dtype, device=s.device)
        m[..., list(heads)] = s[..., None]
        return scale_token_heads(out, m, n_heads, heads_first)
    return scale


@with_full_forward
@contextmanager
def temperature(model: nn.Module, beta: float, *, n_train: int, layers: Sequence[int] | None = None,
                form: str = "log", floor: bool = True,
                heads: Sequence[tuple[int, int]] | None = None) -> Iterator[Temperature]:
    """Context manager: the attention logits of ``layers`` (None = all) times ``s(n)`` (module docstring;
    ``floor``: the log form floored at 1, the default) for the duration; the hooks are removed on exit,
    also after an exception. β = 0 with ``form="log"`` multiplies by exactly 1.0, a bit-for-bit no-op, and
    so does the floored form on every query with ``n ≤ n_train`` keys. ``heads``: ``(layer, query head)``
    pairs (not with ``layers``): only those heads' queries are scaled; under GQA the shared key/value
    heads and the other query heads are untouched (docs/interventions.md, "Head selections").
    Yields the :class:`Temperature` applied."""
    beta, n_train, form = check_temperature(beta, n_train, form)
    floor = bool(floor)
    heads = check_heads_arg(heads, layers, "temperature")
    if heads is not None:
        ad, per_layer = head_sites(model, heads, "temperature")
    else:
        ad, sites = linear_sites(model, layers, "temperature")
    applied = Temperature(beta, n_train, form, None if layers is None else tuple(int(l) for l in layers), floor, heads)
    track = ForwardPositions(model, "temperature")
    handles = track.attach(positions=False)
    try:
        if heads is None:
            handles += hook_qk(ad, sites, _scale_q(beta, n_train, form, floor, track), None)
        else:
            for site, hs in per_layer:
                handles += hook_qk(ad, [site], _scale_q(beta, n_train, form, floor, track, hs), None)
        yield applied
    finally:
        for h in handles:
            h.remove()


__all__ = ["TEMPERATURE_FAMILIES", "FORMS", "MAX_BETA", "MAX_N_TRAIN", "Temperature", "check_temperature",
           "temperature_scale", "temperature", "LLAMA4_FLOOR_SCALE", "LLAMA4_ATTN_SCALE"]
