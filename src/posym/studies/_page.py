"""The page two studies share: ``OUT/interventions.html``, the interventions study's page, which also
shows a training-time encodings study written into the same folder (``posym pe-study --out OUT``). Both
verbs rebuild it from the saved tables and figures, so neither study imports the other."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
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
    from posym.studies.intervention_study.study import prediction_applies
    from posym.studies.intervention_study.tables import prediction_rows, settings_display, summary_rows

    out = Path(out)
    summary = read_table(out / layout.INTERVENTIONS)
    try:
        record = json.loads((out / layout.INTERVENTIONS_JSON).read_text())
        settings = settings_display(record)
    except (OSError, ValueError, AttributeError):
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
    paper = prediction_applies(record)
    lengths = out / layout.INTERVENTIONS_LENGTHGEN
    own = None if paper or not lengths.is_file() else own_length_columns(summary, read_table(lengths))
    if own is not None:  # the lengths this study measured in place of the paper setting's report lengths
        n_acc = sum(h.startswith("acc +") for h in header)
        first = next(i for i, h in enumerate(header) if h.startswith("acc +"))
        header = [*header[:first], *own[0], *header[first + n_acc:]]
        rows = [[*r[:first], *cells, *r[first + n_acc:]] for r, cells in zip(rows, own[1])]
    page = interventions_page(out, header, rows, prediction_rows(tasks) if paper else None, figs, settings,
                              encodings=_encodings(out), own_grid=own is not None)
    path = out / layout.INTERVENTIONS_HTML
    (outputs or Outputs([path], True).check()).text(page, path)
    return path


#: At most this many added lengths of a study's own grid become columns of its page (spread over the grid).
MAX_LENGTH_COLUMNS = 8


def own_length_columns(summary: pd.DataFrame, lengthgen: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The accuracy columns of the study page over the added lengths the study measured (SPEC §1.4; at
    most :data:`MAX_LENGTH_COLUMNS`, spread over the grid, its ends kept) instead of the paper setting's
    report lengths: (header cells, one row of cells per row of ``summary``), each cell the mean ± sd over
    models (:func:`posym.report.format.fmt_ms`) of each model's accuracy at that length, mean over data
    seeds; "—" where a row's models did not measure it. ``lengthgen``: ``interventions_lengthgen.csv``."""
    from posym.report.format import fmt_ms, mean_sd

    measured = sorted(int(e) for e in lengthgen["extra_tokens"].unique())
    if len(measured) > MAX_LENGTH_COLUMNS:
        picks = np.unique(np.linspace(0, len(measured) - 1, MAX_LENGTH_COLUMNS).round().astype(int))
        measured = [measured[i] for i in picks]
    per_model = lengthgen.groupby(["task", "intervention", "model", "extra_tokens"])["acc"].mean()
    rows = []
    for _, r in summary.iterrows():
        try:
            mine = per_model.loc[(r["task"], r["intervention"])]
        except KeyError:
            mine = pd.Series(dtype=float)
        cells = []
        for e in measured:
            values = mine.xs(e, level="extra_tokens") if len(mine) and e in mine.index.get_level_values(-1) else []
            m, sd, _ = mean_sd(values)
            cells.append(fmt_ms(m, sd, None, 2))
        rows.append(cells)
    return [f"acc +{e:,}" for e in measured], rows


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


__all__ = ["ENCODINGS_FIG2C", "MAX_LENGTH_COLUMNS", "own_length_columns", "write_page"]
