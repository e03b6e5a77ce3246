"""The interventions study's compute over saved tables (docs/interventions.md): the default grid,
the summary table (intervention × task → largest added length with accuracy ≥ 0.9, accuracy at +0 /
+100 / +1,000 / +5,000, pure heads on lengthened inputs, the theory's prediction), the rule that picks
each family's best setting and the ``layers=index`` settings (each model's own Index layers).
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

import pandas as pd

from posym.constants import GAMMA, REACH_THRESHOLD, TASKS
from posym.heads.dynamics import classify
from posym.lengthgen.trained import largest_length_above, summarize_lengthgen
from posym.report.format import fmt_ms, mean_sd
from posym.runs.tables import short_intervention
from posym.studies.intervention_study.study import (HEAD_LENGTHS, INDEX_LAYERS, MIN_ACC_AT_ZERO, PREDICTION,
                                                    REPORT_LENGTHS)


def family(intervention: str) -> str:
    """The family of a canonical string: ``none``, ``temperature``, ``ntk``, ``rope-base``,
    ``interpolate``, ``freq-mask`` (all layers) or ``freq-mask@index`` (only some layers)."""
    name, _, rest = intervention.partition(":")
    if name == "freq-mask" and "layers=" in rest:
        return "freq-mask@index"
    return name


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


def pure_head_counts(heads: pd.DataFrame, gamma: float = GAMMA) -> pd.DataFrame:
    """Per (task, model, intervention, extra_tokens): the number of pure positional and pure symbolic
    heads (SPEC §3 rule at ``gamma``) of a head-readout table (columns s_pos, s_sym per head)."""
    rows = []
    for key, g in heads.groupby(["task", "model", "intervention", "extra_tokens"], sort=False):
        kinds = classify(g["s_pos"].to_numpy(), g["s_sym"].to_numpy(), gamma)
        rows.append(dict(zip(["task", "model", "intervention", "extra_tokens"], key),
                         positional=int((kinds == "positional").sum()), symbolic=int((kinds == "symbolic").sum())))
    return pd.DataFrame(rows)


def study_summary(lengthgen: pd.DataFrame, heads: pd.DataFrame | None = None, predicted: bool = True) -> pd.DataFrame:
    """The study table: one row per (task, intervention) with the number of models, the reach (mean,
    sd; a model that never reaches 0.9 at +0 counts as −1), accuracy at each report length (mean,
    sd), the mean accuracy over the grid, the pure heads at each head-readout length (mean over
    models, "positional/symbolic") and the prediction (:data:`PREDICTION`; empty unless ``predicted``:
    it was written for the paper preset's GPT-J models only, :func:`study.prediction_applies`)."""
    per = model_reach(lengthgen)
    pure = pure_head_counts(heads) if heads is not None and len(heads) else None
    rows = []
    for (task, interv), g in per.groupby(["task", "intervention"], sort=False):
        reach = g["reach"].map(lambda r: -1.0 if r is None or (isinstance(r, float) and math.isnan(r)) else float(r))
        m, sd, _ = mean_sd(reach)
        row = {"task": task, "intervention": interv, "family": family(interv), "n_models": len(g),
               "reach_mean": m, "reach_sd": sd, "reach_each": ",".join(str(int(r)) for r in reach)}
        for e in REPORT_LENGTHS:
            row[f"acc_{e}_mean"], row[f"acc_{e}_sd"], _ = mean_sd(g[f"acc_{e}"])
        row["acc_grid_mean"] = float(g["acc_grid_mean"].mean())
        row["grid_max"] = int(g["grid_max"].min())
        if pure is not None:
            for e in HEAD_LENGTHS:
                p = pure[(pure["task"] == task) & (pure["intervention"] == interv) & (pure["extra_tokens"] == e)]
                row[f"pure_{e}"] = (f"{p['positional'].mean():.1f}/{p['symbolic'].mean():.1f}" if len(p) else "—")
        row["prediction"] = "—" if interv == "none" else PREDICTION.get((family(interv), task), "") if predicted else ""
        rows.append(row)
    out = pd.DataFrame(rows)
    if out.empty:
        return out
    order = {t: i for i, t in enumerate(TASKS)}
    return out.sort_values("task", key=lambda t: t.map(lambda x: order.get(x, len(TASKS))), kind="stable").reset_index(drop=True)


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


def summary_rows(summary: pd.DataFrame, prediction: bool = True) -> tuple[list[str], list[list[str]]]:
    """The study table as text cells (header, rows) for Markdown and HTML (``prediction``: with the
    prediction column; the HTML page shows the predictions in a table of their own)."""
    pure_cols = [e for e in HEAD_LENGTHS if f"pure_{e}" in summary]
    header = ["task", "intervention", "models", f"reach ≥ {REACH_THRESHOLD:g}", *[f"acc +{e:,}" for e in REPORT_LENGTHS],
              *[f"pure pos/sym +{e:,}" for e in pure_cols], *(["prediction"] if prediction else [])]
    rows = []
    for _, r in summary.iterrows():
        reach = "never" if r["reach_mean"] < 0 and not r["reach_sd"] > 0 else (  # every model: never
            f"+{r['reach_mean']:.0f}" + (f" ± {r['reach_sd']:.0f}" if r["n_models"] > 1 else "")
            + (f" ({r['reach_each']})" if r["n_models"] > 1 else ""))
        if r["reach_mean"] >= r["grid_max"]:
            reach += " (grid end)"
        rows.append([r["task"], short_intervention(r["intervention"]), str(r["n_models"]), reach,
                     *[fmt_ms(r[f"acc_{e}_mean"], r[f"acc_{e}_sd"], None, 2) for e in REPORT_LENGTHS],
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


def index_layers(heads_at_zero: pd.DataFrame, gamma: float = GAMMA) -> list[int]:
    """The layers holding a pure positional head (SPEC §3 rule) in a head table of one model at +0."""
    kinds = classify(heads_at_zero["s_pos"].to_numpy(), heads_at_zero["s_sym"].to_numpy(), gamma)
    return sorted({int(l) for l, k in zip(heads_at_zero["layer"], kinds) if k == "positional"})


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


__all__ = ["as_setting", "best_settings", "drop_lowest", "family", "for_model", "index_layers", "model_reach",
           "prediction_rows", "pure_head_counts", "study_grid", "study_settings", "study_summary", "summary_markdown",
           "summary_rows", "settings_display"]
