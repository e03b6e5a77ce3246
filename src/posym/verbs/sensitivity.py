"""``posym sensitivity``: reproduction variants side by side, and whether head discrepancy predicts
length extrapolation (:mod:`posym.report.sensitivity`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from posym.errors import PosymError
from posym.report.html import sensitivity_page
from posym.report.sensitivity import (extrapolation_prediction, lengthgen_tables, plot_prediction, plot_variant_curves,
                                      prediction_correlations, prediction_findings,
                                      sensitivity_markdown, sensitivity_rows, sensitivity_table, variant_curves)
from posym.runs import layout
from posym.verbs import Outputs, VerbResult, figure_paths


def check_variants(variants: Mapping[str, str | os.PathLike]) -> None:
    """PosymError for a variant folder (or ``lengthgen`` table) that does not exist, or for one given
    under two names."""
    seen: dict[tuple[Path, ...], str] = {}
    for name, value in variants.items():
        tables = lengthgen_tables(value)
        paths = tables if tables is not None else [Path(value)]
        for p in paths:
            if not p.exists():
                raise PosymError(f"variant {name!r}: no such {'file' if tables is not None else 'directory'}: {p}")
        key = tuple(sorted(p.resolve() for p in paths))
        if key in seen:
            raise PosymError(f"variants {seen[key]!r} and {name!r} are the same ({value}); give each once")
        seen[key] = name


def sensitivity(variants: Mapping[str, str | os.PathLike], out: str | os.PathLike, *, predict: bool = True,
                n: int = 256, force: bool = False, progress: bool = True) -> VerbResult:
    """Write ``OUT/sensitivity.csv`` + ``.md`` + ``.html`` (the study as an HTML page), Fig. 5B of every
    variant (``OUT/fig5b_variants.csv`` + ``.png|pdf``) and, with ``predict``, ``OUT/prediction.csv`` +
    ``prediction.png|pdf`` (Spearman rho in the figure titles)."""
    check_variants(variants)
    out = Path(out)
    files = [out / layout.SENSITIVITY, out / layout.SENSITIVITY_MD, out / layout.SENSITIVITY_HTML,
             out / layout.VARIANT_CURVES, *figure_paths(out / layout.FIG_VARIANT_CURVES)]
    if predict:
        files += [out / layout.PREDICTION, *figure_paths(out / layout.FIG_PREDICTION)]
    outputs = Outputs(files, force).check()
    table = sensitivity_table(variants)
    md = sensitivity_markdown(table)
    pred = extrapolation_prediction(variants, n=n, progress=progress) if predict else None
    curves = variant_curves(variants)
    outputs.csv(table, out / layout.SENSITIVITY)
    outputs.text(md + "\n", out / layout.SENSITIVITY_MD)
    outputs.csv(curves, out / layout.VARIANT_CURVES)
    outputs.figure(plot_variant_curves(curves), out / layout.FIG_VARIANT_CURVES)
    findings = []
    if pred is not None:
        outputs.csv(pred, out / layout.PREDICTION)
        correlations = prediction_correlations(pred)
        outputs.figure(plot_prediction(pred, correlations=correlations), out / layout.FIG_PREDICTION)
        findings = prediction_findings(pred, correlations)
    header, rows = sensitivity_rows(table)
    outputs.text(sensitivity_page(out, {k: str(v) for k, v in variants.items()}, header, rows, pred, findings),
                 out / layout.SENSITIVITY_HTML)
    lines = [md, *findings, f"wrote {out}"]
    return VerbResult(table, outputs.written, "\n".join(lines), {"prediction": pred})


__all__ = ["check_variants", "sensitivity"]
