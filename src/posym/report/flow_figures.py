"""Paper A Fig. 3: information flow of one prompt (left) and head-ablation heat maps (right).

Drawn from the plotting-free tables of ``posym.heads.flow.attention_flow`` (edges) and
``posym.heads.ablate.ablate_heads`` (ablation table); each function returns a matplotlib Figure.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from posym.errors import PosymError
from posym.report.figures import fig_ax, new_figure, save_figure  # save_figure re-exported

#: Font sizes (pt) of a flow diagram: the report shows one diagram per row, ≈ 0.8 of its size.
FLOW_FONT = {"ticks": 11, "label": 12, "title": 12.5}
CHAIN_COLOR = "#d62728"
EDGE_COLOR = "#4c72b0"
HEAD_COLORS = ["#4c72b0", "#55a868", "#8172b2", "#ccb974", "#64b5cd", "#8c8c8c"]


def _chain_pairs(chain: Sequence[int]) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in zip(chain[:-1], chain[1:])}


def plot_flow(edges: pd.DataFrame, tokens: Sequence[str], chain: Sequence[int] = (), ax: Axes | None = None,
              title: str | None = None) -> Figure:
    """Information-flow diagram of one prompt (Paper A Fig. 3 left).

    x: token positions (tokens labelled at the bottom); y: residual-stream level, ``ℓ`` = input of layer
    ``ℓ`` (0 = embeddings) up to ``L`` = output of the last layer. An edge (layer ``ℓ``, query ``q``,
    key ``k``, weight ``w``) is a segment from ``(k, ℓ)`` to ``(q, ℓ+1)`` with alpha and width
    growing with ``w``. Chain positions (query first, as from ``hop_chain``) and edges along the chain
    (``query = chain[i]``, ``key = chain[i+1]``) are drawn in red. Several heads get different colours.
    """
    missing = {"layer", "head", "query", "key", "weight"} - set(edges.columns)
    if missing:
        raise PosymError(f"edge table lacks column(s) {', '.join(sorted(missing))}")
    T = len(tokens)
    n_layer = int(edges.attrs.get("n_layer", int(edges["layer"].max()) + 1 if len(edges) else 1))
    n_head = int(edges.attrs.get("n_head", int(edges["head"].max()) + 1 if len(edges) else 1))
    fig, ax = fig_ax(ax, (max(6.0, 0.45 * T + 1.5), max(3.0, 0.55 * n_layer + 1.5)))
    pairs = _chain_pairs(chain)

    # background grid of nodes; chain positions in red at every level
    xs, ys = np.meshgrid(np.arange(T), np.arange(n_layer + 1))
    ax.scatter(xs.ravel(), ys.ravel(), s=6, color="#bbbbbb", zorder=1)
    if len(chain):
        cx, cy = np.meshgrid(np.asarray(chain, dtype=float), np.arange(n_layer + 1))
        ax.scatter(cx.ravel(), cy.ravel(), s=14, color=CHAIN_COLOR, zorder=3)

    if len(edges):
        w = edges["weight"].to_numpy(dtype=float)
        k = edges["key"].to_numpy(dtype=float)
        q = edges["query"].to_numpy(dtype=float)
        lay = edges["layer"].to_numpy(dtype=float)
        head = edges["head"].to_numpy(dtype=int)
        on_chain = np.array([(int(a), int(b)) in pairs for a, b in zip(q, k)], dtype=bool)
        segs = np.stack([np.stack([k, lay], 1), np.stack([q, lay + 1], 1)], 1)  # [E, 2, 2]
        base = np.array([to_rgba(HEAD_COLORS[h % len(HEAD_COLORS)] if n_head > 1 else EDGE_COLOR)
                         for h in head])
        base[:, 3] = 0.08 + 0.52 * np.clip(w, 0, 1)
        widths = 0.3 + 2.2 * np.clip(w, 0, 1)
        normal = ~on_chain
        ax.add_collection(LineCollection(segs[normal], colors=base[normal], linewidths=widths[normal], zorder=2))
        if on_chain.any():
            red = np.array([to_rgba(CHAIN_COLOR)] * int(on_chain.sum()))
            red[:, 3] = 0.4 + 0.6 * np.clip(w[on_chain], 0, 1)
            ax.add_collection(LineCollection(segs[on_chain], colors=red, linewidths=widths[on_chain] + 1.0, zorder=4))

    ax.set_xlim(-0.6, T - 0.4)
    ax.set_ylim(-0.4, n_layer + 0.4)
    ax.set_xticks(range(T))
    ax.set_xticklabels([str(t) for t in tokens], fontsize=FLOW_FONT["ticks"])
    chain_set = {int(c) for c in chain}
    for i, lab in enumerate(ax.get_xticklabels()):
        if i in chain_set:
            lab.set_color(CHAIN_COLOR)
            lab.set_fontweight("bold")
    ax.set_yticks(range(n_layer + 1))
    ax.set_yticklabels(["emb"] + [f"L{l}" for l in range(n_layer)], fontsize=FLOW_FONT["ticks"])
    ax.set_ylabel("residual stream after layer", fontsize=FLOW_FONT["label"])
    ax.set_xlabel("position (token); hop chain in red", fontsize=FLOW_FONT["label"])
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title is None:
        attrs = edges.attrs
        if "label" in attrs:
            title = f"{attrs.get('hops', '?')} hops: answer {attrs['label']!r}, predicted {attrs.get('prediction', '?')!r}"
    if title:
        ax.set_title(title, fontsize=FLOW_FONT["title"])
    return fig


def _mode_matrix(table: pd.DataFrame, mode: str, cols: list[str]) -> tuple[np.ndarray, list[str]]:
    sub = table[table["mode"] == mode].sort_values(["layer", "head"])
    multi_head = sub["head"].nunique() > 1
    labels = [f"L{l}H{h}" if multi_head else f"L{l}" for l, h in zip(sub["layer"], sub["head"])]
    return sub[cols].to_numpy(dtype=float), labels


def plot_ablation(table: pd.DataFrame, ax: Axes | Sequence[Axes] | None = None,
                  modes: Sequence[str] | None = None) -> Figure:
    """Heat maps of accuracy with one head ablated (rows: layer, or layer/head) x hop count
    (columns: 1..4 hops and "all"), one panel per ablation mode, values annotated. The baseline row
    (``mode="none"``) of the table, if present, is drawn as the top row "none".

    ``ax``: one Axes for a single mode, or a sequence with one Axes per mode.
    """
    if "mode" not in table.columns:
        raise PosymError("ablation table lacks the 'mode' column")
    hop_cols = [c for c in (f"acc_hop{h}" for h in range(1, 9)) if c in table.columns]
    cols = hop_cols + ["acc"]
    xlabels = [c.replace("acc_hop", "") for c in hop_cols] + ["all"]
    if modes is None:
        modes = [m for m in dict.fromkeys(table["mode"]) if m != "none"]
    modes = list(modes)
    if not modes:
        raise PosymError("ablation table has no ablation rows (only the baseline)")
    if ax is None:
        n_rows = int((table["mode"] == modes[0]).sum()) + 1
        fig, axes = new_figure((3.2 * len(modes) + 0.8, 0.32 * n_rows + 1.6), 1, len(modes), squeeze=False)
        axes = list(axes[0])
    else:
        axes = [ax] if isinstance(ax, Axes) else list(ax)
        if len(axes) != len(modes):
            raise PosymError(f"plot_ablation: {len(modes)} modes need {len(modes)} axes, got {len(axes)}")
        fig = axes[0].figure
    base = table[table["mode"] == "none"]
    im = None
    for a, mode in zip(axes, modes):
        mat, ylabels = _mode_matrix(table, mode, cols)
        if not len(mat):
            raise PosymError(f"ablation table has no rows for mode {mode!r}")
        if len(base):
            mat = np.vstack([base[cols].to_numpy(dtype=float)[:1], mat])
            ylabels = ["none"] + ylabels
        im = a.imshow(mat, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (i, j), v in np.ndenumerate(mat):
            if np.isfinite(v):
                a.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                       color="black" if v > 0.6 else "white")
        a.set_xticks(range(len(cols)))
        a.set_xticklabels(xlabels)
        a.set_yticks(range(len(ylabels)))
        a.set_yticklabels(ylabels, fontsize=8)
        if len(base):
            a.axhline(0.5, color="white", linewidth=2)
        a.set_xlabel("hops")
        a.set_title(f"{mode} ablation", fontsize=10)
    axes[0].set_ylabel("ablated head")
    if im is not None and ax is None:
        fig.colorbar(im, ax=axes, fraction=0.04, pad=0.02, label="accuracy")
    return fig


__all__ = ["plot_flow", "plot_ablation", "save_figure"]
