"""One entry point for every intervention: :func:`intervened` applies a parsed intervention (or its
canonical string) to a model for the duration of a ``with`` block (docs/interventions.md)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from torch import nn

from posym.errors import PosymError
from posym.interventions.freq_mask import FreqMask, freq_mask
from posym.interventions.interpolate import Interpolate, interpolate
from posym.interventions.rope import RopeBase, ntk, rope_base
from posym.interventions.spec import Intervention, describe, parse_intervention
from posym.interventions.temperature import Temperature, temperature


def with_layers(intervention: Intervention | None, layers: Sequence[int] | None) -> Intervention | None:
    """``intervention`` restricted to ``layers`` (the CLI's ``--layers``): only temperature and
    freq-mask act per layer; a one-line PosymError for the others or for a conflicting ``layers=`` key."""
    if layers is None:
        return intervention
    layers = tuple(int(l) for l in layers)
    if isinstance(intervention, Temperature):
        if intervention.layers is not None and intervention.layers != layers:
            raise PosymError(f"{describe(intervention)}: layers given twice (in the string and --layers)")
        return Temperature(intervention.beta, intervention.n_train, intervention.form, layers, intervention.floor)
    if isinstance(intervention, FreqMask):
        if intervention.layers is not None and intervention.layers != layers:
            raise PosymError(f"{describe(intervention)}: layers given twice (in the string and --layers)")
        return FreqMask(intervention.keep, layers)
    raise PosymError(f"{describe(intervention)} acts on every layer; --layers applies to temperature and freq-mask only")


@contextmanager
def intervened(model: nn.Module, intervention: Intervention | str | None) -> Iterator[str]:
    """Context manager: ``model`` under ``intervention`` (a parsed one, its canonical string, or None /
    ``"none"`` for the untouched model); yields the canonical string (the ``intervention`` column of
    tables). The model is restored exactly on exit, also after an exception."""
    spec = parse_intervention(intervention) if isinstance(intervention, str) else intervention
    if spec is None:
        yield describe(None)
    elif isinstance(spec, Temperature):
        with temperature(model, spec.beta, n_train=spec.n_train, layers=spec.layers, form=spec.form, floor=spec.floor):
            yield describe(spec)
    elif isinstance(spec, RopeBase):
        if spec.kappa is not None:
            with ntk(model, spec.kappa):
                yield describe(spec)
        else:
            with rope_base(model, spec.theta):
                yield describe(spec)
    elif isinstance(spec, Interpolate):
        with interpolate(model, factor=spec.factor, n_train=spec.n_train):
            yield describe(spec)
    elif isinstance(spec, FreqMask):
        with freq_mask(model, spec.keep, layers=spec.layers):
            yield describe(spec)
    else:
        raise PosymError(f"not an intervention: {spec!r}")


__all__ = ["with_layers", "intervened"]
