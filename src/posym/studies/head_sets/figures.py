"""The head-set study's figures (docs/head_sets.md), drawn from ``head_sets.csv`` on
:func:`posym.report.figures.new_figure` (no pyplot): per set, accuracy vs the dose k of each direction,
and accuracy vs added length under each per-head intervention on the set — the typed set as a line, its K matched
random controls as a 5–95 % band with their mean, the untouched model dotted. The null and the number of
prompts are printed in each figure's subtitle; legends sit outside the axes."""

from __future__ import annotations

import pandas as pd

from posym.report.figures import new_figure
from posym.studies.head_sets.study import DOSE, NULL, TEMPERATURE, null_text

TYPED, CONTROL, UNTOUCHED, ALL_HEADS = "C0", "grey", "black", "C3"
#: Sets of more heads than this are named by their size and layer span in a title (the list is in ``head_sets.csv``).
TITLE_HEADS = 6


def heads_title(heads: str, limit: int = TITLE_HEADS) -> str:
    """A head list (``L1H0+L2H1``) short enough for a figure title: itself up to ``limit`` heads, else
    ``"22 heads in 14 layers, L1–L22"``."""
    names = [h for h in str(heads).split("+") if h]
    if len(names) <= limit:
        return "+".join(names)
    layers = sorted({int(h[1:].split("H", 1)[0]) for h in names})
    return f"{len(names)} heads in {len(layers)} layers, L{layers[0]}–L{layers[-1]}"


def length_words(window: bool) -> tuple[str, str]:
    """(axis label, title phrase format) of a cell's length: added tokens for a trained posym model, the 1-hop
    prompts' target window for an offline LLM (SPEC §1.5)."""
    return (("target-window size (SPEC §1.5)", "target window {}") if window else
            ("added target-window tokens", "+{} tokens"))


def _null(t: pd.DataFrame) -> str:
    """The null of the table's controls (its ``match`` column; layer-matched when absent)."""
    return null_text(str(t["match"].iloc[0])) if "match" in t.columns and len(t) else NULL


def _subtitle(t: pd.DataFrame) -> str:
    n, k, k_min = int(t["n_prompts"].max()), int(t["n_controls"].max()), int(t["n_controls"].min())
    ks = f"{k_min}–{k}" if k_min != k else f"{k}"  # --match ids: fewer where fewer k-subsets exist
    return f"null: {_null(t)} (K = {ks}, band 5–95 %); n = {n} prompts"


#: A panel's measures: (the set's column, the controls' 5 % and 95 % quantiles and mean, the untouched model's, axis label).
METRICS = {"acc": ("acc", "ctrl_acc_q05", "ctrl_acc_q95", "ctrl_acc_mean", "acc_none", "accuracy"),
           "rank": ("rank", "ctrl_rank_q05", "ctrl_rank_q95", "ctrl_rank_mean", "rank_none",
                    "answer's normalised rank\n(0 = first candidate)")}


def _panel(ax, g: pd.DataFrame, x: str, name: str, metric: str = "acc") -> None:
    col, q05, q95, mean, none, _ = METRICS[metric]
    g = g.sort_values(x)
    one = g[x].nunique() == 1  # a single dose or length: the band as a range bar, the untouched model as a line
    if q05 in g.columns and one:  # tables written before the rank's quantiles existed draw no rank band
        ax.errorbar(g[x], g[mean], yerr=[g[mean] - g[q05], g[q95] - g[mean]], fmt="none", color=CONTROL, capsize=5,
                    lw=2, alpha=0.6, label="controls 5–95 %")
    elif q05 in g.columns:
        ax.fill_between(g[x], g[q05], g[q95], color=CONTROL, alpha=0.25, lw=0, label="controls 5–95 %")
    ax.plot(g[x], g[mean], color=CONTROL, ls="--", marker=".", label="controls mean")
    ax.plot(g[x], g[col], color=TYPED, marker="o", ms=4, label=f"{name} heads")
    if one:
        ax.axhline(float(g[none].iloc[0]), color=UNTOUCHED, ls=":", label="untouched")
    else:
        ax.plot(g[x], g[none], color=UNTOUCHED, ls=":", label="untouched")


def _metrics(rank: bool) -> list[str]:
    return ["acc", "rank"] if rank else ["acc"]


def plot_dose_curves(table: pd.DataFrame, set_name: str, window: bool = False, rank: bool = False):
    """Accuracy vs k (frequency IDs dropped inside the set) per direction, for one set at its smallest
    added length: one panel per direction. ``window``: the lengths are an LLM's target windows (SPEC §1.5);
    ``rank``: a second row of panels with the answer's normalised rank (the reading near chance)."""
    t = table[(table["part"] == DOSE) & (table["set"] == set_name)]
    t = t[t["extra_tokens"] == t["extra_tokens"].min()]
    dirs = list(dict.fromkeys(t["what"]))
    rows = _metrics(rank)
    fig, axes = new_figure((3.4 * max(1, len(dirs)) + 1.6, 0.4 + 2.8 * len(rows)), len(rows), max(1, len(dirs)),
                           squeeze=False, sharey="row")
    for i, metric in enumerate(rows):
        for ax, d in zip(axes[i], dirs):
            _panel(ax, t[t["what"] == d], "k", set_name, metric)
            ax.set_xticks(sorted(set(int(k) for k in t["k"])))
            what = {"low": "k slowest IDs dropped", "high": "k fastest IDs dropped"}.get(d, "k random IDs dropped")
            ax.set(xlabel=f"k ({what})" if i == len(rows) - 1 else "", title=d if i == 0 else "", ylim=(-0.02, 1.02))
        axes[i][0].set_ylabel(METRICS[metric][5])
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    heads = heads_title(t["heads"].iloc[0]) if len(t) else ""
    at = length_words(window)[1].format(int(t["extra_tokens"].min()) if len(t) else 0)
    fig.suptitle(f"{set_name} heads ({heads}): frequency dose curves, {at}\n{_subtitle(t) if len(t) else NULL}", fontsize=9)
    fig.tight_layout()
    return fig


def plot_temperature_curve(table: pd.DataFrame, set_name: str, window: bool = False, rank: bool = False):
    """Accuracy vs added length under each per-head intervention setting (temperature, …) applied to the
    set only (one panel per setting), the same setting on every head beside it; titled by the intervention.
    ``window``: the lengths are an LLM's target windows (SPEC §1.5); ``rank``: a second row with the answer's
    normalised rank."""
    t = table[(table["part"] == TEMPERATURE) & (table["set"] == set_name)]
    settings = list(dict.fromkeys(t["what"]))
    rows = _metrics(rank)
    fig, axes = new_figure((4.2 * max(1, len(settings)) + 1.6, 0.4 + 2.8 * len(rows)), len(rows), max(1, len(settings)),
                           squeeze=False, sharey="row")
    for i, metric in enumerate(rows):
        for ax, s in zip(axes[i], settings):
            g = t[t["what"] == s].sort_values("extra_tokens")
            _panel(ax, g, "extra_tokens", set_name, metric)
            whole = {"acc": "acc_all_heads", "rank": "rank_all_heads"}[metric]
            if whole in g.columns:
                ax.plot(g["extra_tokens"], g[whole], color=ALL_HEADS, ls="-.", label="all heads")
            ax.set(xlabel=length_words(window)[0] if i == len(rows) - 1 else "", title=s if i == 0 else "",
                   ylim=(-0.02, 1.02))
            if g["extra_tokens"].nunique() <= 4:
                ax.set_xticks(sorted(set(int(e) for e in g["extra_tokens"])))
        axes[i][0].set_ylabel(METRICS[metric][5])
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    kinds = ", ".join(dict.fromkeys(s.split(":", 1)[0] for s in settings)) or "intervention"
    heads = f" ({heads_title(t['heads'].iloc[0])})" if len(t) else ""
    fig.suptitle(f"{set_name} heads{heads}: {kinds} on the set only\n{_subtitle(t) if len(t) else NULL}", fontsize=9)
    fig.tight_layout()
    return fig


def _model_lines(ax, long: pd.DataFrame, x: str) -> None:
    """Each model's typed set (solid) and its controls' mean (dashed, same colour); the untouched models dotted."""
    for i, (label, g) in enumerate(long.groupby("label", sort=False)):
        g = g.sort_values(x)
        ax.plot(g[x], g["acc"], color=f"C{i}", marker="o", ms=3.5,
                label=f"{label}: set ({heads_title(g['heads'].iloc[0], limit=3)})")
        ax.plot(g[x], g["ctrl_acc_mean"], color=f"C{i}", ls="--", lw=1, alpha=0.8, label=f"{label}: controls mean")
        ax.plot(g[x], g["acc_none"], color=f"C{i}", ls=":", lw=1, alpha=0.6, label=f"{label}: untouched")


def _combined_subtitle(long: pd.DataFrame, null: str) -> str:
    return (f"null: {null or NULL}\n(each model against its own K ≥ {int(long['n_controls'].min())} controls); "
            f"n = {int(long['n_prompts'].min())} prompts per model")


def plot_combined_doses(long: pd.DataFrame, set_name: str, null: str = "", window: bool = False):
    """Several models' dose curves for one set (``head_sets_combined_models.csv``): accuracy vs k per
    direction at the smallest added length, one colour per model (its set solid, its controls' mean dashed).
    ``window``: the lengths are an LLM's target windows (SPEC §1.5)."""
    t = long[(long["part"] == DOSE) & (long["set"] == set_name)]
    t = t[t["extra_tokens"] == t["extra_tokens"].min()]
    dirs = list(dict.fromkeys(t["what"]))
    fig, axes = new_figure((3.4 * max(1, len(dirs)) + 2.2, 3.3), 1, max(1, len(dirs)), squeeze=False, sharey=True)
    for ax, d in zip(axes[0], dirs):
        _model_lines(ax, t[t["what"] == d], "k")
        ax.set_xticks(sorted(set(int(k) for k in t["k"])))
        what = {"low": "k slowest IDs dropped", "high": "k fastest IDs dropped"}.get(d, "k random IDs dropped")
        ax.set(xlabel=f"k ({what})", title=d, ylim=(-0.02, 1.02))
    axes[0][0].set_ylabel("accuracy")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    n_models = t["label"].nunique()
    task = f"{t['task'].iloc[0]} task, " if len(t) and "task" in t.columns else ""
    at = length_words(window)[1].format(int(t["extra_tokens"].min()) if len(t) else 0)
    fig.suptitle(f"{task}{set_name} heads of {n_models} models: frequency dose curves, {at}\n"
                 f"{_combined_subtitle(t, null) if len(t) else NULL}", fontsize=9)
    fig.tight_layout()
    return fig


def plot_combined_intervention(long: pd.DataFrame, set_name: str, null: str = "", window: bool = False):
    """Several models' accuracy vs added length under each per-head intervention on one set, one colour
    per model (its set solid, its controls' mean dashed, untouched dotted). ``window``: the lengths are an
    LLM's target windows (SPEC §1.5)."""
    t = long[(long["part"] == TEMPERATURE) & (long["set"] == set_name)]
    settings = list(dict.fromkeys(t["what"]))
    fig, axes = new_figure((4.2 * max(1, len(settings)) + 2.2, 3.3), 1, max(1, len(settings)), squeeze=False,
                           sharey=True)
    for ax, s in zip(axes[0], settings):
        _model_lines(ax, t[t["what"] == s], "extra_tokens")
        ax.set(xlabel=length_words(window)[0], title=s, ylim=(-0.02, 1.02))
    axes[0][0].set_ylabel("accuracy")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    kinds = ", ".join(dict.fromkeys(s.split(":", 1)[0] for s in settings)) or "intervention"
    task = f"{t['task'].iloc[0]} task, " if len(t) and "task" in t.columns else ""
    fig.suptitle(f"{task}{set_name} heads of {t['label'].nunique()} models: {kinds} on the set only\n"
                 f"{_combined_subtitle(t, null) if len(t) else NULL}", fontsize=9)
    fig.tight_layout()
    return fig


#: A neutral name of :func:`plot_temperature_curve` (any per-head intervention).
plot_intervention_curve = plot_temperature_curve

__all__ = ["heads_title", "length_words", "plot_combined_doses", "plot_combined_intervention", "plot_dose_curves",
           "plot_intervention_curve", "plot_temperature_curve"]
