"""The registry of interventions (docs/interventions.md): each intervention is one class, registered
under its name with :func:`register`, that owns its ``key=value`` keys, its parser and value checks,
its canonical string, the context manager that applies it to a model, its per-layer restriction, its
exactness under a KV cache and what it changes in the theory's constructions (SPEC §4).

Adding an intervention is one class in one module::

    @register("my-change")
    @dataclass(frozen=True)
    class MyChange(Intervention):
        keys = ("alpha",)
        ...

:func:`~posym.interventions.spec.parse_intervention` reads ``my-change:alpha=2`` through
``REGISTRY["my-change"].parse``, and :func:`~posym.interventions.apply.intervened` applies it with its
:meth:`Intervention.apply`; nothing else changes."""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from typing import Any, Callable, ClassVar, ContextManager, Mapping, Sequence, TypeVar

from torch import nn

from posym.errors import PosymError

#: Name -> intervention class, in the order registered (the order the parser's messages list them).
REGISTRY: dict[str, type[Intervention]] = {}
#: The training length of posym runs (SPEC §1): the default ``n_train`` of a temperature.
DEFAULT_N_TRAIN = 17
#: The largest ``n_train`` accepted (a training length; temperature and dynamic interpolation).
MAX_N_TRAIN = 10**9

C = TypeVar("C", bound="type[Intervention]")


class Intervention(ABC):
    """One inference-time intervention: a frozen dataclass of its parameters, registered under
    :attr:`name`. Subclasses set :attr:`keys` and :attr:`example` and implement :meth:`parse`,
    :meth:`canonical`, :meth:`describe` and :meth:`apply`."""

    #: The name before the ``:`` of the canonical string (set by :func:`register`).
    name: ClassVar[str]
    #: The ``key=value`` keys the parser accepts, in canonical order.
    keys: ClassVar[tuple[str, ...]] = ()
    #: A documented string this class parses (docs/interventions.md; used in messages and tests).
    example: ClassVar[str] = ""
    #: True when :meth:`with_layers` may restrict it to some layers (it has a ``layers`` field).
    per_layer: ClassVar[bool] = False
    #: True when it may act on some query heads only (a ``heads`` field, ``heads=L0H1+L2H3``; docs/interventions.md,
    #: "Head selections"): its change is per query head exactly (scaling or masking that head's q).
    per_head: ClassVar[bool] = False
    #: True when it is exact under a KV cache and padding: it changes the model at absolute positions
    #: or at none, never by the forward's token indices or length (docs/interventions.md).
    exact_under_kv_cache: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def parse(cls: type[I], kv: Mapping[str, str]) -> I:
        """The intervention of ``key=value`` pairs (keys already checked against :attr:`keys`); a
        one-line PosymError on a missing or bad value."""

    @abstractmethod
    def canonical(self) -> str:
        """The canonical string (``name:key=value,…``, fixed key order): the tables' ``intervention`` column."""

    @abstractmethod
    def describe(self) -> str:
        """What it does, in one line of prose (for messages and listings)."""

    @abstractmethod
    def apply(self, model: nn.Module) -> ContextManager[Any]:
        """Context manager: ``model`` under this intervention for a ``with`` block, restored exactly on
        exit (also after an exception)."""

    def with_layers(self: I, layers: Sequence[int]) -> I:
        """This intervention restricted to ``layers`` (the CLI's ``--layers``); a one-line PosymError
        when it acts on every layer or names other layers already."""
        if not self.per_layer:
            raise PosymError(f"{self.canonical()} acts on every layer; --layers applies to {per_layer_names()} only")
        if getattr(self, "heads", None) is not None:
            raise PosymError(f"{self.canonical()}: heads= names its layers already; drop --layers")
        layers = tuple(int(l) for l in layers)
        if self.layers is not None and self.layers != layers:  # type: ignore[attr-defined]
            raise PosymError(f"{self.canonical()}: layers given twice (in the string and --layers)")
        return dataclasses.replace(self, layers=layers)  # type: ignore[type-var]

    def theory_effect(self, base: float, rotary_dim: int) -> dict[str, Any] | None:
        """The keyword arguments of :class:`posym.theory.intervened.Effect` (SPEC §4): what this
        intervention changes in a one-head construction read at RoPE ``base`` and ``rotary_dim``;
        None when the theory has no prediction for it."""
        return None


I = TypeVar("I", bound=Intervention)


def register(name: str) -> Callable[[C], C]:
    """Class decorator: register an :class:`Intervention` subclass under ``name`` (sets its
    :attr:`~Intervention.name`); a PosymError for a name taken already or the reserved ``none``."""
    def add(cls: C) -> C:
        if name in REGISTRY or name == "none" or not name or ":" in name:
            raise PosymError(f"intervention name {name!r} is taken or invalid; registered: {', '.join(REGISTRY)}")
        cls.name = name
        REGISTRY[name] = cls
        return cls
    return add


def per_layer_names() -> str:
    """The registered names that act per layer (``temperature, rope-base and freq-mask``)."""
    return _joined([n for n, cls in REGISTRY.items() if cls.per_layer])


def per_head_names() -> str:
    """The registered names that take ``heads=`` (:attr:`Intervention.per_head`), as :func:`per_layer_names`."""
    return _joined([n for n, cls in REGISTRY.items() if cls.per_head])


def _joined(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]


def format_head_pairs(pairs: Sequence[tuple[int, int]]) -> str:
    """``((0, 1), (2, 3))`` -> ``L0H1+L2H3`` (the ``heads=`` value; pairs written as given)."""
    return "+".join(f"L{int(layer)}H{int(head)}" for layer, head in pairs)


def parse_head_pairs(text: str, name: str = "heads") -> tuple[tuple[int, int], ...]:
    """``L3H1+L5H0`` -> ``((3, 1), (5, 0))``, sorted, each once; a one-line PosymError (naming
    ``name``) on anything else (an empty list, a repeated head, a type name: resolve it first)."""
    items = [t.strip() for t in str(text).split("+")]
    pairs = [_HEAD_PAIR.fullmatch(t) for t in items]
    if not text or not all(pairs):
        raise PosymError(f"{name}: {text!r} is not a list of heads like L3H1+L5H0 (layer and query head, 0-based, "
                         "joined by '+'; a head type is resolved to such a list first: posym.heads.selection.resolve_heads)")
    out = [(int(m.group(1)), int(m.group(2))) for m in pairs]  # type: ignore[union-attr]
    if len(set(out)) != len(out):
        raise PosymError(f"{name}: {text!r} names a head twice; give each once")
    return tuple(sorted(out))


_HEAD_PAIR = re.compile(r"L(\d+)H(\d+)")


def parse_heads_key(kv: Mapping[str, str], layers: Sequence[int] | None) -> tuple[tuple[int, int], ...] | None:
    """The ``heads=`` value of a per-head intervention's keys (None when absent); a one-line PosymError
    beside ``layers=`` (the heads name their layers)."""
    if "heads" not in kv:
        return None
    if layers is not None:
        raise PosymError("heads= names its layers (L3H1 is layer 3, query head 1); drop layers=")
    return parse_head_pairs(kv["heads"], "heads")


def check_heads_arg(heads: Sequence[tuple[int, int]] | None, layers: Sequence[int] | None,
                    name: str) -> tuple[tuple[int, int], ...] | None:
    """``heads`` of a context manager's call as sorted ``(layer, head)`` pairs (None stays None); a
    one-line PosymError beside ``layers``, for an empty selection or a pair that is not two integers."""
    if heads is None:
        return None
    if layers is not None:
        raise PosymError(f"{name}: heads names its layers; give heads or layers, not both")
    try:
        pairs = [(int(layer), int(head)) for layer, head in heads]
    except (TypeError, ValueError):
        raise PosymError(f"{name}: heads must be (layer, query head) pairs of integers, got {heads!r}") from None
    if any(layer < 0 or head < 0 for layer, head in pairs):
        raise PosymError(f"{name}: heads must be (layer, query head) pairs of integers >= 0, got {heads!r}")
    return parse_head_pairs(format_head_pairs(pairs), f"{name}: heads")


def format_number(x: float) -> str:
    """``1.0`` -> ``1``, ``0.5`` -> ``0.5``, ``1e20`` -> ``1e+20`` (shortest round-trip repr; integers
    written as digits up to 10^15): a number in a canonical string."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def format_ids(ids: Sequence[int]) -> str:
    """Layer or frequency IDs joined by ``+`` (``0+2``)."""
    return "+".join(str(i) for i in ids)


def parse_ids(text: str) -> tuple[int, ...]:
    """``0+2`` -> ``(0, 2)``; ValueError on anything but integers joined by ``+``."""
    return tuple(int(x) for x in text.split("+"))


__all__ = ["REGISTRY", "DEFAULT_N_TRAIN", "MAX_N_TRAIN", "Intervention", "register", "per_layer_names", "per_head_names",
           "format_head_pairs", "parse_head_pairs", "parse_heads_key", "check_heads_arg", "format_number", "format_ids",
           "parse_ids"]
