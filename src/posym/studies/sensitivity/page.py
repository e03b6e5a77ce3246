"""The sensitivity study's HTML page: Paper A vs each reproduction variant, Fig. 5B of every variant
and the discrepancy-vs-reach prediction (self-contained: figures embedded, CSS inline)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from posym.report.html import escape, figure_html, page_html, table_html, written_at
from posym.runs import layout


def sensitivity_page(out_dir: str | os.PathLike, variants: dict[str, str], header: Sequence[str],
                     rows: Sequence[Sequence[Any]], prediction: pd.DataFrame | None, findings: Sequence[str]) -> str:
    """The sensitivity study (Paper A vs each reproduction variant) as a self-contained HTML page:
    the variants and their directories, the table, Fig. 5B of every variant (``OUT/fig5b_variants.png``)
    and the discrepancy-vs-reach prediction with its figure (``OUT/prediction.png``)."""
    out = Path(out_dir)
    body = ["<h1>posym — sensitivity study</h1>",
            '<p class="sub">Which training choice moves which number of Paper A (each variant a '
            f"reproduction directory). Written {escape(written_at())}."
            "</p>", "<h2>Variants</h2>",
            table_html(["variant", "reproduction directory or lengthgen tables"], [[k, str(v)] for k, v in variants.items()]),
            "<h2>Paper A vs the variants</h2><p>mean ± sd over the seeds of each variant; “—”: not measured.</p>",
            table_html(header, rows, num_cols=tuple(range(2, len(header)))),
            figure_html(out / f"{layout.FIG_VARIANT_CURVES}.png", "Fig. 5B of every variant, Paper A's points as circles",
                 out)]
    if prediction is not None:
        body += ["<h2>Does the discrepancy of trained heads predict the reach?</h2>",
                 "<p>Δ (SPEC §4) of each model's pure heads at training length vs the largest added length with "
                 "accuracy ≥ 0.9.</p>", "".join(f"<p>{escape(x)}</p>" for x in findings),
                 table_html(list(prediction.columns), prediction.round(3).astype(str).values.tolist()),
                 figure_html(out / f"{layout.FIG_PREDICTION}.png", "Δ of trained heads vs reach", out)]
    return page_html("posym — sensitivity study", body)


__all__ = ["sensitivity_page"]
