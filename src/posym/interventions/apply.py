"""One entry point for every intervention: :func:`intervened` applies a parsed intervention (or its
canonical string) to a model for the duration of a ``with`` block (docs/interventions.md)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from torch import nn

from posym.errors import PosymError
from posym.interventions.registry import Intervention, per_layer_names
from posym.interventions.spec import describe, parse_intervention


def with_layers(intervention: Intervention | None, layers: Sequence[int] | None) -> Intervention | None:
    """``intervention`` restricted to ``layers`` (the CLI's ``--layers``;
    :meth:`Intervention.with_layers`): only temperature and freq-mask act per layer; a one-line
    PosymError for the others or for a conflicting ``layers=`` key."""
    if layers is None:
        return intervention
    if intervention is None:
        raise PosymError(f"{describe(None)} acts on every layer; --layers applies to {per_layer_names()} only")
    return intervention.with_layers(layers)


@contextmanager
def intervened(model: nn.Module, intervention: Intervention | str | None) -> Iterator[str]:
    """Context manager: ``model`` under ``intervention`` (a parsed one, its canonical string, or None /
    ``"none"`` for the untouched model; :meth:`Intervention.apply`); yields the canonical string (the
    ``intervention`` column of tables). The model is restored exactly on exit, also after an exception."""
    spec = parse_intervention(intervention) if isinstance(intervention, str) else intervention
    if spec is None:
        yield describe(None)
        return
    if not callable(getattr(spec, "apply", None)):
        raise PosymError(f"not an intervention: {spec!r}")
    with spec.apply(model):
        yield spec.canonical()


__all__ = ["with_layers", "intervened"]
