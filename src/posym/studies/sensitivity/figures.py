"""The sensitivity study's figure: does the discrepancy of trained heads predict the reach? (Δ of each
model's pure heads at training length vs its largest added length with accuracy ≥ 0.9). Fig. 5B of every
variant is :func:`posym.studies._figures.plot_variant_curves`."""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from posym.studies.sensitivity.tables import prediction_correlations
from posym.report.figures import new_figure


def plot_prediction(table: pd.DataFrame, ax=None, correlations: Mapping[str, list[str]] | None = None):
    """Scatter of Δ at training length vs the largest added length with accuracy >= 0.9, per kind
    (``correlations``: :func:`prediction_correlations` of ``table``, computed here if not given)."""
    correlations = correlations or prediction_correlations(table)

    if ax is None:
        fig, axes = new_figure((10, 4), 1, 2)
    else:
        fig, axes = ax.figure, [ax, ax]
    for a, kind in zip(axes, ("positional", "symbolic")):
        col = f"delta_{kind}"
        for (variant, task), g in table.groupby(["variant", "task"]):
            a.scatter(g[col], g["largest_09"], label=f"{variant} ({task})",
                      marker="o" if task == "letter" else "s")
        m = int(table[col].notna().sum())
        a.set_title(f"{kind} heads, Spearman: " + "\n".join(correlations[kind]).replace("rho", "ρ")
                    if m >= 3 else f"{kind} heads: {m} model(s) with such heads", fontsize=9)
        a.set_xlabel(f"mean Δ of pure {kind} heads at training length")
        a.set_ylabel("largest added length with accuracy ≥ 0.9")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    return fig


__all__ = ["plot_prediction"]
