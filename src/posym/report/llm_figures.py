"""Figure of the real-LLM 1-hop protocol (Paper A Table 3 as a plot), drawn from ``llm_table.csv``.

* :func:`plot_llm_lengthgen` — accuracy vs target-window length, one line per task (number vs
  letter), a band of ± one sd over runs; several models (a ``model`` column with more than one value)
  get one line style each; a ``chance`` column (the choice protocol) adds a thin dotted chance line
  per task (drawn once: it depends on the prompts, not the model).
The verb ``posym llm eval`` saves it as ``<out>/figures/llm_lengthgen`` (PNG + PDF).

* :func:`plot_llm_protocols` — one such panel per protocol (generate, choice) of several models
  side by side (``DIR/aggregate/figures/llm_models`` of a reproduction).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from posym.errors import PosymError
from posym.report.figures import fig_ax, new_figure

TASK_COLORS = {"number": "#d95f02", "letter": "#1b9e77"}
_STYLES = ["-", "--", ":", "-."]


def plot_llm_lengthgen(table: pd.DataFrame, ax: Axes | None = None, title: str | None = None,
                       logx: bool = True) -> Figure:
    """Accuracy (mean over runs, ± sd band) vs target-window length for each task (and model)."""
    missing = {"task", "length", "mean"} - set(table.columns)
    if missing:
        raise PosymError(f"LLM table lacks column(s) {sorted(missing)}")
    fig, ax = fig_ax(ax, (4.8, 3.2))
    models = list(dict.fromkeys(table["model"])) if "model" in table else [None]
    chance_drawn: set[str] = set()
    for mi, model in enumerate(models):
        sub = table if model is None else table[table["model"] == model]
        for task in dict.fromkeys(sub["task"]):
            g = sub[sub["task"] == task].sort_values("length")
            x, m = g["length"].to_numpy(float), g["mean"].to_numpy(float)
            sd = g["sd"].fillna(0).to_numpy(float) if "sd" in g else np.zeros_like(m)
            color = TASK_COLORS.get(task)
            label = task if len(models) == 1 else f"{task} · {_short(model)}"
            line, = ax.plot(x, m, marker="o", ms=3, ls=_STYLES[mi % len(_STYLES)], color=color, label=label)
            ax.fill_between(x, np.clip(m - sd, 0, 1), np.clip(m + sd, 0, 1), color=line.get_color(),
                            alpha=0.2, lw=0)
            if "chance" in g and g["chance"].notna().all() and task not in chance_drawn:
                chance_drawn.add(task)  # the chance level depends on the prompts only: one line per task
                ax.plot(x, g["chance"].to_numpy(float), ls=":", lw=0.9, color=line.get_color(),
                        label=f"{task} chance")
    if logx:
        ax.set_xscale("log")
        ticks = sorted(table["length"].unique())
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks], fontsize=7)
        ax.minorticks_off()
    if title is None and len(models) == 1 and models[0] is not None:
        title = _short(models[0])
    ax.set(xlabel="target-window length", ylabel="accuracy", ylim=(-0.02, 1.02),
           title=title or "1-hop prompts: accuracy vs length")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7, loc="best")
    return fig


def plot_llm_protocols(table: pd.DataFrame) -> Figure:
    """One :func:`plot_llm_lengthgen` panel per ``protocol`` of ``table`` (generate first), every model
    in each; the y axes are shared."""
    if "protocol" not in table:
        raise PosymError("LLM table lacks column 'protocol'")
    protocols = sorted(dict.fromkeys(table["protocol"]), key=lambda p: (p != "generate", p))
    fig, axes = new_figure((5.2 * len(protocols), 3.6), 1, len(protocols), sharey=True, squeeze=False)
    for ax, protocol in zip(axes[0], protocols):
        sub = table[table["protocol"] == protocol]
        how = "greedy generation" if protocol == "generate" else "log-likelihood choice, chance dotted"
        plot_llm_lengthgen(sub, ax=ax, title=f"{how} ({sub['model'].nunique() if 'model' in sub else 1} model(s))")
    fig.tight_layout()
    return fig


def _short(model: str) -> str:
    from posym.lengthgen.llm_eval import short_label

    return short_label(model)
