"""The interventions a measuring verb runs under (``--intervene SPEC`` repeatable, ``--layers``;
docs/interventions.md, "From the command line"): parsed and checked before any work, one
measurement each, in the order given."""

from __future__ import annotations

from typing import Sequence

from torch import nn

from posym.checks import check_layer_list
from posym.errors import PosymError
from posym.interventions.apply import intervened, with_layers
from posym.interventions.registry import Intervention, per_layer_names
from posym.interventions.spec import describe, parse_intervention


def plan_interventions(intervene: Sequence[str] | str | None = None,
                       layers: Sequence[int] | None = None) -> tuple[Intervention | None, ...]:
    """The parsed interventions of ``intervene`` (canonical strings or ``NAME:key=value`` texts; None or
    empty = the untouched model only, ``(None,)``), ``layers`` applied to each one that acts per layer
    (:func:`~posym.interventions.apply.with_layers`; ``none`` is left as it is). One-line PosymError on a
    bad spec, ``layers`` for an intervention that acts on every layer, ``layers`` with no intervention
    to restrict, or one intervention given twice (its rows would repeat). Nothing is loaded."""
    if isinstance(intervene, str):
        intervene = [intervene]
    texts = list(intervene) if intervene else []
    specs = [parse_intervention(t) for t in texts] or [None]
    if layers is not None:
        layers = check_layer_list(layers, "--layers")
        if not layers:
            raise PosymError("--layers needs at least one layer index")
        if all(s is None for s in specs):
            raise PosymError(f"--layers restricts an intervention: give --intervene NAME:... ({per_layer_names()})")
        specs = [None if s is None else with_layers(s, layers) for s in specs]
    seen: dict[str, str] = {}
    for text, spec in zip(texts or ["none"], specs):
        canon = describe(spec)
        if canon in seen:
            raise PosymError(f"--intervene {text!r} repeats {seen[canon]!r} (both are {canon}); give each once")
        seen[canon] = text
    return tuple(specs)


def check_interventions(model: nn.Module, specs: Sequence[Intervention | None]) -> list[str]:
    """Each of ``specs`` applied to ``model`` and removed at once, before any work, so a family it does
    not support, a layer or frequency ID the model lacks fails in one line; the model is restored
    exactly (:func:`~posym.interventions.apply.intervened`). Returns the canonical strings."""
    out = []
    for spec in specs:
        with intervened(model, spec) as text:
            out.append(text)
    return out


def holds_under_kv_cache(spec: Intervention | None) -> bool:
    """True when ``spec`` is exact under a KV cache and padding
    (:attr:`Intervention.exact_under_kv_cache`): it changes the model at absolute positions or at none
    (rope-base, ntk, freq-mask, and ``None``). False for temperature (it reads the forward's token
    indices) and interpolate (its scale or table follows the forward's length): those need full
    sequences from position 0, without cache or padding (docs/interventions.md)."""
    return spec is None or spec.exact_under_kv_cache


__all__ = ["plan_interventions", "check_interventions", "holds_under_kv_cache"]
