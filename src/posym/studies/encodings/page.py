"""The training-time encodings study's HTML page (docs/encodings.md):
the variants, the table, the goal line and the figures (self-contained: figures embedded, CSS inline)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from posym.report.html import escape, figure_html, note_html, page_html, table_html, written_at


def pe_study_page(out_dir: str | os.PathLike, variants: dict[str, str], header: Sequence[str],
                  rows: Sequence[Sequence[Any]], goal: str, figures: dict[str, Path]) -> str:
    """The training-time encodings study (docs/interventions.md) as a self-contained HTML page: the
    variants and their directories, the table, the goal line and the figures of all variants."""
    out = Path(out_dir)
    when = written_at()
    body = ["<h1>posym — training-time positional encodings</h1>",
            '<p class="sub">Which encoding the model is trained with, what it learns (heads, milestones, '
            f"frequencies) and how far it extrapolates (docs/interventions.md). Written {escape(when)}.</p>",
            note_html("How to read: mean ± sd over each variant's seeds. Milestones: the first validation step at "
                  "which that hop's accuracy reaches 0.9. Dominant frequency IDs count heads by their most used "
                  "rotating pair; a head whose most used pair has angle 0 (p-RoPE's unrotated pairs, NoPE) is "
                  "counted apart: that pair carries no position. Reach: the largest added length with accuracy "
                  "≥ 0.9 there and at every shorter grid point, per model."),
            "<h2>Variants</h2>",
            table_html(["variant", "reproduction directory"], [[k, str(v)] for k, v in variants.items()]),
            "<h2>The variants side by side</h2>", table_html(header, rows), f"<p><b>{escape(goal)}</b></p>",
            "<h2>Figures</h2>", *[figure_html(path, caption, out) for caption, path in figures.items()]]
    return page_html("posym — training-time encodings", body)


__all__ = ["pe_study_page"]
