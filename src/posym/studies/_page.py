"""The page two studies share: ``OUT/interventions.html``, the interventions study's page, which also
shows a training-time encodings study written into the same folder (``posym pe-study --out OUT``). Both
verbs rebuild it from the saved tables and figures, so neither study imports the other."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from posym.constants import GAMMA, TASKS
from posym.errors import PosymError
from posym.runs import layout
from posym.runs.tables import read_table
from posym.verbs import Outputs

#: The caption of the encodings study's Fig. 2C (on its own page and in this one).
ENCODINGS_FIG2C = f"Fig. 2C of every variant: pure heads over training (γ = {GAMMA:g})"


def write_page(out: str | os.PathLike, outputs: Outputs | None = None) -> Path:
    """``OUT/interventions.html`` from the interventions study's saved tables and figures
    (``interventions.csv``; ``interventions.json``: the settings of every call, per model where they
    differ, :func:`~posym.studies.intervention_study.tables.settings_display`; the figures present) and,
    when ``OUT`` also holds a training-time encodings study (``posym pe-study --out OUT``), its table,
    goal line and figures as a section of the same page."""
    # imported here: both studies' verbs import this module
    from posym.studies.intervention_study.page import interventions_page
    from posym.studies.intervention_study.tables import prediction_rows, settings_display, summary_rows

    out = Path(out)
    summary = read_table(out / layout.INTERVENTIONS)
    try:
        settings = settings_display(json.loads((out / layout.INTERVENTIONS_JSON).read_text()))
    except (OSError, ValueError):
        raise PosymError(f"{out / layout.INTERVENTIONS_JSON} is not a study record (not JSON); run the study "
                         "again into this folder to rebuild it") from None
    tasks = [t for t in TASKS if t in set(summary["task"])]
    figs = {}
    for t in tasks:
        for caption, name in ((f"Fig. 5B of the {t} task under each intervention", layout.FIG_INTERVENTIONS),
                              (f"the {t} task's heads under each intervention", layout.FIG_INTERVENTION_HEADS)):
            png = out / f"{name.format(task=t)}.png"
            if png.is_file():
                figs[caption] = png
    header, rows = summary_rows(summary, prediction=False)
    page = interventions_page(out, header, rows, prediction_rows(tasks), figs, settings, encodings=_encodings(out))
    path = out / layout.INTERVENTIONS_HTML
    (outputs or Outputs([path], True).check()).text(page, path)
    return path


def _encodings(out: Path) -> tuple | None:
    """The training-time encodings study saved in ``out`` (header, rows, goal, figures), or None."""
    from posym.studies.encodings.tables import goal_line, study_rows

    if not (out / layout.PE_STUDY).is_file():
        return None
    table = pd.read_csv(out / layout.PE_STUDY)
    table["cell"] = table["cell"].fillna("")
    header, rows = study_rows(table)
    figs = {caption: out / f"{stem}.png" for caption, stem in (
        (ENCODINGS_FIG2C, layout.FIG_PE_PURE_COUNTS),
        ("Fig. 5B of every variant, Paper A's points as circles", layout.FIG_VARIANT_CURVES))
        if (out / f"{stem}.png").is_file()}
    return header, rows, goal_line(table), figs


__all__ = ["ENCODINGS_FIG2C", "write_page"]
