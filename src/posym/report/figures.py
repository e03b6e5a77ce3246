"""Matplotlib figures drawn from saved tables (DESIGN "Figures"); each returns a Figure.

``plot_<figure>(table, ax=None)`` style: inputs are the tidy tables of a run (metrics.csv,
scores.csv, purity tables), never models.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import pandas as pd  # noqa: E402

HOP_COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a"]


def save_figure(fig: plt.Figure, path: str | os.PathLike) -> list[Path]:
    """Write ``path.png`` and ``path.pdf`` (suffix of ``path`` ignored); returns both paths."""
    base = Path(path)
    base = base.with_suffix("") if base.suffix in (".png", ".pdf") else base
    base.parent.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix in (".png", ".pdf"):
        p = base.with_name(base.name + suffix)
        fig.savefig(p, dpi=150, bbox_inches="tight")
        out.append(p)
    return out


def close_figure(fig: plt.Figure) -> None:
    """Release a figure drawn by one of the ``plot_*`` functions (pyplot keeps them otherwise)."""
    plt.close(fig)


def plot_accuracy(metrics: pd.DataFrame, ax: plt.Axes | None = None, title: str | None = None) -> plt.Figure:
    """Fig. 2A: validation accuracy per hop (and global) over training steps."""
    fig, ax = _fig_ax(ax)
    val = metrics[metrics["split"] == "val"].sort_values("step")
    for h, c in zip(range(1, 5), HOP_COLORS):
        col = f"acc_hop{h}"
        if col in val and val[col].notna().any():
            ax.plot(val["step"], val[col], color=c, label=f"{h} hop{'s' if h > 1 else ''}")
    ax.plot(val["step"], val["acc"], color="k", lw=1, ls="--", label="all")
    ax.axhline(0.9, color="grey", lw=0.5, ls=":")
    ax.set(xlabel="step", ylabel="accuracy", ylim=(-0.02, 1.02), title=title or "accuracy per hop")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def plot_score_curves(scores: pd.DataFrame, layers: Sequence[int], ax: plt.Axes | None = None,
                      entropy: pd.Series | None = None, head: int = 0) -> plt.Figure:
    """Fig. 2B: s_POS (solid), s_SYM (dashed) and normalised entropy (dotted) over steps per layer."""
    fig, ax = _fig_ax(ax)
    cmap = plt.get_cmap("viridis", max(2, len(layers)))
    for i, layer in enumerate(layers):
        g = scores[(scores["layer"] == layer) & (scores["head"] == head)].sort_values("step")
        if g.empty:
            continue
        c = cmap(i)
        ax.plot(g["step"], g["s_pos"], color=c, ls="-", label=f"L{layer} s_POS")
        ax.plot(g["step"], g["s_sym"], color=c, ls="--", label=f"L{layer} s_SYM")
        if entropy is not None:
            ax.plot(g["step"], entropy.loc[g.index], color=c, ls=":", lw=1, label=f"L{layer} entropy")
    ax.set(xlabel="step", ylabel="score", ylim=(-0.02, 1.05), title="positional / symbolic scores")
    ax.legend(fontsize=6, ncol=2, loc="best")
    return fig


def plot_pure_counts(counts: pd.DataFrame, ax: plt.Axes | None = None) -> plt.Figure:
    """Fig. 2C: cumulative number of pure positional and pure symbolic heads."""
    fig, ax = _fig_ax(ax)
    ax.step(counts["step"], counts["positional"], where="post", color="#d95f02", label="positional")
    ax.step(counts["step"], counts["symbolic"], where="post", color="#1b9e77", label="symbolic")
    top = int(max(counts["positional"].max(), counts["symbolic"].max(), 1))
    ax.set(xlabel="step", ylabel="pure heads", ylim=(-0.3, top + 0.5), title="pure heads (cumulative)")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def plot_fig2(metrics: pd.DataFrame, scores: pd.DataFrame, counts: pd.DataFrame, layers: Sequence[int],
              entropy: pd.Series | None = None, title: str = "") -> plt.Figure:
    """Paper A Fig. 2 for one run: (A) accuracy per hop, (B) scores + entropy, (C) pure-head counts."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    plot_accuracy(metrics, axes[0], title="(A) accuracy per hop")
    plot_score_curves(scores, layers, axes[1], entropy=entropy)
    axes[1].set_title("(B) s_POS, s_SYM, entropy")
    plot_pure_counts(counts, axes[2])
    axes[2].set_title("(C) pure heads")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def _fig_ax(ax: plt.Axes | None) -> tuple[plt.Figure, plt.Axes]:
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        return fig, ax
    return ax.figure, ax


__all__ = ["save_figure", "plot_accuracy", "plot_score_curves", "plot_pure_counts", "plot_fig2", "plot_lengthgen"]


def plot_lengthgen(summaries: dict[str, pd.DataFrame], ax: plt.Axes | None = None,
                   paper: dict[str, dict[int, float]] | None = None) -> plt.Figure:
    """Fig. 5B: accuracy vs added target-window tokens per task (mean ± sd band over seeds); Paper A's
    digitised points as markers when ``paper`` is given."""
    fig, ax = _fig_ax(ax)
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
    ax.legend(fontsize=7, loc="lower left")
    return fig
