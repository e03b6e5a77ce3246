"""Figures of the theory part, drawn from saved tables (DESIGN "Figures"): each returns a Figure.

* :func:`plot_discrepancy` — Fig. 5A, ``Δ(n)`` vs ``n`` for Index and Retrieval with the Theorem 3.2
  bounds dashed (table of :func:`posym.theory.discrepancy.discrepancy_table`).
* :func:`plot_restricted` — accuracy vs answer position of frequency-restricted one-layer heads, one
  panel per task (and restriction mode), one line per band (table of
  :func:`posym.theory.restricted.restricted_table`).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from posym.errors import PosymError  # noqa: E402

MECH_COLORS = {"index": "#d95f02", "retrieval": "#1b9e77"}
BAND_COLORS = {"high": "#d95f02", "low": "#1b9e77", "all": "#7570b3"}
BAND_STYLES = {"all": dict(ls=":", marker="s", lw=3.0), "high": dict(ls="-", marker="o", lw=1.5),
               "low": dict(ls="--", marker="^", lw=1.5)}


def _need(table: pd.DataFrame, cols: set[str], what: str) -> None:
    missing = cols - set(table.columns)
    if missing:
        raise PosymError(f"{what} table lacks column(s): {', '.join(sorted(missing))}")
    if table.empty:
        raise PosymError(f"{what} table is empty")


def plot_discrepancy(table: pd.DataFrame, ax: plt.Axes | None = None, log: bool = True) -> plt.Figure:
    """Fig. 5A: exact worst-case discrepancy ``Δ(n)`` (solid) and the Theorem 3.2 bound (dashed)."""
    _need(table, {"mechanism", "n", "delta", "bound"}, "discrepancy")
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 3.4))
    else:
        fig = ax.figure
    for mech, df in table.groupby("mechanism", sort=False):
        df = df.sort_values("n")
        c = MECH_COLORS.get(str(mech), None)
        label = str(mech).capitalize()
        if "theta" in df and df["theta"].notna().any():
            label += f" (θ={df['theta'].iloc[0]:g})"
        ax.plot(df["n"], df["delta"], color=c, lw=1.5, label=f"{label}: Δ(n)")
        ax.plot(df["n"], df["bound"], color=c, lw=1.2, ls="--", label=f"{str(mech).capitalize()}: bound")
    if log:
        ax.set_yscale("log")
    ax.set(xlabel="input length n", ylabel="discrepancy Δ", title="discrepancy vs length (Thm 3.2)")
    ax.legend(fontsize=7, loc="lower left")
    return fig


def plot_restricted(table: pd.DataFrame, axes=None) -> plt.Figure:
    """Accuracy vs answer position: one panel per task (rows: restriction ``mode`` if present),
    one line per frequency band."""
    _need(table, {"task", "band", "answer_pos", "acc"}, "restricted")
    tasks = list(dict.fromkeys(table["task"]))
    modes = list(dict.fromkeys(table["mode"])) if "mode" in table else [None]
    if axes is None:
        fig, axes = plt.subplots(len(modes), len(tasks), figsize=(4.2 * len(tasks), 3.0 * len(modes)),
                                 squeeze=False)
    else:
        import numpy as np

        axes = np.asarray(axes).reshape(len(modes), len(tasks))
        fig = axes[0, 0].figure
    for r, mode in enumerate(modes):
        for c, task in enumerate(tasks):
            ax = axes[r, c]
            df = table[table["task"] == task]
            if mode is not None:
                df = df[df["mode"] == mode]
            for band, g in df.groupby("band", sort=False):
                g = g.sort_values("answer_pos")
                style = BAND_STYLES.get(str(band), dict(ls="-", marker="o", lw=1.5))
                ax.plot(g["answer_pos"], g["acc"], ms=4, color=BAND_COLORS.get(str(band)), label=str(band),
                        **style)
            title = f"{task}" + (f" ({mode})" if mode is not None else "")
            ax.set(xlabel="answer position", ylabel="accuracy", ylim=(-0.02, 1.05), title=title)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(handles, labels, title="frequency band", loc="lower center", ncol=len(labels), fontsize=8,
               title_fontsize=8)
    return fig


def plot_trained_discrepancy(table: pd.DataFrame, axes=None) -> plt.Figure:
    """Median ``Δ`` of trained heads vs added tokens: one panel per task, one line per layer (the median
    over the layer's heads of each head's median ``Δ`` over prompts; table of
    :func:`posym.theory.trained.trained_discrepancy`)."""
    import numpy as np

    _need(table, {"task", "extra_tokens", "layer", "head", "delta_median"}, "trained discrepancy")
    tasks = list(dict.fromkeys(table["task"]))
    if axes is None:
        fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 3.4), squeeze=False)
        axes = axes[0]
    else:
        axes = np.atleast_1d(axes)
        fig = axes[0].figure
    n_layers = int(table["layer"].max()) + 1
    cmap = plt.get_cmap("viridis")
    for ax, task in zip(axes, tasks):
        df = table[table["task"] == task]
        per_layer = df.groupby(["layer", "extra_tokens"])["delta_median"].median().reset_index()
        for layer, g in per_layer.groupby("layer"):
            ax.plot(g["extra_tokens"], g["delta_median"], marker="o", ms=3, lw=1.2,
                    color=cmap(layer / max(n_layers - 1, 1)), label=f"L{layer}")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_yscale("log")
        ax.set(xlabel="added tokens", ylabel="median Δ of the last query", title=f"{task} task: trained heads")
    axes[-1].legend(fontsize=6, ncol=2, title="layer", title_fontsize=7)
    fig.tight_layout()
    return fig


__all__ = ["plot_discrepancy", "plot_restricted", "plot_trained_discrepancy"]
