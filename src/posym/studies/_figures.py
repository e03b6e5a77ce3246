"""The figure two studies draw: Fig. 5B of every variant side by side (``posym sensitivity`` and
``posym pe-study``)."""

from __future__ import annotations

import matplotlib
import pandas as pd

from posym.constants import REACH_THRESHOLD, TASKS
from posym.report.figures import new_figure


def plot_variant_curves(curves: pd.DataFrame):
    """One panel per task: accuracy vs added tokens of every variant (± sd over seeds where there are
    several), Paper A's Fig. 5B points as black markers, the 0.9 line dotted."""
    from posym.report import paper

    tasks = [t for t in TASKS if (curves["task"] == t).any()]
    palette = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {v: palette[i % len(palette)] for i, v in enumerate(dict.fromkeys(curves["variant"]))}  # same in every panel
    fig, axes = new_figure((5.2 * max(1, len(tasks)), 3.8), 1, max(1, len(tasks)), squeeze=False, layout="constrained")
    for ax, task in zip(axes[0], tasks):
        for name, g in curves[curves["task"] == task].groupby("variant", sort=False):
            g = g.sort_values("extra_tokens")
            line, = ax.plot(g["extra_tokens"], g["acc_mean"], marker=".", ms=3, color=colors[name], label=str(name))
            sd = g["acc_sd"].fillna(0)
            if (g["n_seeds"] > 1).any() and (sd > 0).any():
                ax.fill_between(g["extra_tokens"], g["acc_mean"] - sd, g["acc_mean"] + sd, color=line.get_color(),
                                alpha=0.15, lw=0)
        xs, ys = zip(*sorted(paper.LENGTHGEN[task].items()))
        ax.plot(xs, ys, ls="none", marker="o", mfc="none", color="black", label="Paper A")
        ax.axhline(REACH_THRESHOLD, color="grey", lw=0.5, ls=":")
        ax.set_xscale("symlog", linthresh=100)
        ax.set(xlabel="added target-window tokens", ylabel="accuracy", ylim=(-0.02, 1.02), xlim=(0, None),
               title=f"Fig. 5B by variant: {task} task")
    # one legend beside the panels (a variant has one colour in every panel), off the curves
    handles = {label: h for ax in axes[0] for h, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="outside right upper")
    return fig


__all__ = ["plot_variant_curves"]
