"""Fig. 2 drawn from hand-made tables: every head is drawn and labelled, panel A from any source."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import QuadMesh

from posym.heads.dynamics import pure_counts, purity_table, trainer_eval_history
from posym.report.figures import NO_ACCURACY_NOTE, close_figure, plot_fig2

N_LAYER, N_HEAD, STEPS = 3, 4, [0, 50, 100, 200]


def _scores() -> pd.DataFrame:
    """3 layers × 4 heads; every head has its own values (s_pos encodes layer and head)."""
    rows = []
    for step in STEPS:
        for layer in range(N_LAYER):
            for head in range(N_HEAD):
                rows.append({"step": step, "layer": layer, "head": head, "tau": 1e-4,
                             "s_pos": (layer * N_HEAD + head) / 20 + step / 10_000, "s_sym": 1 - step / 400,
                             "entropy": 0.99 - head / 100, "n_prompts": 8})
    return pd.DataFrame(rows)


def _metrics() -> pd.DataFrame:
    return pd.DataFrame([{"split": "val", "step": s, "acc": a, "acc_hop1": a, "acc_hop2": a, "acc_hop3": a,
                          "acc_hop4": a} for s, a in zip(STEPS, [0.0, 0.3, 0.7, 1.0])])


def _draw(metrics, **kw):
    scores = _scores()
    counts = pure_counts(purity_table(scores), np.array(STEPS))
    return plot_fig2(metrics, scores, counts, **kw)


def _meshes(fig) -> dict[str, tuple]:
    """gid → (the heat map's values [rows, steps], its axes) of every heat map in the figure."""
    out = {}
    for ax in fig.axes:
        for c in ax.collections:
            if isinstance(c, QuadMesh) and c.get_gid():
                out[c.get_gid()] = (np.asarray(c.get_array()).reshape(-1, len(STEPS)), ax)
    return out


def test_fig2_draws_every_head_of_a_multi_head_model():
    fig = _draw(_metrics())
    meshes = _meshes(fig)
    assert set(meshes) == {"s_pos", "s_sym", "entropy"}
    scores = _scores()
    labels = [f"L{l}H{h}" for l in range(N_LAYER) for h in range(N_HEAD)]
    for col, (values, ax) in meshes.items():
        assert values.shape == (N_LAYER * N_HEAD, len(STEPS))
        assert [t.get_text() for t in ax.get_yticklabels()] == labels
        want = scores.pivot_table(index=["layer", "head"], columns="step", values=col).to_numpy()
        np.testing.assert_allclose(values, want)  # the stored values, not rescaled
    titles = " | ".join(ax.get_title() for ax in fig.axes)
    assert "s_POS" in titles and "s_SYM" in titles and "attention entropy H / ln n" in titles
    close_figure(fig)


def test_fig2_layers_option_keeps_every_head_of_the_chosen_layers():
    fig = _draw(_metrics(), layers=[2])
    values, ax = _meshes(fig)["s_pos"]
    assert values.shape == (N_HEAD, len(STEPS))
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"L2H{h}" for h in range(N_HEAD)]
    close_figure(fig)


def test_fig2_readable_with_many_layers():
    """Quick/paper presets (8–12 layers, 1 head): labels at least 10 pt in a figure ≈ 12 in wide."""
    rows = [{"step": s, "layer": layer, "head": 0, "tau": 1e-4, "s_pos": 0.5, "s_sym": 0.5, "entropy": 0.5}
            for s in STEPS for layer in range(12)]
    scores = pd.DataFrame(rows)
    fig = plot_fig2(_metrics(), scores, pure_counts(purity_table(scores), np.array(STEPS)))
    assert fig.get_figwidth() <= 12.5
    values, ax = _meshes(fig)["s_pos"]
    assert values.shape == (12, len(STEPS))
    assert min(t.get_fontsize() for a in fig.axes for t in a.get_yticklabels() + a.get_xticklabels()) >= 10
    close_figure(fig)


def test_fig2_panel_a_from_trainer_history_or_a_note():
    history = trainer_eval_history([{"step": s, "eval_loss": 3 - a, "eval_accuracy": a}
                                    for s, a in zip(STEPS, [0.0, 0.3, 0.7, 1.0])])
    empty = pd.DataFrame(columns=["split", "step", "acc"])
    fig = _draw(empty, eval_history=history)
    drawn = {ln.get_label(): ln.get_ydata() for ax in fig.axes for ln in ax.get_lines()}
    assert list(drawn["eval_loss"]) == pytest.approx([3.0, 2.7, 2.3, 2.0])
    assert list(drawn["eval_accuracy"]) == pytest.approx([0.0, 0.3, 0.7, 1.0])
    close_figure(fig)
    fig = _draw(empty)
    texts = [" ".join(t.get_text().split()) for ax in fig.axes for t in ax.texts]
    assert any(NO_ACCURACY_NOTE in t for t in texts)
    assert not any(ln.get_label() == "all" for ax in fig.axes for ln in ax.get_lines())  # no empty accuracy axis
    close_figure(fig)


def test_flow_labels_readable_at_page_width():
    """Token, layer and axis labels of Fig. 3 (left) are ≥ 11 pt (≈ 14 px at ~0.8 × in the report)."""
    from posym.report.flow_figures import plot_flow

    tokens = [f"t{i}" for i in range(17)]
    edges = pd.DataFrame({"layer": [0, 7], "head": [0, 0], "query": [16, 9], "key": [9, 3], "weight": [0.9, 0.5]})
    edges.attrs.update(n_layer=8, n_head=1)
    fig = plot_flow(edges, tokens, chain=[16, 9, 3])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 11
    assert ax.xaxis.label.get_fontsize() >= 11 and ax.yaxis.label.get_fontsize() >= 11
    close_figure(fig)


@pytest.mark.parametrize("n_layers", [2, 8, 12])
def test_fig8_and_fig4b_are_drawn_for_the_report_page_width(tmp_path, n_layers):
    """Fig. 8 (one panel per layer) and Fig. 4B are at most the report page's 1,124 px wide at 150 dpi, so
    the page shows them at their own size (the quick preset's 8 layers were 1,800 px, shown at 0.3 ×)."""
    from PIL import Image

    from posym.report.figures import save_figure
    from posym.report.freq_figures import PAGE_WIDTH_IN, plot_freq_use, plot_qk_geometry
    from posym.report.html import CSS

    width, pad = map(int, re.search(r"main\{max-width:(\d+)px;margin:0 auto;padding:\d+px (\d+)px", CSS).groups())
    page_px = width - 2 * pad  # 1,124
    assert PAGE_WIDTH_IN * 150 <= page_px + 1
    ids = np.arange(1, 17)
    use = pd.DataFrame([{"layer": layer, "head": 0, "freq_id": k, "use": 1.0 + (k * (layer + 1)) % 5, "rotary": True}
                        for layer in range(n_layers) for k in ids])
    rng = np.random.default_rng(0)
    pts = pd.DataFrame({"kind": ["key"] * 16 + ["query"] * 4, "value": list(range(16)) + [1, 2, 3, 4],
                        "x": rng.normal(size=20), "y": rng.normal(size=20), "x_pre": rng.normal(size=20),
                        "y_pre": rng.normal(size=20)})
    for name, fig in (("fig8", plot_freq_use(use, title="frequency use")), ("fig4b", plot_qk_geometry(pts))):
        assert fig.get_size_inches()[0] <= PAGE_WIDTH_IN + 1e-9, name
        png = save_figure(fig, tmp_path / name)[0]
        close_figure(fig)
        with Image.open(png) as im:
            assert 0.6 * page_px <= im.size[0] <= page_px, (name, im.size)
