"""argparse types: one home for every list and number rule of the command line. Each turns a bad value
into one line ``posym: error: <verb>: argument --x: <message>`` (exit 2); the rules themselves are
:mod:`posym.checks`' (the Python API's), so both refuse the same values."""

from __future__ import annotations

import argparse
import json
from typing import Any, Callable, Sequence

from posym.checks import check_float, check_gamma, check_int
from posym.errors import PosymError


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def bounded_int(lo: int, what: str) -> Callable[[str], int]:
    """An integer >= ``lo`` (:func:`posym.checks.check_int`); ``what`` names it in the message."""
    def parse(text: str) -> int:
        v = _int(text)
        try:
            return check_int(v, what, lo)
        except PosymError:
            raise argparse.ArgumentTypeError(f"{what} must be >= {lo}, got {v}") from None
    parse.__name__ = what.replace(" ", "_")
    return parse


positive_int = bounded_int(1, "a count")
nonneg_int = bounded_int(0, "a non-negative integer")
threads_type = bounded_int(1, "threads")


def _float_type(text: str, what: str, **bounds) -> float:
    """``text`` as a float within ``bounds`` (:func:`posym.checks.check_float`); argparse's one-line
    error "expected a number" for text that is none, else "expected a WHAT"."""
    try:
        return check_float(text, "value", **bounds)
    except PosymError:
        pass
    try:
        float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    raise argparse.ArgumentTypeError(f"expected a {what}, got {text!r}")


def positive_float(text: str) -> float:
    """A finite number > 0 (:func:`posym.checks.check_float`)."""
    return _float_type(text, "positive finite number", lo=0, lo_open=True)


def finite_float(text: str) -> float:
    """A finite number (:func:`posym.checks.check_float`)."""
    return _float_type(text, "finite number")


def gamma_type(text: str) -> float:
    """A purity tolerance γ in (0, 0.5) (SPEC §3; :func:`posym.checks.check_gamma`)."""
    try:
        return check_gamma(finite_float(text))
    except PosymError:
        raise argparse.ArgumentTypeError(f"gamma must lie in (0, 0.5), got {text}") from None


def int_list(text: str, lo: int = 0) -> list[int]:
    """Comma-separated integers >= ``lo`` (e.g. ``0,1000,6750``); empty items are an error."""
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    bad = [v for v in values if v < lo]
    if bad:
        raise argparse.ArgumentTypeError(f"values must be >= {lo}, got {bad[0]}")
    return values


def positive_int_list(text: str) -> list[int]:
    return int_list(text, lo=1)


def str_list(choices: Sequence[str] | None = None) -> Callable[[str], list[str]]:
    """Comma-separated names (each one of ``choices`` when given); empty lists are an error."""
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",")]
        if not text.strip() or any(not x for x in items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
        bad = [x for x in items if choices is not None and x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; choose from {', '.join(choices)}")
        return items
    parse.__name__ = "list"
    return parse


def grid_type(text: str) -> str | list[int]:
    """``paper`` or comma-separated added lengths >= 0."""
    return "paper" if text == "paper" else int_list(text, lo=0)


def search_grid_type(text: str) -> str | list[int]:
    """``search``, ``paper`` or comma-separated added lengths >= 0 (the interventions study's grids)."""
    return text if text == "search" else grid_type(text)


def step_choice(text: str) -> int | str:
    """A checkpoint step (>= 0), ``last`` or ``best`` (SPEC §2)."""
    if text in ("last", "best"):
        return text
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"a step must be >= 0, got {v}")
    return v


def device_type(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` (``mps`` on Apple silicon)."""
    if text in ("cpu", "cuda", "mps") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")


def key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with a JSON value when it parses (``n_layer=4``, ``rotary_dim=null``), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. n_layer=4), got {text!r}")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def pe_type(text: str) -> str:
    """A ``--pe`` value (SPEC §2.1) in its canonical form (:func:`posym.verbs.train.pe_name`)."""
    from posym.verbs.train import pe_name

    try:
        return pe_name(text)
    except PosymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def arch_type(text: str) -> str:
    """An ``--arch`` value (:func:`posym.verbs.train.arch_name`); one-line error listing them otherwise."""
    from posym.verbs.train import arch_name

    try:
        return arch_name(text)
    except PosymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def variant(text: str) -> tuple[str, str]:
    """One ``NAME=DIR`` pair of a study's variants."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=REPRODUCTION_DIR, got {text!r}")
    return name, path


class VariantsAction(argparse.Action):
    """``NAME=DIR [NAME=DIR ...]`` (``nargs="+"``, ``type=variant``) as a dict in the order given; a name
    given twice is refused (one line, exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        variants: dict[str, str] = {}
        for name, path in values:
            if name in variants:
                raise argparse.ArgumentError(self, f"variant {name!r} given twice")
            variants[name] = path
        setattr(namespace, self.dest, variants)


__all__ = ["VariantsAction", "arch_type", "bounded_int", "device_type", "finite_float", "gamma_type", "grid_type", "int_list",
           "key_value", "nonneg_int", "pe_type", "positive_float", "positive_int", "positive_int_list",
           "search_grid_type", "step_choice", "str_list", "threads_type", "variant"]
