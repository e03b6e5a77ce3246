"""Figures of the RoPE frequency analysis (Paper A Fig. 8 and Fig. 4B), drawn from saved tables.

* :func:`plot_freq_use` — frequency use vs frequency ID per layer (``freq_use.csv``, from
  :func:`posym.heads.frequencies.frequency_use`).
* :func:`plot_qk_geometry` — queries and keys in one RoPE plane after rotation by their positions
  (``qk_geometry_L{l}.csv``, from :func:`posym.heads.frequencies.qk_geometry`).
"""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from posym.checks import require_columns
from posym.errors import PosymError
from posym.report.figures import fig_ax, new_figure

#: Width (inches) of a figure drawn for the report's page: its content is 1,124 px wide, and a figure is
#: saved at 150 dpi (:func:`posym.report.figures.save_figure`), so 7.5 in is shown at its own size.
PAGE_WIDTH_IN = 7.5


def _need(df: pd.DataFrame, cols: set[str], what: str) -> None:
    require_columns(df.columns, cols, f"{what} table")


def _weighted_id(g: pd.DataFrame) -> float:
    u = g["use"].to_numpy(dtype=float)
    tot = u.sum()
    return float((g["freq_id"].to_numpy(dtype=float) * u).sum() / tot) if tot > 0 else math.nan


def _rotary(use_df: pd.DataFrame) -> pd.DataFrame:
    df = use_df[use_df["rotary"].astype(bool)] if "rotary" in use_df else use_df
    if "use_frac" not in df:
        df = df.assign(use_frac=df["use"] / df.groupby(["layer", "head"])["use"].transform("sum"))
    return df


def plot_freq_use(use_df: pd.DataFrame, ax: Axes | None = None, max_cols: int = 4,
                  title: str | None = None) -> Figure:
    """Fig. 8: share of frequency use ``use_frac`` vs frequency ID (1 = fastest), per layer.

    Without ``ax``: one small panel per layer (``max_cols`` panels a row, at most
    :data:`PAGE_WIDTH_IN` wide in all: readable at the report's page width), one line per head, the
    weighted-average ID marked by a dashed line and given in the panel title. With ``ax``: every
    (layer, head) as one line on it, coloured by layer. Rotary frequencies only. ``title``: figure
    title (the axes title when ``ax`` is given).
    """
    _need(use_df, {"layer", "head", "freq_id", "use"}, "frequency-use")
    df = _rotary(use_df)
    if df.empty:
        raise PosymError("frequency-use table has no rotary rows to plot")
    layers = sorted(df["layer"].unique())
    cmap = matplotlib.colormaps["viridis"].resampled(max(2, len(layers)))
    if ax is not None:
        for i, layer in enumerate(layers):
            for head, g in df[df["layer"] == layer].groupby("head"):
                g = g.sort_values("freq_id")
                ax.plot(g["freq_id"], g["use_frac"], color=cmap(i), lw=1,
                        label=f"L{layer}" if head == df["head"].min() else None)
        ax.set(xlabel="frequency ID (1 = fastest)", ylabel="share of use", title=title or "frequency use per layer")
        ax.legend(fontsize=6, ncol=2)
        return ax.figure
    ncols = max(1, min(int(max_cols), len(layers)))
    nrows = math.ceil(len(layers) / ncols)
    width = min(3.0 * ncols, PAGE_WIDTH_IN)
    fig, axes = new_figure((width, nrows * min(2.2, 0.75 * width / ncols + 0.6)), nrows, ncols,
                           sharex=True, squeeze=False)
    heads = sorted(df["head"].unique())
    hcolors = matplotlib.colormaps["tab10"]
    for i, layer in enumerate(layers):
        a = axes[i // ncols][i % ncols]
        ids = []
        for h, head in enumerate(heads):
            g = df[(df["layer"] == layer) & (df["head"] == head)].sort_values("freq_id")
            if g.empty:
                continue
            a.plot(g["freq_id"], g["use_frac"], color=hcolors(h % 10), lw=1,
                   label=f"head {head}" if len(heads) > 1 else None)
            w = _weighted_id(g)
            ids.append(w)
            if np.isfinite(w):
                a.axvline(w, color=hcolors(h % 10), ls="--", lw=0.7)
        shown = ", ".join(f"{w:.1f}" for w in ids[:3]) + ("…" if len(ids) > 3 else "")
        a.set_title(f"layer {layer}: ID {shown}", fontsize=8)
        a.tick_params(labelsize=7)
        if i % ncols == 0:
            a.set_ylabel("share of use", fontsize=7)
        if i // ncols == nrows - 1:
            a.set_xlabel("frequency ID", fontsize=7)
    for j in range(len(layers), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    if len(heads) > 1:
        axes[0][0].legend(fontsize=6)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_qk_geometry(points_df: pd.DataFrame, ax: Axes | None = None, rotated: bool | None = None,
                     normalize: bool = True) -> Figure:
    """Fig. 4B: queries and keys in one RoPE plane.

    ``rotated=True`` plots ``(x, y)`` (each vector rotated by its own position: keys fan out by
    position, and a query points at the key it selects), ``False`` the pre-rotary ``(x_pre, y_pre)``
    (for a positional head the keys align and the queries spread by offset). ``None`` (default): both
    side by side when ``ax`` is None, the rotated view on a given ``ax``. Keys: circles coloured by
    position; queries: triangles coloured by ``value`` (integer offset for the number task).
    ``normalize`` divides queries and keys each by their median length (they live on different
    scales; directions are what the logit compares); the unit circle is drawn for reference.
    """
    if rotated is None:
        if ax is None:
            _need(points_df, {"kind", "value", "x", "y", "x_pre", "y_pre"}, "geometry")
            fig, axes = new_figure((PAGE_WIDTH_IN, 0.55 * PAGE_WIDTH_IN), 1, 2)  # page width
            plot_qk_geometry(points_df, axes[0], rotated=True, normalize=normalize)
            plot_qk_geometry(points_df, axes[1], rotated=False, normalize=normalize)
            fig.tight_layout()
            return fig
        rotated = True
    _need(points_df, {"kind", "value", "x", "y"} | ({"x_pre", "y_pre"} if not rotated else set()), "geometry")
    xc, yc = ("x", "y") if rotated else ("x_pre", "y_pre")
    fig, ax = fig_ax(ax, (5.2, 4.6))
    keys = points_df[points_df["kind"] == "key"]
    queries = points_df[points_df["kind"] == "query"]

    def xy(df):
        x, y = df[xc].to_numpy(dtype=float), df[yc].to_numpy(dtype=float)
        if normalize and len(df):
            s = np.median(np.hypot(x, y))
            if s > 0:
                x, y = x / s, y / s
        return x, y

    kx, ky = xy(keys)
    qx, qy = xy(queries)
    if normalize:
        th = np.linspace(0, 2 * np.pi, 200)
        ax.plot(np.cos(th), np.sin(th), color="0.8", lw=0.6, zorder=0)
    if len(keys):
        sk = ax.scatter(kx, ky, c=keys["value"], cmap="viridis", s=10, alpha=0.6, marker="o", linewidths=0)
        cb = fig.colorbar(sk, ax=ax, fraction=0.046, pad=0.03)
        cb.set_label("key position", fontsize=7)
        cb.ax.tick_params(labelsize=6)
    if len(queries):
        qv = queries["value"].to_numpy(dtype=float)
        ok = np.isfinite(qv)
        if (~ok).any():
            ax.scatter(qx[~ok], qy[~ok], color="0.4", s=22, marker="^", linewidths=0, label="query (no value)")
        if ok.any():
            sq = ax.scatter(qx[ok], qy[ok], c=qv[ok], cmap="plasma", s=26, marker="^", edgecolors="k",
                            linewidths=0.3)
            task = points_df.attrs.get("task")
            lab = {"number": "query offset", "letter": "query right letter"}.get(task, "query value")
            cb = fig.colorbar(sq, ax=ax, fraction=0.046, pad=0.12, orientation="horizontal")
            cb.set_label(lab, fontsize=7)
            cb.ax.tick_params(labelsize=6)
    ax.set_aspect("equal", adjustable="datalim")
    ax.axhline(0, color="0.9", lw=0.5, zorder=0)
    ax.axvline(0, color="0.9", lw=0.5, zorder=0)
    title = "query/key geometry"
    if {"layer", "head", "freq_id", "angle"} <= set(points_df.columns) and len(points_df):
        r = points_df.iloc[0]
        title = (f"layer {int(r['layer'])}, head {int(r['head'])}: frequency ID {int(r['freq_id'])} "
                 f"(angle {float(r['angle']):.3g})")
    ax.set_title(title + ("\nrotated by position" if rotated else "\npre-rotary"), fontsize=9)
    ax.set_xlabel("plane coordinate 1" + (" (scaled)" if normalize else ""), fontsize=8)
    ax.set_ylabel("plane coordinate 2" + (" (scaled)" if normalize else ""), fontsize=8)
    ax.tick_params(labelsize=7)
    return fig


__all__ = ["PAGE_WIDTH_IN", "plot_freq_use", "plot_qk_geometry"]
