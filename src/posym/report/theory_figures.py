"""Figures of the theory part (SPEC §4), drawn from saved tables: each returns a Figure.

* :func:`plot_discrepancy` — Fig. 5A, ``Δ(n)`` vs ``n`` for Index and Retrieval with the Theorem 3.2
  bounds dashed (table of :func:`posym.theory.discrepancy.discrepancy_table`).
* :func:`plot_intervened` — worst-case ``Δ(n)`` and weight on the correct key of both constructions
  under each inference-time intervention (table of :func:`posym.theory.intervened.intervened_table`).
* :func:`plot_restricted` — accuracy vs answer position of frequency-restricted one-layer heads, one
  panel per task (and restriction mode), one line per band (table of
  :func:`posym.theory.restricted.restricted_table`).
"""

from __future__ import annotations

import matplotlib
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from posym.checks import require_columns
from posym.errors import PosymError
from posym.report.figures import fig_ax, new_figure

MECH_COLORS = {"index": "#d95f02", "retrieval": "#1b9e77"}
BAND_COLORS = {"high": "#d95f02", "low": "#1b9e77", "all": "#7570b3"}
BAND_STYLES = {"all": dict(ls=":", marker="s", lw=3.0), "high": dict(ls="-", marker="o", lw=1.5),
               "low": dict(ls="--", marker="^", lw=1.5)}


def _need(table: pd.DataFrame, cols: set[str], what: str) -> None:
    require_columns(table.columns, cols, f"{what} table")
    if table.empty:
        raise PosymError(f"{what} table is empty")


def plot_discrepancy(table: pd.DataFrame, ax: Axes | None = None, log: bool = True) -> Figure:
    """Fig. 5A: exact worst-case discrepancy ``Δ(n)`` (solid) and the Theorem 3.2 bound (dashed)."""
    _need(table, {"mechanism", "n", "delta", "bound"}, "discrepancy")
    fig, ax = fig_ax(ax, (5, 3.4))
    for mech, df in table.groupby("mechanism", sort=False):
        df = df.sort_values("n")
        c = MECH_COLORS.get(str(mech), None)
        label = str(mech).capitalize()
        if "theta" in df and df["theta"].notna().any():
            label += f" (θ={df['theta'].iloc[0]:g})"
        ax.plot(df["n"], df["delta"], color=c, lw=1.5, label=f"{label}: Δ(n)")
        ax.plot(df["n"], df["bound"], color=c, lw=1.2, ls="--", label=f"{str(mech).capitalize()}: bound")
    if log:
        ax.set_yscale("log")
    ax.set(xlabel="input length n", ylabel="discrepancy Δ", title="discrepancy vs length (Thm 3.2)")
    ax.legend(fontsize=7, loc="lower left")
    return fig


def plot_restricted(table: pd.DataFrame, axes=None) -> Figure:
    """Accuracy vs answer position: one panel per task (rows: restriction ``mode`` if present),
    one line per frequency band."""
    _need(table, {"task", "band", "answer_pos", "acc"}, "restricted")
    tasks = list(dict.fromkeys(table["task"]))
    modes = list(dict.fromkeys(table["mode"])) if "mode" in table else [None]
    if axes is None:
        fig, axes = new_figure((4.2 * len(tasks), 3.0 * len(modes)), len(modes), len(tasks), squeeze=False)
    else:
        import numpy as np

        axes = np.asarray(axes).reshape(len(modes), len(tasks))
        fig = axes[0, 0].figure
    for r, mode in enumerate(modes):
        for c, task in enumerate(tasks):
            ax = axes[r, c]
            df = table[table["task"] == task]
            if mode is not None:
                df = df[df["mode"] == mode]
            for band, g in df.groupby("band", sort=False):
                g = g.sort_values("answer_pos")
                style = BAND_STYLES.get(str(band), dict(ls="-", marker="o", lw=1.5))
                ax.plot(g["answer_pos"], g["acc"], ms=4, color=BAND_COLORS.get(str(band)), label=str(band),
                        **style)
            title = f"{task}" + (f" ({mode})" if mode is not None else "")
            ax.set(xlabel="answer position", ylabel="accuracy", ylim=(-0.02, 1.05), title=title)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.legend(handles, labels, title="frequency band", loc="lower center", ncol=len(labels), fontsize=8,
               title_fontsize=8)
    return fig


def plot_trained_discrepancy(table: pd.DataFrame, axes=None) -> Figure:
    """Median ``Δ`` of trained heads vs added tokens: one panel per task, one line per layer (the median
    over the layer's heads of each head's median ``Δ`` over prompts; table of
    :func:`posym.theory.trained.trained_discrepancy`)."""
    import numpy as np

    _need(table, {"task", "extra_tokens", "layer", "head", "delta_median"}, "trained discrepancy")
    tasks = list(dict.fromkeys(table["task"]))
    if axes is None:
        fig, axes = new_figure((4.6 * len(tasks), 3.4), 1, len(tasks), squeeze=False)
        axes = axes[0]
    else:
        axes = np.atleast_1d(axes)
        fig = axes[0].figure
    n_layers = int(table["layer"].max()) + 1
    cmap = matplotlib.colormaps["viridis"]
    for ax, task in zip(axes, tasks):
        df = table[table["task"] == task]
        per_layer = df.groupby(["layer", "extra_tokens"])["delta_median"].median().reset_index()
        for layer, g in per_layer.groupby("layer"):
            ax.plot(g["extra_tokens"], g["delta_median"], marker="o", ms=3, lw=1.2,
                    color=cmap(layer / max(n_layers - 1, 1)), label=f"L{layer}")
        ax.set_xscale("symlog", linthresh=10)
        ax.set_yscale("log")
        ax.set(xlabel="added tokens", ylabel="median Δ of the last query", title=f"{task} task: trained heads")
    axes[-1].legend(fontsize=6, ncol=2, title="layer", title_fontsize=7)
    fig.tight_layout()
    return fig


#: Colour map of each intervention family in :func:`plot_intervened` (shades for its parameters).
FAMILY_CMAPS = {"temperature": "Reds", "ntk": "Blues", "rope-base": "Greys", "interpolate": "Greens",
                "freq-mask": "Purples"}
_DASHES = ["-", "--", "-.", ":"]


def _family_styles(names: list[str]) -> dict[str, dict]:
    """One colour family per intervention name (``none`` black), darker and differently dashed per parameter."""
    styles: dict[str, dict] = {}
    families: dict[str, list[str]] = {}
    for name in names:
        families.setdefault(name.partition(":")[0], []).append(name)
    for fam, members in families.items():
        if fam == "none":
            styles["none"] = dict(color="black", lw=2.2, ls="-", zorder=5)
            continue
        cmap = matplotlib.colormaps[FAMILY_CMAPS.get(fam, "Greys")]
        for i, name in enumerate(members):
            shade = 0.45 + 0.5 * (i + 1) / len(members)
            styles[name] = dict(color=cmap(shade), lw=1.5, ls=_DASHES[i % len(_DASHES)])
    return styles


def short_label(name: str) -> str:
    """An intervention string for a legend: runs of consecutive IDs joined by '+' written ``a..b``
    (``freq-mask:keep=1+2+3+4`` -> ``freq-mask:keep=1..4``)."""
    import re

    def runs(m: re.Match) -> str:
        ids = [int(x) for x in m.group(0).split("+")]
        out, start = [], ids[0]
        for a, b in zip(ids, ids[1:] + [None]):
            if b != a + 1:
                out.append(str(start) if start == a else f"{start}..{a}")
                start = b
        return "+".join(out)

    return re.sub(r"\d+(?:\+\d+){2,}", runs, name)


def plot_intervened(table: pd.DataFrame, axes=None) -> Figure:
    """Worst-case ``Δ(n)`` (top, symlog: negative = a wrong key can win) and worst-case softmax weight on
    the correct key (bottom) vs ``n`` for Index (left) and Retrieval (right), one line per intervention."""
    import numpy as np
    from matplotlib.ticker import FixedLocator, NullLocator

    _need(table, {"intervention", "mechanism", "n", "delta", "weight"}, "theory-under-interventions")
    mechs = [m for m in ("index", "retrieval") if m in set(table["mechanism"])]
    names = list(dict.fromkeys(table["intervention"]))
    styles = _family_styles(names)
    if axes is None:
        fig, axes = new_figure((6.0 * len(mechs), 7.4), 2, len(mechs), squeeze=False, sharex=True)
    else:
        axes = np.asarray(axes).reshape(2, len(mechs))
        fig = axes[0, 0].figure
    nonzero = table["delta"].abs()
    nonzero = nonzero[nonzero > 0]
    linthresh = float(np.clip(nonzero.min(), 1e-12, 1e-3)) if len(nonzero) else 1e-6
    for c, mech in enumerate(mechs):
        df = table[table["mechanism"] == mech]
        first = df.iloc[0]
        for name in names:
            g = df[df["intervention"] == name].sort_values("n")
            axes[0, c].plot(g["n"], g["delta"], label=short_label(name), **styles[name])
            axes[1, c].plot(g["n"], g["weight"], label=short_label(name), **styles[name])
        title = f"{mech.capitalize()} (θ={first['theta']:g}"
        if "freq_id" in df:
            title += f", frequency ID {int(first['freq_id'])}"
        axes[0, c].set_title(title + ")", fontsize=10)
        axes[0, c].axhline(0, color="grey", lw=0.6)
        axes[0, c].set_yscale("symlog", linthresh=linthresh)
        top = int(np.ceil(np.log10(max(float(df["delta"].abs().max()), linthresh * 10))))
        ks = range(top, int(np.floor(np.log10(linthresh))), -2)
        axes[0, c].yaxis.set_major_locator(FixedLocator(sorted([0.0] + [sg * 10.0**k for k in ks for sg in (1, -1)])))
        axes[0, c].yaxis.set_minor_locator(NullLocator())
        axes[0, c].set_ylabel("worst-case margin Δ(n) (symlog)")
        beta = f" (β={first['beta']:.3g})" if "beta" in df else ""
        axes[1, c].set_ylabel(f"worst-case weight on correct key{beta}", fontsize=9)
        axes[1, c].set_ylim(-0.02, 1.02)
        axes[1, c].set_xlabel("input length n")
        for r in range(2):
            axes[r, c].set_xscale("log")
            axes[r, c].grid(alpha=0.3, which="major")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle("Constructions under inference-time interventions: worst case over valid inputs "
                 "(β: each construction's Lemma F.1 rule at the training length)", fontsize=11)
    fig.tight_layout(rect=(0, 0.035 * (1 + (len(labels) - 1) // 4), 1, 0.97))
    return fig


__all__ = ["plot_discrepancy", "plot_intervened", "plot_restricted", "plot_trained_discrepancy", "short_label"]
