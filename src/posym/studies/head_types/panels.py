"""One figure of the head-type planes of several prompt sources (``posym head-types``): a panel per
source, each :func:`posym.studies.head_types.figures.plot_head_type_plane` (s_POS vs s_SYM coloured
by classic type)."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from posym.errors import PosymError
from posym.report.figures import new_figure
from posym.studies.head_types.figures import plot_head_type_plane

#: Panel titles of the prompt sources.
SOURCE_TITLES = {"repeated": "random sequences repeated twice", "binding": "binding prompts",
                 "number": "1-hop number prompts", "letter": "1-hop letter prompts"}


def plot_head_type_planes(table: pd.DataFrame, title: str | None = None, ncols: int | None = None,
                          pure_fraction: float | None = None) -> Figure:
    """One plane per ``prompt_set`` of the stacked head-type join ``table`` (in table order), ``ncols``
    per row (default: all in one row); ``title`` above them; ``pure_fraction``: the purity threshold
    of the types, named in each panel's pure-head legend."""
    if "prompt_set" not in table or table.empty:
        raise PosymError("the head-type table needs rows and a prompt_set column")
    sets = list(dict.fromkeys(table["prompt_set"]))
    ncols = len(sets) if ncols is None else max(1, min(int(ncols), len(sets)))
    nrows = -(-len(sets) // ncols)
    fig, axes = new_figure((9.0 * ncols, 5.6 * nrows), nrows, ncols, squeeze=False, layout="constrained")
    for ax, s in zip(axes.ravel(), sets):
        plot_head_type_plane(table[table["prompt_set"] == s], ax=ax, title=SOURCE_TITLES.get(s, str(s)),
                             pure_fraction=pure_fraction)
    for ax in axes.ravel()[len(sets):]:
        ax.set_axis_off()
    if title:
        fig.suptitle(title, fontsize=15)
    return fig


__all__ = ["SOURCE_TITLES", "plot_head_type_planes"]
