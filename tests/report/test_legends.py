"""The legends of the Fig. 5B figures (SPEC §5; issue 38) sit off the data: ``posym lengthgen``'s
``lengthgen_fig5b``, the interventions study's curves and the encodings / sensitivity variant curves,
each drawn from a small made-up table, with no line point or marker inside a legend box."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from posym.report.figures import plot_lengthgen
from posym.report.paper import LENGTHGEN
from posym.studies._figures import plot_variant_curves
from posym.studies.intervention_study.figures import plot_intervention_curves

GRID = [0, 10, 20, 30, 50, 100, 200, 500, 1000, 2000, 5000]


def legend_overlaps_data(fig: Figure, samples: int = 25) -> bool:
    """Draw ``fig`` and say whether a point of a line or marker of any of its axes (and, for drawn
    lines, a point along each segment between two of them: ``samples`` per segment) falls inside the
    window extent of a legend (an axes' or the figure's), in display coordinates."""
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)]
    boxes = [leg.get_window_extent(renderer) for leg in legends]
    assert boxes, "the figure has no legend"
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for line in ax.get_lines():
            xy = line.get_transform().transform(np.asarray(line.get_xydata(), float))
            xy = xy[np.isfinite(xy).all(axis=1)]
            if line.get_linestyle() not in ("None", "none", "", " ") and len(xy) > 1:
                t = np.linspace(0, 1, samples)[:, None, None]
                xy = (xy[:-1] * (1 - t) + xy[1:] * t).reshape(-1, 2)
            for box in boxes:
                if box.contains_points(xy).any() if hasattr(box, "contains_points") else any(
                        box.contains(x, y) for x, y in xy):
                    return True
    return False


def _curve(acc_at) -> pd.DataFrame:
    acc = np.array([acc_at(e) for e in GRID])
    return pd.DataFrame({"extra_tokens": GRID, "acc_mean": acc, "acc_sd": 0.02, "n_seeds": 3,
                         **{f"acc_hop{h}_mean": acc for h in range(1, 5)}})


def test_the_helper_sees_a_legend_on_the_data():
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    ax.plot([0, 1, 2], [0.1, 0.1, 0.1], label="low line")
    ax.set_ylim(0, 1)
    ax.legend(loc="lower left")
    assert legend_overlaps_data(fig)
    ax.legend(loc="upper right")
    assert not legend_overlaps_data(fig)


def test_lengthgen_fig5b_legend_is_off_the_curves():
    # the letter curve falls through the lower left corner where the legend used to sit
    curves = {"number": _curve(lambda e: 1.0 if e <= 30 else 0.05), "letter": _curve(lambda e: max(0.0, 1 - e / 400))}
    assert not legend_overlaps_data(plot_lengthgen(curves, paper=LENGTHGEN))


def _lengthgen_rows(task: str) -> pd.DataFrame:
    rows = []
    for model in ("m0", "m1"):
        for interv, scale in (("none", 60), ("ntk:kappa=2", 300), ("ntk:kappa=8", 900), ("temperature:beta=1", 150),
                              ("interpolate:n_train=17", 3000), ("freq-mask:keep=1+2+3", 20)):
            for e in GRID:
                rows.append({"task": task, "model": model, "intervention": interv, "extra_tokens": e, "seed": 0,
                             "acc": float(np.exp(-e / scale))})
    return pd.DataFrame(rows)


def test_intervention_curves_legends_are_off_the_curves():
    for task in ("number", "letter"):
        assert not legend_overlaps_data(plot_intervention_curves(_lengthgen_rows(task), task, LENGTHGEN[task]))


def test_variant_curves_legend_is_off_the_curves():
    parts = []
    for task in ("number", "letter"):
        for variant, scale in (("rope", 50), ("nope", 10), ("p-rope:0.75", 400), ("rope-base:20000", 2000)):
            c = _curve(lambda e, s=scale: float(np.exp(-e / s)))
            parts.append(c.assign(task=task, variant=variant))
    assert not legend_overlaps_data(plot_variant_curves(pd.concat(parts, ignore_index=True)))
