"""Length-dependent attention temperature: the chosen layers' logits of the query at position ``p``
(context length ``n = p + 1``) times ``s(n) = 1 + β·ln(n / n_train)`` (``form="log"``, the log-n
temperature laws) or ``s(n) = β·ln n`` (``form="ssmax"``, Scalable-Softmax, Nakanishi 2025,
arXiv 2501.19399).

Exact for the eager path: the query projection's output of position ``p`` is multiplied by ``s(p+1)``
by a forward hook on ``q_proj``. RoPE rotates q linearly and the logit is linear in q, so the row of
logits of that query is multiplied by ``s`` and nothing else changes; the same hook feeds the q that
:mod:`posym.heads.scores` captures, so the fast and the reference score paths see the same change.
This holds only where nothing non-linear acts on q between ``q_proj`` and the logit (no q/k norm, no
q clipping, no logit soft-capping): :data:`TEMPERATURE_FAMILIES`. Positions are the token indices of
the forward's input (a full sequence, no KV cache, no left padding), as posym's scoring and
length-generalisation runs use.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from posym.errors import PosymError
from posym.model.adapters import get_adapter, unwrap_model

#: model_type values whose attention logit is linear in the ``q_proj`` output (see the module docstring).
TEMPERATURE_FAMILIES: tuple[str, ...] = ("gptj", "llama", "mistral", "qwen2")
FORMS: tuple[str, ...] = ("log", "ssmax")


@dataclass(frozen=True)
class Temperature:
    """The parameters of a temperature intervention (``layers`` None = every layer)."""

    beta: float
    n_train: int
    form: str = "log"
    layers: tuple[int, ...] | None = None


def check_temperature(beta: float, n_train: int, form: str) -> tuple[float, int, str]:
    """``(beta, n_train, form)`` checked: β finite, ``n_train`` an integer ≥ 1, ``form`` one of :data:`FORMS`."""
    try:
        b = float(beta)
    except (TypeError, ValueError):
        raise PosymError(f"temperature: beta={beta!r} is not a number; give a finite float such as beta=1") from None
    if not math.isfinite(b):
        raise PosymError(f"temperature: beta={beta!r} must be finite; give e.g. beta=1")
    if isinstance(n_train, bool) or not isinstance(n_train, int) or n_train < 1:
        raise PosymError(f"temperature: n_train={n_train!r} must be an integer >= 1 (the training length, 17 for posym runs)")
    if form not in FORMS:
        raise PosymError(f"temperature: form={form!r} is not one of {', '.join(FORMS)}")
    return b, n_train, form


def temperature_scale(n: Tensor, beta: float, n_train: int, form: str = "log") -> Tensor:
    """``s(n)`` for context lengths ``n`` (float64): ``1 + β·ln(n / n_train)`` or ``β·ln n`` (SSMax)."""
    beta, n_train, form = check_temperature(beta, n_train, form)
    n = n.to(torch.float64)
    if form == "ssmax":
        return beta * torch.log(n)
    return 1.0 + beta * torch.log(n / n_train)


def _q_projections(model: nn.Module, layers: Sequence[int] | None) -> list[nn.Module]:
    inner = unwrap_model(model)
    mt = getattr(getattr(inner, "config", None), "model_type", None)
    if mt not in TEMPERATURE_FAMILIES:
        raise PosymError(f"temperature: model_type={mt!r} is not supported (the logit must be linear in q_proj); "
                         f"supported: {', '.join(TEMPERATURE_FAMILIES)}")
    ad = get_adapter(inner)
    out = []
    for layer in ad.check_layers(layers):
        q = getattr(ad.attention_module(layer), "q_proj", None)
        if not isinstance(q, nn.Module):
            raise PosymError(f"temperature: layer {layer} of {mt} has no q_proj; supported: {', '.join(TEMPERATURE_FAMILIES)}")
        out.append(q)
    return out


def _scale_hook(beta: float, n_train: int, form: str):
    def hook(module: nn.Module, args, out: Tensor) -> Tensor:
        T = out.shape[-2]
        s = temperature_scale(torch.arange(1, T + 1, device=out.device), beta, n_train, form)
        return out * s.to(out.dtype)[:, None]
    return hook


@contextmanager
def temperature(model: nn.Module, beta: float, *, n_train: int, layers: Sequence[int] | None = None,
                form: str = "log") -> Iterator[Temperature]:
    """Context manager: the attention logits of ``layers`` (None = all) times ``s(n)`` (module docstring)
    for the duration; the hooks are removed on exit, also after an exception. β = 0 with ``form="log"``
    multiplies by exactly 1.0, a bit-for-bit no-op. Yields the :class:`Temperature` applied."""
    beta, n_train, form = check_temperature(beta, n_train, form)
    projections = _q_projections(model, layers)
    applied = Temperature(beta, n_train, form, None if layers is None else tuple(int(l) for l in layers))
    handles = []
    try:
        for q in projections:
            handles.append(q.register_forward_hook(_scale_hook(beta, n_train, form)))
        yield applied
    finally:
        for h in handles:
            h.remove()


__all__ = ["TEMPERATURE_FAMILIES", "FORMS", "Temperature", "check_temperature", "temperature_scale", "temperature"]
