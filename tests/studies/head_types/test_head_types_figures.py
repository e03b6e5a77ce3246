"""The (s_POS, s_SYM) plane coloured by classic head type."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.legend
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.report.figures import save_figure
from posym.studies.head_types.figures import TYPE_COLOURS, head_type_caption, plot_head_type_plane, pure_legend_labels
from posym.studies.head_types.panels import plot_head_type_planes


def _join(n=40, seed=0):
    rng = np.random.default_rng(seed)
    kinds = np.array(["previous_token", "induction", "duplicate_token", "sink", "none"])[np.arange(n) % 5]
    return pd.DataFrame({"layer": np.arange(n) // 4, "head": np.arange(n) % 4, "s_pos": rng.random(n),
                         "s_sym": rng.random(n), "classic_type": kinds,
                         "posym_type": np.where(kinds == "sink", "uninformative", "mixed")})


def test_plane_legend_title_and_colours(tmp_path):
    j = _join()
    fig = plot_head_type_plane(j, model="SmolLM2-135M", prompts="32 random repeated sequences", tau=1e-4,
                               exclude="bos")
    ax = fig.axes[0]
    title = ax.get_title()
    assert "SmolLM2-135M" in title and "random repeated" in title and "τ = 0.0001" in title and "bos" in title
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:6] == ["none (8)", "sink (first token) (8)", "duplicate-token (8)", "induction (8)",
                          "previous-token (8)", "hollow: too little swap mass (8)"]
    assert labels[6:] == [" ", "pure heads\n(share of prompts pure)", "positional: 0", "symbolic: 0"]
    # every head drawn once; sinks hollow (uninformative), the others filled in their type's colour
    offsets = np.concatenate([c.get_offsets() for c in ax.collections])
    assert len(offsets) == len(j)
    sink = [c for c in ax.collections if np.allclose(c.get_edgecolor()[0][:3], matplotlib.colors.to_rgb(TYPE_COLOURS["sink"]))]
    assert len(sink) == 1 and len(sink[0].get_facecolor()) == 0  # hollow
    ind = [c for c in ax.collections if np.allclose(c.get_edgecolor()[0][:3], matplotlib.colors.to_rgb(TYPE_COLOURS["induction"]))]
    assert len(ind) == 1 and np.allclose(ind[0].get_facecolor()[0][:3], matplotlib.colors.to_rgb(TYPE_COLOURS["induction"]))
    paths = save_figure(fig, tmp_path / "plane")
    assert all(p.stat().st_size > 1000 for p in paths)
    plt.close(fig)


def test_explicit_title_axis_and_errors():
    fig, ax = plt.subplots()
    assert plot_head_type_plane(_join().drop(columns="posym_type"), ax=ax, title="mine") is fig
    assert ax.get_title() == "mine"
    plt.close(fig)
    assert head_type_caption("m", "binding", 1e-4, "") == "m · prompts: binding · τ = 0.0001 · swaps exclude: none"
    with pytest.raises(PosymError, match="lacks column"):
        plot_head_type_plane(_join().drop(columns="classic_type"))
    with pytest.raises(PosymError, match="empty"):
        plot_head_type_plane(_join().iloc[:0])
    with pytest.raises(PosymError, match="unknown classic type"):
        plot_head_type_plane(_join().assign(classic_type="odd"))


def _flagged_join():
    """_join with the sink flag on 2 induction heads and 8 sinks, and purity columns: 4 heads typed
    positional (purity 0.95), 3 symbolic (purity 1.0), 2 pure on the mean only."""
    j = _join()
    j["is_sink"] = j["classic_type"].eq("sink")
    j.loc[j.index[j["classic_type"] == "induction"][:2], "is_sink"] = True
    j["mean_type"] = "mixed"
    j["posym_type"] = np.where(j["classic_type"] == "sink", "uninformative", "mixed")
    j["purity_fraction"] = np.nan
    j.loc[:3, ["mean_type", "posym_type", "purity_fraction"]] = ["positional", "positional", 0.95]
    j.loc[5:7, ["mean_type", "posym_type", "purity_fraction"]] = ["symbolic", "symbolic", 1.0]
    j.loc[10:11, ["mean_type", "posym_type", "purity_fraction"]] = ["positional", "mixed", 0.5]
    return j


def test_sink_ring_and_pure_counts_with_their_purity(tmp_path):
    """Issue 34: a sink-flagged head of a pattern type is ringed in the sink colour; the second legend
    gives the pure counts beside their per-prompt purity and the heads pure on the mean only."""
    j = _flagged_join()
    fig = plot_head_type_plane(j, title="t", pure_fraction=0.9)
    ax = fig.axes[0]
    sink_rgb = matplotlib.colors.to_rgb(TYPE_COLOURS["sink"])
    rings = [c for c in ax.collections if c.get_sizes()[0] == 150]
    assert len(rings) == 1 and len(rings[0].get_offsets()) == 2
    assert np.allclose(rings[0].get_edgecolor()[0][:3], sink_rgb) and len(rings[0].get_facecolor()) == 0
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "ring: also a sink (2)" in labels
    legends = [a for a in ax.get_children() if isinstance(a, matplotlib.legend.Legend)]
    assert labels[-4:] == ["pure heads\n(share of prompts pure)", "positional: 4 (95%)", "symbolic: 3 (100%)",
                           "pure on the mean only: 2\n(< 90% of prompts; typed mixed)"]
    assert pure_legend_labels(j.drop(columns=["mean_type", "purity_fraction"])) == ["positional: 4", "symbolic: 3"]
    # the legend right of the axes, off the data
    fig.canvas.draw()
    box = ax.get_window_extent()
    assert all(lg.get_window_extent().x0 > box.x1 for lg in legends)
    save_figure(fig, tmp_path / "plane")
    plt.close(fig)


def test_panels_carry_the_threshold(tmp_path):
    t = pd.concat([_flagged_join().assign(prompt_set=s) for s in ("repeated", "number")])
    fig = plot_head_type_planes(t, title="m", ncols=2, pure_fraction=0.8)
    texts = [t.get_text() for ax in fig.axes for a in ax.get_children() if isinstance(a, matplotlib.legend.Legend)
             for t in a.get_texts()]
    assert sum("< 80% of prompts" in x for x in texts) == 2 and len(fig.axes) == 2
    save_figure(fig, tmp_path / "panels")
    plt.close(fig)
