"""The positional–symbolic plane coloured by classic head type (SPEC §7, "Classic head detectors
and per-prompt readings"; our drawing).

:func:`plot_head_type_plane` draws the table of :func:`posym.heads.head_types.join_head_types`: s_POS
on x, s_SYM on y, one marker per head coloured and shaped by its ``classic_type`` (legend with counts); heads whose
``posym_type`` is ``uninformative`` (too little attention on the swapped keys) are drawn hollow; heads
flagged ``is_sink`` (most attention on the start token) whose classic type is a pattern get a ring
in the sink colour. A second section of the legend gives the pure-head counts with their per-prompt
purity (the mean ``purity_fraction``: the share of prompts on which they are pure) and the heads pure
on the mean only. The legend sits right of the axes, off the data. The
title says what was measured: :func:`head_type_caption` builds it from the model, prompts, τ and
key exclusion. Save with :func:`posym.report.figures.save_figure`.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from posym.errors import PosymError
from posym.heads.head_types import CLASSIC_TYPES
from posym.report.figures import fig_ax

#: Colour of each classic type (colour-blind-safe Okabe–Ito; ``none`` grey, drawn first).
TYPE_COLOURS = {"previous_token": "#0072B2", "induction": "#D55E00", "duplicate_token": "#009E73",
                "sink": "#CC79A7", "none": "#BBBBBB"}
#: Marker of each classic type (distinct shapes, so heads stacked in one corner stay apart).
TYPE_MARKERS = {"previous_token": "s", "induction": "^", "duplicate_token": "D", "sink": "o", "none": "o"}
#: Drawing order: the common, unspecific types first, the detector types on top.
DRAW_ORDER = ("none", "sink", "duplicate_token", "induction", "previous_token")
#: Title of the pure-head section of the legend.
PURE_TITLE = "pure heads\n(share of prompts pure)"
TYPE_LABELS = {"previous_token": "previous-token", "induction": "induction", "duplicate_token": "duplicate-token",
               "sink": "sink (first token)", "none": "none"}


def head_type_caption(model: str | None = None, prompts: str | None = None, tau: float | None = None,
                      exclude: str | None = None) -> str:
    """A caption-like title: ``"<model> · prompts: <prompts> · τ = <tau> · swaps exclude: <exclude>"``
    (the parts given)."""
    parts = [str(model)] if model else []
    if prompts:
        parts.append(f"prompts: {prompts}")
    if tau is not None:
        parts.append(f"τ = {tau:g}")
    if exclude is not None:
        parts.append(f"swaps exclude: {exclude or 'none'}")
    return " · ".join(parts)


def pure_legend_labels(join: pd.DataFrame, pure_fraction: float | None = None) -> list[str]:
    """The pure-head lines of the legend: pure positional / symbolic counts with the mean share of
    prompts on which those heads are pure (their mean ``purity_fraction``), and the heads pure on the
    mean only (when the join has ``mean_type``)."""
    if "posym_type" not in join:
        return []
    out = []
    for kind in ("positional", "symbolic"):
        typed = join[join["posym_type"] == kind]
        pf = typed["purity_fraction"].mean() if "purity_fraction" in join and len(typed) else float("nan")
        out.append(f"{kind}: {len(typed)}" + ("" if pf != pf else f" ({pf:.0%})"))
    if "mean_type" in join:
        only = int((join["mean_type"].isin(["positional", "symbolic"]) & (join["mean_type"] != join["posym_type"])).sum())
        below = f"< {pure_fraction:.0%}" if pure_fraction else "too few"
        out.append(f"pure on the mean only: {only}\n({below} of prompts; typed mixed)")
    return out


def plot_head_type_plane(join: pd.DataFrame, ax: Axes | None = None, title: str | None = None, *,
                         model: str | None = None, prompts: str | None = None, tau: float | None = None,
                         exclude: str | None = None, pure_fraction: float | None = None) -> Figure:
    """s_POS vs s_SYM of every head, coloured by classic type (module doc).

    ``join``: columns ``s_pos, s_sym, classic_type`` (``posym_type``, ``is_sink``, ``mean_type``,
    ``purity_fraction`` optional). ``title``: the title; without it, :func:`head_type_caption` of
    ``model``, ``prompts``, ``tau``, ``exclude``. ``pure_fraction``: the purity threshold the types
    were read with (named in the second legend).
    """
    missing = {"s_pos", "s_sym", "classic_type"} - set(join.columns)
    if missing:
        raise PosymError(f"the head-type join lacks column(s) {sorted(missing)}")
    if join.empty:
        raise PosymError("empty head-type join")
    unknown = set(join["classic_type"]) - set(CLASSIC_TYPES)
    if unknown:
        raise PosymError(f"unknown classic type(s) {sorted(map(str, unknown))}")
    fig, ax = fig_ax(ax, (9.0, 5.4), layout="constrained")
    lo = -1.03 if join[["s_pos", "s_sym"]].min().min() < 0 else -0.03
    silent = (join["posym_type"] == "uninformative") if "posym_type" in join else pd.Series(False, index=join.index)
    handles = []
    for z, kind in enumerate(DRAW_ORDER):
        sel = join["classic_type"] == kind
        n = int(sel.sum())
        if not n:
            continue
        c, mk = TYPE_COLOURS[kind], TYPE_MARKERS[kind]
        for hollow in (False, True):
            g = join[sel & (silent == hollow)]
            if len(g):
                ax.scatter(g["s_pos"], g["s_sym"], s=34, marker=mk, facecolors="none" if hollow else c, edgecolors=c,
                           linewidths=1.0 if hollow else 0.3, alpha=0.85, zorder=2 + z)
        handles.append(Line2D([], [], ls="", marker=mk, ms=7, mfc=c, mec=c, label=f"{TYPE_LABELS[kind]} ({n})"))
    ringed = (join["is_sink"].astype(bool) & (join["classic_type"] != "sink")) if "is_sink" in join else None
    if ringed is not None and ringed.any():
        g = join[ringed]
        ax.scatter(g["s_pos"], g["s_sym"], s=150, marker="o", facecolors="none", edgecolors=TYPE_COLOURS["sink"],
                   linewidths=1.6, zorder=2 + len(DRAW_ORDER))
        handles.append(Line2D([], [], ls="", marker="o", ms=11, mfc="none", mec=TYPE_COLOURS["sink"], mew=1.6,
                              label=f"ring: also a sink ({int(ringed.sum())})"))
    if silent.any():
        handles.append(Line2D([], [], ls="", marker="o", ms=7, mfc="none", mec="k",
                              label=f"hollow: too little swap mass ({int(silent.sum())})"))
    ax.plot([0, 1], [1, 0], color="grey", lw=0.6, ls=":", zorder=1)
    ax.set(xlim=(lo, 1.03), ylim=(lo, 1.03), aspect="equal")
    ax.set_xlabel("s_POS (stays at the position)", fontsize=13)
    ax.set_ylabel("s_SYM (follows the content)", fontsize=13)
    ax.tick_params(labelsize=12)
    pure = pure_legend_labels(join, pure_fraction)
    blank = dict(ls="", marker="")
    if pure:  # one legend, two sections: nothing can overlap
        handles += [Line2D([], [], **blank, label=" "), Line2D([], [], **blank, label=PURE_TITLE)]
        handles += [Line2D([], [], **blank, label=t) for t in pure]
    leg = ax.legend(handles=handles, title="classic type (heads)", fontsize=12, title_fontsize=12, loc="center left",
                    bbox_to_anchor=(1.02, 0.5), frameon=False, alignment="left", handletextpad=0.4)
    for t in leg.get_texts():
        if t.get_text() == PURE_TITLE:
            t.set_fontweight("bold")
    text = title if title is not None else head_type_caption(model, prompts, tau, exclude)
    if text:
        ax.set_title(text, fontsize=13, wrap=True)
    return fig


__all__ = ["DRAW_ORDER", "TYPE_COLOURS", "TYPE_MARKERS", "head_type_caption", "plot_head_type_plane",
           "pure_legend_labels"]
