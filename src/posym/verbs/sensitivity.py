"""``posym sensitivity``: reproduction variants side by side, and whether head discrepancy predicts
length extrapolation (:mod:`posym.report.sensitivity`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from posym.report.html import sensitivity_page
from posym.report.sensitivity import (extrapolation_prediction, plot_prediction, plot_variant_curves,
                                      prediction_correlations, prediction_findings,
                                      sensitivity_markdown, sensitivity_rows, sensitivity_table, variant_curves)
from posym.runs import layout
from posym.verbs import Outputs, VerbResult, figure_paths


def sensitivity(variants: Mapping[str, str | os.PathLike], out: str | os.PathLike, *, predict: bool = True,
                n: int = 256, force: bool = False, progress: bool = True) -> VerbResult:
    """Write ``OUT/sensitivity.csv`` + ``.md`` + ``.html`` (the study as an HTML page), Fig. 5B of every
    variant (``OUT/fig5b_variants.csv`` + ``.png|pdf``) and, with ``predict``, ``OUT/prediction.csv`` +
    ``prediction.png|pdf`` (Spearman rho in the figure titles)."""
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


__all__ = ["sensitivity"]
