"""The canonical string of an intervention (``temperature:beta=1,n_train=17,floor=1``) and its parser,
so tables of several interventions concatenate on one ``intervention`` column. Each name's keys,
values and string are its registered class's (:mod:`posym.interventions.registry`).

The log-form temperature's string always names its floor (``floor=1``: ``s(n) = max(1, 1 + β·ln(n/N))``,
the default; ``floor=0``: unfloored). Tables written before the floor existed hold strings without the
key (``temperature:beta=0.5,n_train=17``): those rows were measured *unfloored*
(:func:`legacy_temperature`), and their string never equals a new one, so the two are never mixed."""

from __future__ import annotations

from posym.errors import PosymError
from posym.interventions.registry import DEFAULT_N_TRAIN, REGISTRY, Intervention, per_head_names
from posym.interventions.temperature import Temperature
from posym.runs.tables import NO_INTERVENTION

NONE = NO_INTERVENTION  # the canonical string of the untouched model (one home: posym.runs.tables)


def names() -> tuple[str, ...]:
    """Every name the parser reads: ``none`` and the registered interventions, in registration order."""
    return (NONE, *REGISTRY)


def describe(intervention: Intervention | None) -> str:
    """The canonical string (:meth:`Intervention.canonical`): name, then ``key=value`` in a fixed order;
    defaults (form=log, all layers) omitted, except the log-form temperature's ``floor`` (always
    written); ``None`` (the untouched model) is ``"none"``."""
    if intervention is None:
        return NONE
    if not callable(getattr(intervention, "canonical", None)):
        raise PosymError(f"cannot describe {type(intervention).__name__}; known interventions: {', '.join(names())}")
    return intervention.canonical()


def parse_intervention(text: str) -> Intervention | None:
    """``NAME:key=value[,…]`` -> ``REGISTRY[NAME].parse(kv)`` (``"none"`` -> None); a one-line
    PosymError on a bad name, key or value. The keys and values of each name: its class's
    :meth:`~Intervention.parse` (docs/interventions.md). A string is read as written today: for a
    table's string from before the floor, see :func:`legacy_temperature`."""
    name, _, rest = str(text).partition(":")
    name = name.strip()
    if name not in names():
        raise PosymError(f"unknown intervention {name!r} in {text!r}; known: {', '.join(names())}")
    kv: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip() or key.strip() in kv:
            raise PosymError(f"{text!r}: {item!r} is not a new key=value; write e.g. temperature:beta=1,n_train=17")
        kv[key.strip()] = value.strip()
    cls = REGISTRY.get(name)
    allowed = cls.keys if cls is not None else ()
    bad = sorted(set(kv) - set(allowed))
    if "heads" in bad:
        raise PosymError(f"{text!r}: {name} does not act per query head; heads= applies to {per_head_names()} only")
    if bad:
        raise PosymError(f"{text!r}: unknown key(s) {', '.join(bad)}; {name} takes {', '.join(allowed)}")
    return None if cls is None else cls.parse(kv)


def legacy_temperature(text: str) -> str:
    """The canonical string today of a table's intervention string written before the temperature
    floor existed: a log-form ``temperature:`` string without ``floor=`` was measured unfloored, so it
    reads ``…,floor=0``; any other string is returned unchanged (not parsed)."""
    name, _, rest = str(text).partition(":")
    keys = {item.partition("=")[0].strip() for item in rest.split(",")}
    if name.strip() != "temperature" or "floor" in keys or "form" in keys:
        return text
    spec = parse_intervention(text)
    return describe(Temperature(spec.beta, spec.n_train, spec.form, spec.layers, False, spec.heads))


__all__ = ["NONE", "DEFAULT_N_TRAIN", "Intervention", "names", "describe", "parse_intervention", "legacy_temperature"]
