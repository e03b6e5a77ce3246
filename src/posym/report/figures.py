"""Matplotlib figures drawn from saved tables (Paper A's figures, SPEC §5); each returns a Figure.

``plot_<figure>(table, ax=None)`` style: inputs are the tidy tables of a run (metrics.csv,
scores.csv, purity tables), never models. Every figure of posym is a ``matplotlib.figure.Figure``
made by :func:`new_figure` (an Agg canvas of its own): no pyplot, no backend switch, so importing
or drawing leaves a notebook's backend and pyplot's figure list alone.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any, Sequence

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from posym.files import write_atomic

HOP_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"]

#: Size (inches) of a one-panel figure made by :func:`fig_ax`.
DEFAULT_FIGSIZE = (5.0, 3.5)


def _blank_figure(figsize: tuple[float, float], layout: str | None = None) -> Figure:
    """An empty Figure on its own Agg canvas (``fig.canvas.draw()`` renders; pyplot never sees it)."""
    fig = Figure(figsize=figsize, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def new_figure(figsize: tuple[float, float] = DEFAULT_FIGSIZE, nrows: int = 1, ncols: int = 1, *,
               layout: str | None = None, **subplot_kw: Any) -> tuple[Figure, Any]:
    """``(fig, axes)`` as ``pyplot.subplots`` returns them, without pyplot: a ``Figure`` of ``figsize``
    inches (``layout``: ``"constrained"``, ``"tight"`` or None) and ``fig.subplots(nrows, ncols,
    **subplot_kw)`` (``sharex``, ``sharey``, ``squeeze``, ``gridspec_kw``, ...)."""
    fig = _blank_figure(figsize, layout)
    return fig, fig.subplots(nrows, ncols, **subplot_kw)


def fig_ax(ax: Axes | None, figsize: tuple[float, float] = DEFAULT_FIGSIZE, *,
           layout: str | None = None) -> tuple[Figure, Axes]:
    """``(ax.figure, ax)`` when an Axes is given, else a new one-panel figure of ``figsize``: the
    ``ax=None`` rule of every ``plot_<figure>(table, ax=None)``."""
    if ax is None:
        return new_figure(figsize, layout=layout)
    return ax.figure, ax


def save_figure(fig: Figure, path: str | os.PathLike) -> list[Path]:
    """Write ``path.png`` and ``path.pdf`` (suffix of ``path`` ignored) at 150 dpi, each atomically;
    returns both paths."""
    base = Path(path)
    base = base.with_suffix("") if base.suffix in (".png", ".pdf") else base
    out = []
    for suffix in (".png", ".pdf"):
        p = base.with_name(base.name + suffix)
        write_atomic(p, lambda tmp, fmt=suffix[1:]: fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight"))
        out.append(p)
    return out


def close_figure(fig: Figure) -> None:
    """Kept for callers: a figure of :func:`new_figure` is not registered with pyplot, so dropping
    the last reference frees it; nothing to do."""


def plot_accuracy(metrics: pd.DataFrame, ax: Axes | None = None, title: str | None = None) -> Figure:
    """Fig. 2A: validation accuracy per hop (and global) over training steps."""
    fig, ax = fig_ax(ax)
    val = metrics[metrics["split"] == "val"].sort_values("step")
    for h, c in zip(range(1, 5), HOP_COLORS):
        col = f"acc_hop{h}"
        if col in val and val[col].notna().any():
            ax.plot(val["step"], val[col], color=c, label=f"{h} hop{'s' if h > 1 else ''}")
    ax.plot(val["step"], val["acc"], color="k", lw=1, ls="--", label="all")
    ax.axhline(0.9, color="grey", lw=0.5, ls=":")
    ax.set(xlabel="step", ylabel="accuracy", ylim=(-0.02, 1.02), title=title or "accuracy per hop")
    ax.legend(loc="lower right")
    return fig


#: Font sizes of the multi-panel figures: readable when a 12-inch figure is shown ~1,100 px wide.
READABLE = {"font.size": 11, "axes.titlesize": 11.5, "axes.labelsize": 11, "xtick.labelsize": 10,
            "ytick.labelsize": 10, "legend.fontsize": 9.5, "figure.titlesize": 13}

#: Panel B of Fig. 2: the column of ``scores.csv`` drawn, the panel title and the colour-bar label.
SCORE_PANELS = (
    ("s_pos", "(B1) s_POS", "s_POS"),
    ("s_sym", "(B2) s_SYM", "s_SYM"),
    ("entropy", "(B3) attention entropy H / ln n", "H / ln n (1 = uniform)"),
)


def head_label(layer: int, head: int) -> str:
    """``L{layer}H{head}``: the row label of one head in Fig. 2B."""
    return f"L{int(layer)}H{int(head)}"


def score_matrix(scores: pd.DataFrame, column: str, layers: Sequence[int] | None = None
                 ) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
    """``(values [heads, steps], [(layer, head), ...], steps)`` of one ``scores.csv`` column (one τ):
    a row per head of the chosen ``layers`` (default all), ordered by layer then head; NaN where a
    step lacks the head."""
    sub = scores if layers is None else scores[scores["layer"].isin(list(layers))]
    wide = sub.pivot_table(index=["layer", "head"], columns="step", values=column, aggfunc="mean")
    wide = wide.sort_index()
    keys = [(int(a), int(b)) for a, b in wide.index]
    return wide.to_numpy(dtype=float), keys, wide.columns.to_numpy(dtype=float)


def _edges(steps: np.ndarray) -> np.ndarray:
    """Cell edges around each step (midpoints; the outer cells as wide as their neighbours)."""
    if len(steps) == 1:
        return np.array([steps[0] - 0.5, steps[0] + 0.5])
    mid = (steps[:-1] + steps[1:]) / 2
    return np.concatenate([[steps[0] - (mid[0] - steps[0])], mid, [steps[-1] + (steps[-1] - mid[-1])]])


def plot_score_heatmaps(scores: pd.DataFrame, axes: Sequence[Axes] | None = None,
                        layers: Sequence[int] | None = None) -> Figure:
    """Fig. 2B for any number of heads: one heat map per quantity of :data:`SCORE_PANELS` (s_POS,
    s_SYM, attention entropy H / ln n as stored in ``scores.csv``), rows = every head
    (``L{layer}H{head}``) of ``layers`` (default all), x = step, colour 0 … 1 (s_SYM < 0 drawn as 0).

    ``scores`` holds one τ (:func:`posym.heads.dynamics.select_tau`); without an ``entropy`` column
    the third panel is left out. ``axes``: one Axes per drawn quantity.
    """
    panels = [p for p in SCORE_PANELS if p[0] in scores.columns]
    if axes is None:
        n_rows = len(score_matrix(scores, panels[0][0], layers)[1])
        with matplotlib.rc_context(READABLE):
            fig, axes = new_figure((12, heatmap_height(n_rows)), 1, len(panels), squeeze=False)
        axes = list(axes[0])
    fig = axes[0].figure
    if len(axes) != len(panels):
        raise ValueError(f"plot_score_heatmaps: {len(panels)} quantities need {len(panels)} axes, got {len(axes)}")
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    for ax, (col, title, cbar_label) in zip(axes, panels):
        mat, keys, steps = score_matrix(scores, col, layers)
        mesh = ax.pcolormesh(_edges(steps), np.arange(len(keys) + 1), np.ma.masked_invalid(mat), cmap=cmap,
                             vmin=0.0, vmax=1.0, shading="flat")
        mesh.set_gid(col)
        ax.set_ylim(len(keys), 0)
        n_heads = len({h for _, h in keys})
        if len(keys) <= 40:
            ax.set_yticks(np.arange(len(keys)) + 0.5)
            ax.set_yticklabels([head_label(*k) for k in keys])
        else:  # many heads: one label per layer, at its first head
            first = [i for i, k in enumerate(keys) if i == 0 or keys[i - 1][0] != k[0]]
            ax.set_yticks(np.array(first) + 0.5)
            ax.set_yticklabels([f"L{keys[i][0]}" for i in first])
        if n_heads > 1:
            for i in range(1, len(keys)):
                if keys[i][0] != keys[i - 1][0]:
                    ax.axhline(i, color="white", lw=1.2)
        ax.set_xlabel("step")
        ax.set_title(title)
        cb = fig.colorbar(mesh, ax=ax, fraction=0.06, pad=0.02, extend="min" if col == "s_sym" else "neither")
        cb.set_label(cbar_label)
    axes[0].set_ylabel("head (layer, head)")
    return fig


def heatmap_height(n_rows: int) -> float:
    """Height in inches of a Fig. 2B heat map with ``n_rows`` heads (≈ 0.2 in per row, at least 2.6)."""
    return max(2.6, min(0.2 * n_rows, 14.0) + 1.2)


def plot_eval_history(history: pd.DataFrame, ax: Axes | None = None, acc_keys: Sequence[str] = ()) -> Figure:
    """Fig. 2A for a run of the HF ``Trainer``: its own evaluation metrics over steps
    (:func:`posym.heads.dynamics.trainer_eval_history`): ``eval_loss`` (left axis) and each of
    ``acc_keys`` (right axis, 0 … 1)."""
    fig, ax = fig_ax(ax)
    lines = []
    if "eval_loss" in history:
        lines += ax.plot(history["step"], history["eval_loss"], color="k", marker=".", label="eval_loss")
        ax.set_ylabel("eval loss")
    if acc_keys:
        ax2 = ax.twinx()
        for key, c in zip(acc_keys, HOP_COLORS * 4):
            lines += ax2.plot(history["step"], history[key], color=c, marker=".", label=key)
        ax2.set(ylim=(-0.02, 1.02), ylabel="eval accuracy")
    ax.set(xlabel="step", title="(A) HF Trainer evaluation")
    ax.legend(lines, [ln.get_label() for ln in lines], loc="best")
    return fig


def plot_fig2(metrics: pd.DataFrame, scores: pd.DataFrame, counts: pd.DataFrame, layers: Sequence[int] | None = None,
              title: str = "", eval_history: pd.DataFrame | None = None) -> Figure:
    """Paper A Fig. 2 for one run: (A) accuracy per hop (posym's ``metrics.csv``) or, without it, the HF
    ``Trainer``'s evaluation metrics (``eval_history``); (B) s_POS, s_SYM and attention entropy of
    every head over training (:func:`plot_score_heatmaps`); (C) cumulative pure heads.

    With neither accuracy source panel A is replaced by a note saying so.
    """
    val = metrics[metrics["split"] == "val"] if "split" in metrics else metrics.iloc[:0]
    has_hist = eval_history is not None and len(eval_history) and len(eval_history.columns) > 1
    panels = [p for p in SCORE_PANELS if p[0] in scores.columns]
    n_rows = len(score_matrix(scores, panels[0][0], layers)[1])
    with matplotlib.rc_context(READABLE):
        fig = _blank_figure((12, 3.6 + heatmap_height(n_rows)))
        grid = fig.add_gridspec(2, 6, height_ratios=[3.6, heatmap_height(n_rows)])
        ax_a, ax_c = fig.add_subplot(grid[0, :3]), fig.add_subplot(grid[0, 3:])
        if len(val):
            plot_accuracy(metrics, ax_a, title="(A) validation accuracy per hop")
        elif has_hist:
            from posym.heads.dynamics import accuracy_keys

            plot_eval_history(eval_history, ax_a, acc_keys=accuracy_keys(eval_history))
        else:
            ax_a.axis("off")
            ax_a.text(0.5, 0.5, textwrap.fill("(A) left out: " + NO_ACCURACY_NOTE, 60), ha="center", va="center",
                      transform=ax_a.transAxes, color="#555555")
            ax_a.set_gid("panel-a-note")
        plot_pure_counts(counts, ax_c)
        ax_c.set_title("(C) pure heads (cumulative)")
        axes_b = [fig.add_subplot(grid[1, 2 * i:2 * i + 2]) for i in range(len(panels))]
        plot_score_heatmaps(scores, axes_b, layers)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
    return fig


def plot_pure_counts(counts: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Fig. 2C: cumulative number of pure positional and pure symbolic heads."""
    fig, ax = fig_ax(ax)
    ax.step(counts["step"], counts["positional"], where="post", color="#d95f02", label="positional")
    ax.step(counts["step"], counts["symbolic"], where="post", color="#1b9e77", label="symbolic")
    top = int(max(counts["positional"].max(), counts["symbolic"].max(), 1))
    ax.set(xlabel="step", ylabel="pure heads", ylim=(-0.3, top + 0.5), title="pure heads (cumulative)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="upper left")
    return fig


#: Why panel A of Fig. 2 is missing (also printed by ``posym dynamics``).
NO_ACCURACY_NOTE = ("this run has no metrics.csv (posym) and no trainer_state.json with eval_* entries "
                    "(HF Trainer), so there is no accuracy over training to draw.")


__all__ = ["DEFAULT_FIGSIZE", "NO_ACCURACY_NOTE", "SCORE_PANELS", "close_figure", "fig_ax", "head_label", "new_figure",
           "plot_accuracy", "plot_eval_history", "plot_fig2", "plot_lengthgen", "plot_pure_counts", "plot_score_heatmaps",
           "save_figure", "score_matrix"]


def plot_lengthgen(summaries: dict[str, pd.DataFrame], ax: Axes | None = None,
                   paper: dict[str, dict[int, float]] | None = None) -> Figure:
    """Fig. 5B: accuracy vs added target-window tokens per task (mean ± sd band over seeds); Paper A's
    digitised points as markers when ``paper`` is given."""
    fig, ax = fig_ax(ax, layout="constrained")
    colors = {"number": "#d95f02", "letter": "#1b9e77"}
    for task, s in summaries.items():
        s = s.sort_values("extra_tokens")
        c = colors.get(task, None)
        ax.plot(s["extra_tokens"], s["acc_mean"], color=c, label=f"{task} (posym)")
        if "acc_sd" in s and (s["acc_sd"] > 0).any():
            ax.fill_between(s["extra_tokens"], s["acc_mean"] - s["acc_sd"], s["acc_mean"] + s["acc_sd"],
                            color=c, alpha=0.2, lw=0)
        if paper and task in paper:
            xs, ys = zip(*sorted(paper[task].items()))
            ax.plot(xs, ys, ls="none", marker="o", mfc="none", color=c, label=f"{task} (Paper A)")
    ax.set_xscale("symlog", linthresh=100)
    ax.axhline(0.9, color="grey", lw=0.5, ls=":")
    ax.set(xlabel="added target-window tokens", ylabel="accuracy", ylim=(-0.02, 1.02),
           title="length generalization")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), borderaxespad=0)  # off the curves
    return fig
