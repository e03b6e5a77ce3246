"""The positional–symbolic plane of a real LLM's heads (SPEC §6; Paper B's LLM figure, our drawing).

:func:`plot_llm_heads_plane` draws the ``llm_heads.csv`` table of ``posym llm heads``: s_POS on x,
s_SYM on y, one dot per head coloured by its layer (colour bar), one panel per prompt set; each
panel's title gives the Pearson r of s_POS vs s_SYM across its heads. Save with
:func:`posym.report.figures.save_figure`.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from posym.errors import PosymError

SET_TITLES = {"binding": "entity–attribute binding", "number": "1-hop number", "letter": "1-hop letter"}


def _r(g: pd.DataFrame) -> float:
    x, y = g["s_pos"].to_numpy(float), g["s_sym"].to_numpy(float)
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])


def _panel(ax: plt.Axes, g: pd.DataFrame, vmax: int, title: str, ylabel: bool = True):
    sc = ax.scatter(g["s_pos"], g["s_sym"], c=g["layer"], cmap="viridis", vmin=0, vmax=vmax, s=14,
                    edgecolors="k", linewidths=0.2, alpha=0.9)
    ax.plot([0, 1], [1, 0], color="grey", lw=0.5, ls=":")
    ax.set(xlim=(-0.03, 1.03), ylim=(-0.03, 1.03), xlabel="s_POS", ylabel="s_SYM" if ylabel else "", aspect="equal")
    ax.set_title(f"{title} (r = {_r(g):.2f})", fontsize=9)
    return sc


def plot_llm_heads_plane(table: pd.DataFrame, ax: plt.Axes | None = None, title: str | None = None) -> plt.Figure:
    """s_POS vs s_SYM of every head, coloured by layer.

    ``table``: columns ``layer, s_pos, s_sym`` and optionally ``prompt_set``. Without ``ax``: one
    panel per prompt set and a shared layer colour bar. With ``ax``: the whole table in that axis
    (it must hold a single prompt set).
    """
    missing = {"layer", "s_pos", "s_sym"} - set(table.columns)
    if missing:
        raise PosymError(f"heads table lacks column(s) {sorted(missing)}")
    if table.empty:
        raise PosymError("empty heads table")
    sets = list(dict.fromkeys(table["prompt_set"])) if "prompt_set" in table else [None]
    vmax = max(1, int(table["layer"].max()))
    if ax is not None:
        if len(sets) > 1:
            raise PosymError("an explicit ax draws one prompt set; pass a table with a single prompt_set")
        fig = ax.figure
        sc = _panel(ax, table, vmax, title or SET_TITLES.get(sets[0], str(sets[0] or "heads")))
        fig.colorbar(sc, ax=ax, label="layer")
        return fig
    fig, axes = plt.subplots(1, len(sets), figsize=(3.4 * len(sets) + 1.0, 3.6), squeeze=False, layout="constrained")
    for i, (a, s) in enumerate(zip(axes[0], sets)):
        g = table if s is None else table[table["prompt_set"] == s]
        sc = _panel(a, g, vmax, SET_TITLES.get(s, str(s or "heads")), ylabel=i == 0)
    fig.colorbar(sc, ax=list(axes[0]), label="layer", shrink=0.85)
    if title:
        fig.suptitle(title, fontsize=10, y=1.06)
    return fig


__all__ = ["plot_llm_heads_plane"]
