"""The interventions study's figures (docs/interventions.md): Fig. 5B of each task under every
intervention family, and the heads' scores under each intervention on lengthened inputs."""

from __future__ import annotations

import math
from typing import Mapping

import matplotlib
import numpy as np
import pandas as pd

from posym.constants import GAMMA, REACH_THRESHOLD
from posym.heads.dynamics import classify
from posym.lengthgen.trained import summarize_lengthgen
from posym.runs.tables import short_intervention
from posym.studies.intervention_study.study import FAMILY_ORDER
from posym.studies.intervention_study.tables import family
from posym.report.figures import new_figure


def plot_intervention_curves(lengthgen: pd.DataFrame, task: str, paper: Mapping[int, float] | None = None):
    """Fig. 5B of ``task`` under each intervention: one panel per family, every setting of the family
    as a curve (mean over models and data seeds; band: sd over models) beside the untouched model
    (black) and Paper A's points (circles). x: added target-window tokens (symlog), y: accuracy."""
    t = lengthgen[lengthgen["task"] == task]
    fams = [f for f in FAMILY_ORDER if any(family(i) == f for i in t["intervention"].unique())]
    ncol = min(3, max(1, len(fams)))
    nrow = max(1, math.ceil(len(fams) / ncol))
    fig, axes = new_figure((4.2 * ncol, 4.4 * nrow), nrow, ncol, squeeze=False, sharey=True, layout="constrained")

    def curve(g: pd.DataFrame) -> pd.DataFrame:
        per_model = [summarize_lengthgen(m.drop(columns="intervention"))[["extra_tokens", "acc_mean"]]
                     for _, m in g.groupby("model")]
        allm = pd.concat(per_model)
        return allm.groupby("extra_tokens")["acc_mean"].agg(["mean", "std"]).fillna(0.0).reset_index()

    base = t[t["intervention"] == "none"]
    base_curve = curve(base) if len(base) else None
    for ax, fam in zip(axes.flat, fams):
        if base_curve is not None:
            ax.plot(base_curve["extra_tokens"], base_curve["mean"], color="black", lw=1.6, label="none")
        settings = [i for i in t["intervention"].unique() if family(i) == fam]
        colors = matplotlib.colormaps["viridis"](np.linspace(0.05, 0.85, max(1, len(settings))))
        for c, interv in zip(colors, settings):
            cv = curve(t[t["intervention"] == interv])
            label = short_intervention(interv).split(":", 1)[1] if ":" in interv else interv
            if len(label) > 34:
                label = label[:31] + "…"
            ax.plot(cv["extra_tokens"], cv["mean"], color=c, lw=1.2, label=label)
            if (cv["std"] > 0).any():
                ax.fill_between(cv["extra_tokens"], cv["mean"] - cv["std"], cv["mean"] + cv["std"], color=c,
                                alpha=0.15, lw=0)
        if paper:
            xs, ys = zip(*sorted(paper.items()))
            ax.plot(xs, ys, ls="none", marker="o", mfc="none", color="grey", label="Paper A")
        ax.axhline(REACH_THRESHOLD, color="grey", lw=0.5, ls=":")
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlim(left=0)
        ax.set(title=f"{task} task · {fam}", xlabel="added target-window tokens", ylim=(-0.02, 1.02))
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, borderaxespad=0)  # below
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (mean over models)")
    for ax in list(axes.flat)[len(fams):]:
        ax.set_visible(False)
    return fig


def plot_head_readout(heads: pd.DataFrame, task: str):
    """The heads under each intervention on lengthened inputs (``task``): left, mean s_POS of the heads
    that are pure positional on the untouched model at +0 (the Index heads); right, mean s_SYM of the
    heads pure symbolic there; one line per intervention (mean over models), x: added tokens."""
    t = heads[heads["task"] == task]
    fig, axes = new_figure((9.5, 3.4), 1, 2, sharex=True)
    base = t[(t["intervention"] == "none") & (t["extra_tokens"] == 0)]
    kinds = pd.Series(classify(base["s_pos"].to_numpy(), base["s_sym"].to_numpy(), GAMMA),
                      index=list(zip(base["model"], base["layer"], base["head"])))
    groups = [("positional", "s_pos", "s_POS of the Index (pure positional) heads"),
              ("symbolic", "s_sym", "s_SYM of the pure symbolic heads")]
    intervs = list(t["intervention"].unique())
    colors = dict(zip(intervs, matplotlib.colormaps["tab20"](np.linspace(0, 1, max(1, len(intervs))))))
    for ax, (kind, col, title) in zip(axes, groups):
        chosen = set(kinds[kinds == kind].index)
        for interv in intervs:
            g = t[t["intervention"] == interv]
            g = g[[k in chosen for k in zip(g["model"], g["layer"], g["head"])]]
            if g.empty:
                continue
            m = g.groupby("extra_tokens")[col].mean()
            ax.plot(m.index, m.to_numpy(), marker="o", ms=3, lw=1.6 if interv == "none" else 1.0,
                    color="black" if interv == "none" else colors[interv], label=short_intervention(interv))
        if not chosen:
            ax.text(0.5, 0.5, f"no {kind} head at +0", ha="center", va="center", transform=ax.transAxes)
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlim(left=0)
        ax.set(title=f"{task} task: {title}", xlabel="added target-window tokens", ylim=(-1.02, 1.02))
    axes[0].set_ylabel("score (mean over heads and models)")
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


__all__ = ["plot_head_readout", "plot_intervention_curves"]
