"""What the studies share: the table cell (``mean ± sd`` over seeds or models, :mod:`posym.report.format`)
and the check of the variants a study compares (reproduction directories or length tables)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from posym import checks
from posym.errors import PosymError
from posym.report.format import fmt_ms, fmt_num


def cell(mean: Any, sd: Any, n: int, digits: int, integer: bool = False) -> str:
    """A study table's cell: ``mean ± sd`` over ``n`` values (:func:`~posym.report.format.fmt_ms`), the
    mean alone for one value (no spread to show), "—" without a value."""
    return fmt_ms(mean, sd, None, digits, integer) if n > 1 else fmt_num(mean, digits, integer)


def check_variant_paths(variants: Mapping[str, str | os.PathLike], what: str = "reproduction directory",
                        tables: Callable[[Any], list[Path] | None] | None = None) -> dict[str, Any]:
    """``variants`` (NAME -> directory, or table paths where ``tables(value)`` lists them) as a dict,
    checked: a mapping (:func:`posym.checks.check_variants`) of at least one variant, every directory and
    table present, no variant given under two names. PosymError (one line) otherwise."""
    variants = checks.check_variants(variants, what)
    if not variants:
        raise PosymError("give at least one variant NAME=DIR")
    seen: dict[tuple[Path, ...], str] = {}
    for name, value in variants.items():
        listed = tables(value) if tables is not None else None
        paths = listed if listed is not None else [Path(value)]
        for p in paths:
            if not (p.exists() if listed is not None else p.is_dir()):
                raise PosymError(f"variant {name!r}: no such {'file' if listed is not None else 'directory'}: {p}")
        key = tuple(sorted(p.resolve() for p in paths))
        if key in seen:
            raise PosymError(f"variants {seen[key]!r} and {name!r} are the same ({value}); give each once")
        seen[key] = name
    return variants


__all__ = ["cell", "check_variant_paths"]
