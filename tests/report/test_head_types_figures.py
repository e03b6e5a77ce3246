"""The (s_POS, s_SYM) plane coloured by classic head type."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.report.figures import save_figure
from posym.report.head_types_figures import TYPE_COLOURS, head_type_caption, plot_head_type_plane


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
    assert labels == ["none (8)", "sink (first token) (8)", "duplicate-token (8)", "induction (8)",
                      "previous-token (8)", "hollow: too little swap mass (8)"]
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
