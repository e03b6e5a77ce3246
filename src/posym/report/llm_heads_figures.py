"""The positional–symbolic plane of a real LLM's heads (SPEC §6; Paper B's LLM figure, our drawing).

:func:`plot_llm_heads_plane` draws the ``llm_heads.csv`` table of ``posym llm heads``: s_POS on x,
s_SYM on y, one dot per head coloured by its layer (colour bar), one panel per prompt set; each
panel's title gives the Pearson r of s_POS vs s_SYM across its heads. :func:`plot_llm_heads_layers`
draws ``llm_heads_layers.csv``: the median s_POS / s_SYM (and block mass) over each layer's heads vs
the layer, one panel per prompt set, global-attention layers shaded when the model also has sliding
layers. Save with :func:`posym.report.figures.save_figure`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

from posym.errors import PosymError
from posym.report.figures import new_figure

SET_TITLES = {"binding": "entity–attribute binding", "number": "1-hop number", "letter": "1-hop letter"}


def _r(g: pd.DataFrame) -> float:
    x, y = g["s_pos"].to_numpy(float), g["s_sym"].to_numpy(float)
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _sets(table: pd.DataFrame, what: str) -> list:
    """The prompt sets to draw (``[None]`` without a ``prompt_set`` column); PosymError when ``table``
    lacks ``layer, s_pos, s_sym`` or is empty."""
    missing = {"layer", "s_pos", "s_sym"} - set(table.columns)
    if missing:
        raise PosymError(f"{what} lacks column(s) {sorted(missing)}")
    if table.empty:
        raise PosymError(f"empty {what}")
    return list(dict.fromkeys(table["prompt_set"])) if "prompt_set" in table else [None]


def _low(table: pd.DataFrame) -> float:
    """Lower axis limit: -1.03 when a score is negative (centred scores), else -0.03."""
    return -1.03 if table[["s_pos", "s_sym"]].min().min() < 0 else -0.03


def _panel(ax: Axes, g: pd.DataFrame, vmax: int, title: str, ylabel: bool = True, lo: float = -0.03) -> PathCollection:
    sc = ax.scatter(g["s_pos"], g["s_sym"], c=g["layer"], cmap="viridis", vmin=0, vmax=vmax, s=14,
                    edgecolors="k", linewidths=0.2, alpha=0.9)
    ax.plot([0, 1], [1, 0], color="grey", lw=0.5, ls=":")
    ax.set(xlim=(lo, 1.03), ylim=(lo, 1.03), xlabel="s_POS", ylabel="s_SYM" if ylabel else "", aspect="equal")
    ax.set_title(f"{title} (r = {_r(g):.2f})", fontsize=9)
    return sc


def plot_llm_heads_plane(table: pd.DataFrame, ax: Axes | None = None, title: str | None = None) -> Figure:
    """s_POS vs s_SYM of every head, coloured by layer.

    ``table``: columns ``layer, s_pos, s_sym`` and optionally ``prompt_set``. Without ``ax``: one
    panel per prompt set and a shared layer colour bar. With ``ax``: the whole table in that axis
    (it must hold a single prompt set).
    """
    sets = _sets(table, "heads table")
    vmax = max(1, int(table["layer"].max()))
    if ax is not None:
        if len(sets) > 1:
            raise PosymError("an explicit ax draws one prompt set; pass a table with a single prompt_set")
        fig = ax.figure
        sc = _panel(ax, table, vmax, title or SET_TITLES.get(sets[0], str(sets[0] or "heads")), lo=_low(table))
        fig.colorbar(sc, ax=ax, label="layer")
        return fig
    fig, axes = new_figure((3.4 * len(sets) + 1.0, 3.6), 1, len(sets), squeeze=False, layout="constrained")
    for i, (a, s) in enumerate(zip(axes[0], sets)):
        g = table if s is None else table[table["prompt_set"] == s]
        sc = _panel(a, g, vmax, SET_TITLES.get(s, str(s or "heads")), ylabel=i == 0, lo=_low(table))
    fig.colorbar(sc, ax=list(axes[0]), label="layer", shrink=0.85)
    if title:
        fig.suptitle(title, fontsize=10, y=1.06)
    return fig


def plot_llm_heads_layers(layers: pd.DataFrame, title: str | None = None) -> Figure:
    """Median s_POS, s_SYM (solid) and block mass (dotted, when present) per layer, one panel per
    prompt set (SPEC §6). ``layers``: columns ``layer, s_pos, s_sym`` and optionally ``prompt_set``,
    ``layer_type`` (layers of type ``"global"`` are shaded when other types exist), ``block_mass``.
    The y axis spans [-1, 1] when a score is negative (centred scores), else [0, 1]."""
    sets = _sets(layers, "layer-medians table")
    lo = _low(layers)
    fig, axes = new_figure((3.3 * len(sets) + 1.2, 2.9), 1, len(sets), squeeze=False, sharey=True,
                           layout="constrained")
    for i, (ax, s) in enumerate(zip(axes[0], sets)):
        g = (layers if s is None else layers[layers["prompt_set"] == s]).sort_values("layer")
        if "layer_type" in g and g["layer_type"].nunique() > 1:
            for j, layer in enumerate(g.loc[g["layer_type"] == "global", "layer"]):
                ax.axvspan(layer - 0.5, layer + 0.5, color="0.85", lw=0, label="global layer" if j == 0 else None)
        ax.plot(g["layer"], g["s_pos"], "-o", ms=3, color="tab:blue", label="s_POS")
        ax.plot(g["layer"], g["s_sym"], "-s", ms=3, color="tab:orange", label="s_SYM")
        if "block_mass" in g:
            ax.plot(g["layer"], g["block_mass"], ":", color="0.4", label="block mass")
        if lo < -1:
            ax.axhline(0, color="grey", lw=0.5)
        ax.set(ylim=(lo, 1.03), xlabel="layer", ylabel="median over heads" if i == 0 else "")
        ax.set_title(SET_TITLES.get(s, str(s or "heads")), fontsize=9)
    fig.legend(*axes[0][0].get_legend_handles_labels(), fontsize=7, loc="outside right center")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


__all__ = ["plot_llm_heads_layers", "plot_llm_heads_plane"]
