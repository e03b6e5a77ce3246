"""The interventions study's HTML page (docs/interventions.md): the prediction, the table
intervention × task, the figures, the settings and, beside a training-time encodings study in the same
folder, its section (self-contained: figures embedded, CSS inline)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from posym.report.html import escape, figure_html, note_html, page_html, table_html, written_at


#: What the page says in place of the prediction for models it was not written for.
NO_PREDICTION = ("No prediction was written for this model: the study's prediction (docs/interventions.md) "
                 "speaks of the paper preset's GPT-J models (SPEC §2) only.")


def interventions_page(out_dir: str | os.PathLike, header: Sequence[str], rows: Sequence[Sequence[Any]],
                       prediction: tuple[Sequence[str], Sequence[Sequence[Any]]] | None, figures: dict[str, Path],
                       settings: dict, encodings: tuple | None = None, own_grid: bool = False) -> str:
    """The interventions study (docs/interventions.md) as a self-contained HTML page: how to read it,
    the table intervention × task with the theory's prediction (``None``: models it was not written
    for, :func:`~posym.studies.intervention_study.study.prediction_applies`, and a sentence saying so),
    Fig. 5B per intervention family and the head readout of each task, and the settings (models, grid,
    n); ``own_grid``: the table's accuracy columns are the lengths the study measured; with
    ``encodings`` (header, rows, goal, figures of ``posym pe-study`` in the same folder) a section on
    the training-time encodings."""
    out = Path(out_dir)
    when = written_at()
    body = ["<h1>posym — interventions at inference</h1>",
            '<p class="sub">Which inference-time change to attention or RoPE lifts which task\'s length '
            f"generalization, read on the heads (docs/interventions.md). Written {escape(when)}.</p>",
            note_html("How to read: “reach ≥ 0.9” is the largest added length up to which the mean accuracy stays "
                  "≥ 0.9 at every grid point (mean ± sd over models; “never”: below 0.9 already at +0; "
                  "“grid end”: still ≥ 0.9 at the last measured length). “acc +L” is the accuracy at L added "
                  "tokens (“—”: not on this grid). “pure pos/sym +L”: pure positional / symbolic heads "
                  "(γ = 0.1, SPEC §3) on inputs with L added tokens, mean over models."
                  + (" The “acc +L” columns are the added lengths this study measured." if own_grid else "")
                  + (" The prediction was written before anything was measured." if prediction else "")),
            "<h2>Prediction (written before measuring)</h2>",
            table_html(*prediction) if prediction else f"<p>{escape(NO_PREDICTION)}</p>",
            "<h2>Intervention × task</h2>", table_html(header, rows, num_cols=(2,)),
            "<h2>Figures</h2>", *[figure_html(path, caption, out) for caption, path in figures.items()],
            "<h2>Settings</h2>",
            table_html(["setting", "value"], [[k, json.dumps(v)] for k, v in settings.items()])]
    if encodings is not None:
        e_header, e_rows, goal, e_figs = encodings
        body += ["<h2>Training-time encodings (posym pe-study)</h2>",
                 note_html("The other way round: models trained with another positional encoding (SPEC §2.1); "
                       "mean ± sd over each variant's seeds (docs/encodings.md)."),
                 table_html(e_header, e_rows), f"<p><b>{escape(goal)}</b></p>",
                 *[figure_html(path, caption, out) for caption, path in e_figs.items()]]
    return page_html("posym — interventions study", body)


__all__ = ["NO_PREDICTION", "interventions_page"]
