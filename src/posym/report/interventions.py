"""The interventions study (docs/interventions.md): which inference-time change to attention or RoPE
lifts which task's length generalization, and which heads stay pure under it.

Compute-and-draw helpers over saved tables: the study's default grid, the summary table
(intervention × task → largest added length with accuracy ≥ 0.9, accuracy at +0 / +100 / +1,000 /
+5,000, pure heads on lengthened inputs, the theory's prediction), the rule that picks each family's
best setting, and the figures (Fig. 5B per intervention family, the head readout).
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from posym.heads.dynamics import classify
from posym.lengthgen.trained import largest_length_above, summarize_lengthgen
from posym.runs.tables import short_intervention

#: Accuracy at +0 an intervention must keep to count as a rescue (the issue's cost bound).
MIN_ACC_AT_ZERO = 0.99
#: The added lengths the summary reports accuracy at.
REPORT_LENGTHS: tuple[int, ...] = (0, 100, 1000, 5000)
#: The added lengths of the cheap parameter-search grid (Paper A's grid is the full one).
SEARCH_GRID: tuple[int, ...] = (0, 10, 20, 30, 40, 60, 100, 200, 300, 500, 1000)
#: Added lengths of the head readout.
HEAD_LENGTHS: tuple[int, ...] = (0, 100, 1000)
GAMMA = 0.1  # purity threshold (SPEC §3)

#: The prediction written before the study measured anything (docs/interventions.md, "Prediction"),
#: per intervention family and task: what the theory (Δ(n) of the Index and Retrieval constructions
#: under the intervention) says the family does to the task's reach.
PREDICTION: dict[tuple[str, str], str] = {
    ("temperature", "number"): "small lift +30..+100 at most; β = 2 may cost at +0 (early queries flipped)",
    ("temperature", "letter"): "lifts +100..+300 (dilution), not past the slow angle's crossing; reach ≈ +300",
    ("ntk", "number"): "costs at +0: the Index heads' stored offsets are detuned; no rescue",
    ("ntk", "letter"): "reach grows ≈ 1/r (κ = 8: ≈ +500), little cost at +0",
    ("interpolate", "number"): "fixed: breaks at +0; dynamic: exact at +0, breaks beyond",
    ("interpolate", "letter"): "dynamic: the only candidate for ≥ +1,000; fixed: a cost at +0",
    ("freq-mask", "number"): "−25 %: no change; −50/75 %: removes ID ≈ 38, costs at +0",
    ("freq-mask", "letter"): "−25 %: no change; −50/75 %: removes the slow IDs, collapses at +0",
    ("freq-mask@index", "number"): "as freq-mask: the Index layers use the removed IDs",
    ("freq-mask@index", "letter"): "no Index layers: not measured",
}


def family(intervention: str) -> str:
    """The family of a canonical string: ``none``, ``temperature``, ``ntk``, ``rope-base``,
    ``interpolate``, ``freq-mask`` (all layers) or ``freq-mask@index`` (only some layers)."""
    name, _, rest = intervention.partition(":")
    if name == "freq-mask" and "layers=" in rest:
        return "freq-mask@index"
    return name


#: The display form of a canonical string (``freq-mask:keep=1+2+…+48`` → ``freq-mask:keep=1–48``).
short = short_intervention


def drop_lowest(n_pairs: int, fraction: float) -> list[int]:
    """The frequency IDs kept when the lowest (slowest) ``fraction`` of ``n_pairs`` is dropped: 1..k,
    k = n_pairs − round(fraction·n_pairs) (ID 1 = fastest, the numbering of Paper B)."""
    k = n_pairs - int(round(fraction * n_pairs))
    return list(range(1, max(k, 0) + 1))


def study_grid(n_pairs: int, index_layers: Sequence[int] = ()) -> list[str]:
    """The study's default interventions (canonical strings, ``none`` first): temperature β ∈ {0.5, 1,
    2} (log form floored at 1, n_train = 17); NTK κ ∈ {2, 4, 8}; interpolation dynamic (n_train = 17) and fixed
    factors 2, 4; frequency masks dropping the lowest 25 / 50 / 75 % of the ``n_pairs`` IDs in every
    layer and, when ``index_layers`` is given, only there."""
    grid = ["none"] + [f"temperature:beta={b},n_train=17,floor=1" for b in ("0.5", "1", "2")]
    grid += [f"ntk:kappa={k}" for k in (2, 4, 8)]
    grid += ["interpolate:n_train=17", "interpolate:factor=2", "interpolate:factor=4"]
    for frac in (0.25, 0.5, 0.75):
        keep = "+".join(str(i) for i in drop_lowest(n_pairs, frac)) or "none"  # none kept: freq-mask:keep=none
        grid.append(f"freq-mask:keep={keep}")
        if index_layers:
            grid.append(f"freq-mask:keep={keep},layers=" + "+".join(str(l) for l in sorted(index_layers)))
    return grid


def model_reach(lengthgen: pd.DataFrame) -> pd.DataFrame:
    """Per (task, model, intervention): the largest added length with accuracy ≥ 0.9, the accuracy at
    each of :data:`REPORT_LENGTHS` (NaN where not measured) and the mean accuracy over the grid.
    ``lengthgen``: rows of ``posym lengthgen`` tables with a ``model`` column."""
    rows = []
    for (task, model, interv), g in lengthgen.groupby(["task", "model", "intervention"], sort=False):
        s = summarize_lengthgen(g.drop(columns=["intervention"]))
        row = {"task": task, "model": model, "intervention": interv, "reach": largest_length_above(s),
               "acc_grid_mean": float(s["acc_mean"].mean()), "grid_max": int(s["extra_tokens"].max())}
        at = dict(zip(s["extra_tokens"].astype(int), s["acc_mean"]))
        for e in REPORT_LENGTHS:
            row[f"acc_{e}"] = at.get(e, math.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def pure_heads(heads: pd.DataFrame, gamma: float = GAMMA) -> pd.DataFrame:
    """Per (task, model, intervention, extra_tokens): the number of pure positional and pure symbolic
    heads (SPEC §3 rule at ``gamma``) of a head-readout table (columns s_pos, s_sym per head)."""
    rows = []
    for key, g in heads.groupby(["task", "model", "intervention", "extra_tokens"], sort=False):
        kinds = classify(g["s_pos"].to_numpy(), g["s_sym"].to_numpy(), gamma)
        rows.append(dict(zip(["task", "model", "intervention", "extra_tokens"], key),
                         positional=int((kinds == "positional").sum()), symbolic=int((kinds == "symbolic").sum())))
    return pd.DataFrame(rows)


def _mean_sd(x: pd.Series) -> tuple[float, float]:
    x = x.dropna().astype(float)
    if x.empty:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else 0.0


def study_summary(lengthgen: pd.DataFrame, heads: pd.DataFrame | None = None) -> pd.DataFrame:
    """The study table: one row per (task, intervention) with the number of models, the reach (mean,
    sd; a model that never reaches 0.9 at +0 counts as −1), accuracy at each report length (mean,
    sd), the mean accuracy over the grid, the pure heads at each head-readout length (mean over
    models, "positional/symbolic") and the prediction (:data:`PREDICTION`)."""
    per = model_reach(lengthgen)
    pure = pure_heads(heads) if heads is not None and len(heads) else None
    rows = []
    for (task, interv), g in per.groupby(["task", "intervention"], sort=False):
        reach = g["reach"].map(lambda r: -1.0 if r is None or (isinstance(r, float) and math.isnan(r)) else float(r))
        m, sd = _mean_sd(reach)
        row = {"task": task, "intervention": interv, "family": family(interv), "n_models": len(g),
               "reach_mean": m, "reach_sd": sd, "reach_each": ",".join(str(int(r)) for r in reach)}
        for e in REPORT_LENGTHS:
            row[f"acc_{e}_mean"], row[f"acc_{e}_sd"] = _mean_sd(g[f"acc_{e}"])
        row["acc_grid_mean"] = float(g["acc_grid_mean"].mean())
        row["grid_max"] = int(g["grid_max"].min())
        if pure is not None:
            for e in HEAD_LENGTHS:
                p = pure[(pure["task"] == task) & (pure["intervention"] == interv) & (pure["extra_tokens"] == e)]
                row[f"pure_{e}"] = (f"{p['positional'].mean():.1f}/{p['symbolic'].mean():.1f}" if len(p) else "—")
        row["prediction"] = "—" if interv == "none" else PREDICTION.get((family(interv), task), "")
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    order = {"number": 0, "letter": 1}
    return out.sort_values("task", key=lambda t: t.map(lambda x: order.get(x, 2)), kind="stable").reset_index(drop=True)


def best_settings(summary: pd.DataFrame, min_acc0: float = MIN_ACC_AT_ZERO) -> dict[tuple[str, str], str]:
    """Each (task, family)'s best setting: the largest mean reach among settings whose mean accuracy
    at +0 is ≥ ``min_acc0``, ties broken by the mean accuracy over the grid; a family none of whose
    settings keeps +0 gives its setting with the highest mean accuracy over the grid (so its cost is
    measured on the full grid too)."""
    out: dict[tuple[str, str], str] = {}
    for (task, fam), g in summary[summary["family"] != "none"].groupby(["task", "family"], sort=False):
        ok = g[g["acc_0_mean"] >= min_acc0]
        pick = (ok.sort_values(["reach_mean", "acc_grid_mean"], ascending=False) if len(ok)
                else g.sort_values("acc_grid_mean", ascending=False))
        out[(task, fam)] = str(pick.iloc[0]["intervention"])
    return out


def _fmt(m: float, sd: float, digits: int = 2) -> str:
    if m is None or (isinstance(m, float) and math.isnan(m)):
        return "—"
    return f"{m:.{digits}f} ± {sd:.{digits}f}" if sd and not math.isnan(sd) else f"{m:.{digits}f}"


def summary_rows(summary: pd.DataFrame, prediction: bool = True) -> tuple[list[str], list[list[str]]]:
    """The study table as text cells (header, rows) for Markdown and HTML (``prediction``: with the
    prediction column; the HTML page shows the predictions in a table of their own)."""
    pure_cols = [e for e in HEAD_LENGTHS if f"pure_{e}" in summary]
    header = ["task", "intervention", "models", "reach ≥ 0.9", *[f"acc +{e:,}" for e in REPORT_LENGTHS],
              *[f"pure pos/sym +{e:,}" for e in pure_cols], *(["prediction"] if prediction else [])]
    rows = []
    for _, r in summary.iterrows():
        reach = "never" if r["reach_mean"] < 0 and r["reach_sd"] == 0 else (
            f"+{r['reach_mean']:.0f}" + (f" ± {r['reach_sd']:.0f}" if r["n_models"] > 1 else "")
            + (f" ({r['reach_each']})" if r["n_models"] > 1 else ""))
        if r["reach_mean"] >= r["grid_max"]:
            reach += " (grid end)"
        rows.append([r["task"], short(r["intervention"]), str(r["n_models"]), reach,
                     *[_fmt(r[f"acc_{e}_mean"], r[f"acc_{e}_sd"]) for e in REPORT_LENGTHS],
                     *[str(r[f"pure_{e}"]) for e in pure_cols], *([str(r["prediction"])] if prediction else [])])
    return header, rows


def prediction_rows(tasks: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """:data:`PREDICTION` as text cells (family, then one column per task)."""
    fams = list(dict.fromkeys(f for f, _ in PREDICTION))
    return ["family", *tasks], [[f, *[PREDICTION.get((f, t), "") for t in tasks]] for f in fams]


def summary_markdown(summary: pd.DataFrame) -> str:
    """The study table as a Markdown table."""
    header, rows = summary_rows(summary)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


FAMILY_ORDER: tuple[str, ...] = ("temperature", "ntk", "rope-base", "interpolate", "freq-mask", "freq-mask@index")


def plot_intervention_curves(lengthgen: pd.DataFrame, task: str, paper: Mapping[int, float] | None = None):
    """Fig. 5B of ``task`` under each intervention: one panel per family, every setting of the family
    as a curve (mean over models and data seeds; band: sd over models) beside the untouched model
    (black) and Paper A's points (circles). x: added target-window tokens (symlog), y: accuracy."""
    import matplotlib.pyplot as plt

    t = lengthgen[lengthgen["task"] == task]
    fams = [f for f in FAMILY_ORDER if any(family(i) == f for i in t["intervention"].unique())]
    ncol = min(3, max(1, len(fams)))
    nrow = max(1, math.ceil(len(fams) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.2 * nrow), squeeze=False, sharey=True)

    def curve(g: pd.DataFrame) -> pd.DataFrame:
        per_model = [summarize_lengthgen(m.drop(columns="intervention"))[["extra_tokens", "acc_mean"]]
                     for _, m in g.groupby("model")]
        allm = pd.concat(per_model)
        return allm.groupby("extra_tokens")["acc_mean"].agg(["mean", "std"]).fillna(0.0).reset_index()

    base = t[t["intervention"] == "none"]
    base_curve = curve(base) if len(base) else None
    for ax, fam in zip(axes.flat, fams):
        if base_curve is not None:
            ax.plot(base_curve["extra_tokens"], base_curve["mean"], color="black", lw=1.6, label="none")
        settings = [i for i in t["intervention"].unique() if family(i) == fam]
        colors = plt.cm.viridis(np.linspace(0.05, 0.85, max(1, len(settings))))
        for c, interv in zip(colors, settings):
            cv = curve(t[t["intervention"] == interv])
            label = short(interv).split(":", 1)[1] if ":" in interv else interv
            if len(label) > 34:
                label = label[:31] + "…"
            ax.plot(cv["extra_tokens"], cv["mean"], color=c, lw=1.2, label=label)
            if (cv["std"] > 0).any():
                ax.fill_between(cv["extra_tokens"], cv["mean"] - cv["std"], cv["mean"] + cv["std"], color=c,
                                alpha=0.15, lw=0)
        if paper:
            xs, ys = zip(*sorted(paper.items()))
            ax.plot(xs, ys, ls="none", marker="o", mfc="none", color="grey", label="Paper A")
        ax.axhline(0.9, color="grey", lw=0.5, ls=":")
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlim(left=0)
        ax.set(title=f"{task} task · {fam}", xlabel="added target-window tokens", ylim=(-0.02, 1.02))
        ax.legend(fontsize=6.5, loc="lower left")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (mean over models)")
    for ax in list(axes.flat)[len(fams):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_head_readout(heads: pd.DataFrame, task: str):
    """The heads under each intervention on lengthened inputs (``task``): left, mean s_POS of the heads
    that are pure positional on the untouched model at +0 (the Index heads); right, mean s_SYM of the
    heads pure symbolic there; one line per intervention (mean over models), x: added tokens."""
    import matplotlib.pyplot as plt

    t = heads[heads["task"] == task]
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.4), sharex=True)
    base = t[(t["intervention"] == "none") & (t["extra_tokens"] == 0)]
    kinds = pd.Series(classify(base["s_pos"].to_numpy(), base["s_sym"].to_numpy(), GAMMA),
                      index=list(zip(base["model"], base["layer"], base["head"])))
    groups = [("positional", "s_pos", "s_POS of the Index (pure positional) heads"),
              ("symbolic", "s_sym", "s_SYM of the pure symbolic heads")]
    intervs = list(t["intervention"].unique())
    colors = dict(zip(intervs, plt.cm.tab20(np.linspace(0, 1, max(1, len(intervs))))))
    for ax, (kind, col, title) in zip(axes, groups):
        chosen = set(kinds[kinds == kind].index)
        for interv in intervs:
            g = t[t["intervention"] == interv]
            g = g[[k in chosen for k in zip(g["model"], g["layer"], g["head"])]]
            if g.empty:
                continue
            m = g.groupby("extra_tokens")[col].mean()
            ax.plot(m.index, m.to_numpy(), marker="o", ms=3, lw=1.6 if interv == "none" else 1.0,
                    color="black" if interv == "none" else colors[interv], label=short(interv))
        if not chosen:
            ax.text(0.5, 0.5, f"no {kind} head at +0", ha="center", va="center", transform=ax.transAxes)
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlim(left=0)
        ax.set(title=f"{task} task: {title}", xlabel="added target-window tokens", ylim=(-1.02, 1.02))
    axes[0].set_ylabel("score (mean over heads and models)")
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:
        handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return fig


def index_layers(heads_at_zero: pd.DataFrame, gamma: float = GAMMA) -> list[int]:
    """The layers holding a pure positional head (SPEC §3 rule) in a head table of one model at +0."""
    kinds = classify(heads_at_zero["s_pos"].to_numpy(), heads_at_zero["s_sym"].to_numpy(), gamma)
    return sorted({int(l) for l, k in zip(heads_at_zero["layer"], kinds) if k == "positional"})


#: ``layers=index`` in a study setting: the model's own Index layers (:func:`index_layers`), so one
#: setting means the same thing on every seed although their Index layers differ.
INDEX_LAYERS = "index"


def _join(layers: Sequence[int]) -> str:
    return "+".join(str(int(l)) for l in sorted(layers))


def for_model(setting: str, layers: Sequence[int]) -> str | None:
    """The canonical string ``setting`` means on a model whose Index layers are ``layers``:
    ``layers=index`` replaced by them; None when the setting needs Index layers and the model has none."""
    key = f"layers={INDEX_LAYERS}"
    if key not in setting:
        return setting
    return setting.replace(key, f"layers={_join(layers)}") if layers else None


def as_setting(intervention: str, layers: Sequence[int]) -> str:
    """Inverse of :func:`for_model`: a model's canonical string with ``layers=`` equal to its Index
    layers written ``layers=index`` (any other string unchanged)."""
    if not layers:
        return intervention
    name, colon, rest = intervention.partition(":")
    items = [f"layers={INDEX_LAYERS}" if item == f"layers={_join(layers)}" else item for item in rest.split(",")]
    return f"{name}{colon}{','.join(items)}" if colon else intervention


def study_settings(lengthgen: pd.DataFrame, heads: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The collected tables with each model's interventions written as study settings
    (:func:`as_setting`, the model's Index layers read from its untouched head readout at +0), so a mask
    of each seed's own Index layers is one row of the study table. A model without that readout keeps
    its strings. Both tables need a ``model`` column."""
    if heads is None or not len(heads):
        return lengthgen, heads
    base = heads[(heads["intervention"] == "none") & (heads["extra_tokens"] == 0)]
    layers = {m: index_layers(g) for m, g in base.groupby("model")}

    def rewrite(t: pd.DataFrame) -> pd.DataFrame:
        t = t.copy()
        t["intervention"] = [as_setting(i, layers.get(m, [])) for m, i in zip(t["model"], t["intervention"])]
        return t

    return rewrite(lengthgen), rewrite(heads)


def settings_display(record: Mapping) -> dict:
    """The study page's settings table (setting -> value) from ``interventions.json``: the record of
    every call (``{"calls": [...]}``; an older record, one call's settings, counts as one call). When
    every call used the same settings (models aside) they are shown once with the models; otherwise
    one row per model with the settings of each call that measured it, and a note that they differ."""
    calls = list(record.get("calls", [])) if "calls" in record else [dict(record)]
    per_model: dict[str, list[dict]] = {}
    for c in calls:
        rest = {k: v for k, v in c.items() if k != "runs"}
        for label, run in (c.get("runs") or {"(models not recorded)": None}).items():
            entry = {**({"run": run} if run is not None else {}), **rest}
            if entry not in per_model.setdefault(label, []):
                per_model[label].append(entry)
    distinct = {repr(sorted((k, v) for k, v in e.items() if k != "run")) for es in per_model.values() for e in es}
    if len(distinct) <= 1:
        models = {label: es[0].get("run") for label, es in per_model.items()}
        first = next((e for es in per_model.values() for e in es), {})
        return {"models": models, **{k: v for k, v in first.items() if k != "run"}}
    shown = {label: es[0] if len(es) == 1 else es for label, es in per_model.items()}
    return {"note": f"the models were measured with different settings ({len(calls)} calls); one row per model",
            **shown}


def check_grid_names(names: Iterable[str]) -> list[str]:
    """The list with duplicates removed, order kept."""
    return list(dict.fromkeys(names))


__all__ = ["short", "prediction_rows", "MIN_ACC_AT_ZERO", "REPORT_LENGTHS", "SEARCH_GRID", "HEAD_LENGTHS", "PREDICTION", "family", "drop_lowest",
           "study_grid", "model_reach", "pure_heads", "study_summary", "best_settings", "summary_rows",
           "summary_markdown", "plot_intervention_curves", "plot_head_readout", "index_layers", "check_grid_names",
           "INDEX_LAYERS", "for_model", "as_setting", "study_settings", "settings_display"]
