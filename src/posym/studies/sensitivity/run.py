"""``posym sensitivity``: reproduction variants side by side, and whether head discrepancy predicts
length extrapolation (:mod:`posym.studies.sensitivity.tables`)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Mapping

import pandas as pd

from posym.errors import PosymError
from posym.launch.fanout import FanOut, check_launcher, submit_fanout, unit_done, variant_path
from posym.launch.slurm import SlurmOptions
from posym.runs import layout
from posym.runs.tables import NO_INTERVENTION
from posym.studies._figures import plot_variant_curves
from posym.studies.sensitivity.figures import plot_prediction
from posym.studies.sensitivity.page import sensitivity_page
from posym.studies.sensitivity.tables import (check_variants, extrapolation_prediction, intervention_notes,
                                              lengthgen_tables, prediction_correlations, prediction_findings,
                                              read_prediction_rows, sensitivity_markdown, sensitivity_rows,
                                              sensitivity_table, variant_curves)
from posym.verbs import Outputs, VerbResult, figure_paths


#: The verb (prefix of every Slurm job name of the study) and the prefix of a variant's unit.
VERB, UNIT = "sensitivity", "predict-"


def prediction_units(variants: Mapping[str, str | os.PathLike], out: str | os.PathLike, n: int
                     ) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The Slurm units of the prediction (:mod:`posym.launch.fanout`): per reproduction variant, unit
    name -> (variant, CLI arguments of its job: this study of that variant alone, with the same ``n``,
    into ``OUT/units/<unit>/``, whose ``prediction.csv`` the summary reads). Fig. 5B-only variants have
    no models, hence no unit."""
    names = [k for k, v in variants.items() if lengthgen_tables(v) is None]
    units = [UNIT + (re.sub(r"[^A-Za-z0-9._-]+", "-", k).strip("-") or "variant") for k in names]
    if len(set(units)) < len(units):  # two names alike once made safe for a file name: number them
        units = [f"{u}-{i}" for i, u in enumerate(units)]
    out = Path(out).absolute()
    return {u: (k, (VERB, f"{k}={variant_path(variants[k])}", "--out", str(out / layout.SENSITIVITY_UNITS / u),
                    "--n", str(n), "--force")) for u, k in zip(units, names)}


def _done_units(variants: Mapping[str, str | os.PathLike], out: Path, n: int) -> dict[str, pd.DataFrame]:
    """Variant -> its prediction rows from a finished Slurm job of this study with these settings (its
    marker holds the arguments this call would give it), for :func:`extrapolation_prediction`."""
    done = {}
    for unit, (name, args) in prediction_units(variants, out, n).items():
        if unit_done(out, f"{VERB}-{unit}", args):
            rows = read_prediction_rows(Path(args[3]) / layout.PREDICTION)
            if rows is not None:
                done[name] = rows
    return done


def sensitivity(variants: Mapping[str, str | os.PathLike], out: str | os.PathLike, *, predict: bool = True,
                n: int = 256, force: bool = False, progress: bool = True,
                intervention: str = NO_INTERVENTION, launcher: str = "local",
                slurm_options: SlurmOptions | None = None) -> VerbResult:
    """Write ``OUT/sensitivity.csv`` + ``.md`` + ``.html`` (the study as an HTML page), Fig. 5B of every
    variant (``OUT/fig5b_variants.csv`` + ``.png|pdf``) and, with ``predict``, ``OUT/prediction.csv`` +
    ``prediction.png|pdf`` (Spearman rho in the figure titles). ``intervention``: whose rows of the
    Fig. 5B-only variants' tables are shown (default the untouched model's; named in the text and the
    page when the tables hold others); the reproductions' rows are the untouched model's.
    ``launcher``: ``local`` or ``slurm``: with ``predict``, one job per reproduction variant measures its
    models (this study of that variant alone into ``OUT/units/<unit>/``, :func:`prediction_units`),
    then a summary job (``afterok``) runs this call, which takes each finished variant's rows from its
    ``prediction.csv`` instead of measuring again and writes the same files as a local run
    (:mod:`posym.launch.fanout`, docs/cluster.md); returns once the jobs are queued."""
    check_launcher(launcher, slurm_options)
    check_variants(variants)
    if intervention != NO_INTERVENTION and not any(lengthgen_tables(v) is not None for v in variants.values()):
        raise PosymError(f"--intervention {intervention} selects the rows of a Fig. 5B-only variant's lengthgen "
                         "tables (NAME=a.csv); no such variant is given (a reproduction's rows are the untouched model's)")
    notes = intervention_notes(variants, intervention)  # every table read and value-checked before writing
    out = Path(out)
    files = [out / layout.SENSITIVITY, out / layout.SENSITIVITY_MD, out / layout.SENSITIVITY_HTML,
             out / layout.VARIANT_CURVES, *figure_paths(out / layout.FIG_VARIANT_CURVES)]
    if predict:
        files += [out / layout.PREDICTION, *figure_paths(out / layout.FIG_PREDICTION)]
    outputs = Outputs(files, force).check()
    if launcher == "slurm":
        args = ("sensitivity", *[f"{k}={variant_path(v)}" for k, v in variants.items()], "--out", str(out.absolute()),
                "--n", str(n), "--intervention", intervention, *([] if predict else ["--no-predict"]),
                *(["--force"] if force else []))
        units = {u: a for u, (_, a) in prediction_units(variants, out, n).items()} if predict else {}
        return VerbResult(None, [], submit_fanout(out, FanOut(VERB, units, args), slurm_options).text)
    table = sensitivity_table(variants, intervention)
    md = sensitivity_markdown(table) + "".join(f"\n\nFig. 5B of {k}: {v}." for k, v in notes.items())
    pred = (extrapolation_prediction(variants, n=n, progress=progress, done=_done_units(variants, out, n))
            if predict else None)
    curves = variant_curves(variants, intervention)
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
    shown = {k: str(v) + (f" (Fig. 5B: {notes[k]})" if k in notes else "") for k, v in variants.items()}
    outputs.text(sensitivity_page(out, shown, header, rows, pred, findings),
                 out / layout.SENSITIVITY_HTML)
    lines = [md, *findings, f"wrote {out}"]
    return VerbResult(table, outputs.written, "\n".join(lines), {"prediction": pred})


__all__ = ["prediction_units", "sensitivity"]
