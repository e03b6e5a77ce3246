"""The training-time encodings study's figure: Fig. 2C (pure heads over training) of every variant
side by side. Fig. 5B of every variant is :func:`posym.studies._figures.plot_variant_curves`."""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from posym.constants import GAMMA, TASKS
from posym.report.figures import new_figure


def plot_pure_count_curves(curves: pd.DataFrame, labels: Mapping[str, str] | None = None):
    """One row per task, one column per variant: pure positional and symbolic heads over training
    (mean over seeds, ± sd band), Fig. 2C of every variant side by side on shared axes."""
    tasks = [t for t in TASKS if (curves["task"] == t).any()] or ["number"]
    variants = list(dict.fromkeys(curves["variant"])) or ["—"]
    fig, axes = new_figure((2.8 * len(variants) + 0.6, 2.6 * len(tasks) + 0.5), len(tasks), len(variants),
                             squeeze=False, sharex=True, sharey=True)
    colors = {"positional": "#d95f02", "symbolic": "#1b9e77"}  # Fig. 2C's colours
    for i, task in enumerate(tasks):
        for j, v in enumerate(variants):
            ax = axes[i][j]
            c = curves[(curves["task"] == task) & (curves["variant"] == v)].sort_values("step")
            if not len(c):
                ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="grey")
            for kind, color in (colors.items() if len(c) else ()):
                m, s = c[f"{kind}_mean"].to_numpy(float), c[f"{kind}_sd"].to_numpy(float)
                ax.plot(c["step"], m, color=color, lw=1.4, label=kind)
                if np.isfinite(s).any():
                    ax.fill_between(c["step"], m - np.nan_to_num(s), m + np.nan_to_num(s), color=color, alpha=0.15, lw=0)
            n = int(c["n_seeds"].max()) if len(c) else 0
            ax.set_title(f"{(labels or {}).get(v, v)}\n{task} ({n} seed{'s' if n != 1 else ''})", fontsize=8)
            if i == len(tasks) - 1:
                ax.set_xlabel("step")
            if j == 0:
                ax.set_ylabel(f"pure heads (γ = {GAMMA:g})")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


__all__ = ["plot_pure_count_curves"]
