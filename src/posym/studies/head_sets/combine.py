"""Several models' head-set studies side by side (``posym head-sets-combine``; docs/head_sets.md, issue 37
point 5: "the paper-preset models of both tasks (3 seeds)").

Each model keeps its own typed sets, controls and statistics (``posym head-sets`` on that model); this
combines them cell by cell — a cell is (task, part, set, what, k, added length) — into one row per cell
with the number of models that have it, each model's effect beside the mean, the smallest and the largest,
the controls' mean effect, in how many models the cell is significant after Benjamini–Hochberg
(``p_bh`` ≤ ``alpha``), and one p across the models: Fisher's combination of their matched-control p
(independent replicates; conservative for permutation p), Benjamini–Hochberg over the combined cells.
Nothing is pooled across prompts or models: the models are replicates of one recipe, not one sample.

Refused in one line, before anything is written (an aggregate must never mix rows that differ): fewer
than two studies, a folder that is not a ``posym head-sets`` study, studies whose settings differ (task,
doses, directions, interventions, lengths, n, readout n, matching, seed, K asked; an LLM's protocol and
model), one model measured twice, and trained models of different recipes (their ``posym.json``: preset,
architecture, encoding, optimisation; seeds may differ).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from posym.checks import check_float
from posym.errors import PosymError
from posym.runs import layout
from posym.stats import benjamini_hochberg, fisher_combined
from posym.studies.head_sets.figures import plot_combined_doses, plot_combined_intervention
from posym.verbs import Outputs, VerbResult, figure_paths

#: The study settings (``head_sets.json``) that must be equal in every combined study.
SETTINGS: tuple[str, ...] = ("task", "doses", "directions", "temperature", "lengths", "temperature_lengths", "n",
                             "readout_n", "match", "seed", "controls", "llm", "protocol", "llm_seed")
#: The training settings (``posym.json``'s ``config``) of a trained model that must be equal (its recipe).
RECIPE: tuple[str, ...] = ("task", "preset", "arch", "pe", "steps", "batch_size", "lr", "weight_decay", "eps", "warmup",
                           "max_grad_norm", "betas", "precision", "distractors", "final_model", "epochs",
                           "model_overrides")
#: What identifies a cell across models (the sets' heads differ from model to model).
KEY: list[str] = ["task", "part", "set", "what", "k", "extra_tokens"]
#: The per-model columns kept in ``head_sets_combined_models.csv`` (beside the key, ``label`` and ``model``).
MODEL_COLUMNS: list[str] = ["heads", "n_prompts", "n_controls", "acc_none", "acc", "effect", "effect_lo", "effect_hi",
                            "ctrl_acc_mean", "ctrl_effect_mean", "p", "p_bh", "acc_all_heads", "s_pos_none", "s_pos",
                            "s_sym_none", "s_sym"]


def _read_study(d: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    js, csv = d / layout.HEAD_SETS_JSON, d / layout.HEAD_SETS
    if not js.is_file() or not csv.is_file():
        raise PosymError(f"{d} is not a posym head-sets study (no {layout.HEAD_SETS_JSON} and {layout.HEAD_SETS}); "
                         "give the --out folders of posym head-sets")
    meta = layout.read_json(js)
    if not meta:
        raise PosymError(f"{js} is unreadable; rerun posym head-sets --force into {d}")
    return meta, pd.read_csv(csv)


def _recipe(meta: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the trained model's recipe or None, its posym.json config) of a study's model."""
    if meta.get("llm") is not None:
        return None, {}
    run = layout.read_meta(meta["model"]) if Path(str(meta["model"])).is_dir() else {}
    config = run.get("config", {}) if isinstance(run, dict) else {}
    if not config:
        return None, {}
    return {k: config.get(k) for k in RECIPE}, config


def _labels(metas: list[dict[str, Any]], configs: list[dict[str, Any]], labels: Sequence[str] | None) -> list[str]:
    if labels is not None:
        labels = [str(x) for x in labels]
        if len(labels) != len(metas) or len(set(labels)) != len(labels):
            raise PosymError(f"--labels: give {len(metas)} distinct labels, one per study (got {', '.join(labels) or 'none'})")
        return labels
    seeds = [c.get("seed") for c in configs]
    if all(s is not None for s in seeds) and len(set(seeds)) == len(seeds):
        return [f"seed {s}" for s in seeds]
    names = [Path(str(m.get("llm") or m["model"])).name or str(m["model"]) for m in metas]
    if len(set(names)) == len(names):
        return names
    return [f"model {i}" for i in range(len(metas))]


def check_studies(studies: Sequence[str | os.PathLike]) -> tuple[list[dict[str, Any]], list[pd.DataFrame],
                                                                   list[dict[str, Any]]]:
    """Read and check the studies (module doc): ``(head_sets.json of each, head_sets.csv of each, posym.json
    config of each trained model or {})``; one-line PosymError on anything that would mix rows that differ."""
    dirs = [Path(s) for s in studies]
    if len(dirs) < 2:
        raise PosymError("give two or more posym head-sets study folders to combine (e.g. one per training seed)")
    read = [_read_study(d) for d in dirs]
    metas, tables = [m for m, _ in read], [t for _, t in read]
    for key in SETTINGS:
        values = [m.get(key) for m in metas]
        if any(v != values[0] for v in values):
            i = next(j for j, v in enumerate(values) if v != values[0])
            raise PosymError(f"the studies differ in {key} ({dirs[0]}: {values[0]}, {dirs[i]}: {values[i]}); "
                             "combine studies measured with the same settings")
    models = [str(Path(str(m["model"])).resolve()) if m.get("llm") is None else f"{m['llm']}|{m.get('llm_seed')}"
              for m in metas]
    for i, m in enumerate(models):
        if models.index(m) != i:
            raise PosymError(f"{dirs[models.index(m)]} and {dirs[i]} measured the same model ({metas[i]['model']}); "
                             "give each model's study once")
    recipes = [_recipe(m) for m in metas]
    known = [(d, r) for d, (r, _) in zip(dirs, recipes) if r is not None]
    for d, r in known[1:]:
        diff = [k for k in RECIPE if r.get(k) != known[0][1].get(k)]
        if diff:
            raise PosymError(f"the models of {known[0][0]} and {d} differ in {diff[0]} ({known[0][1].get(diff[0])} vs "
                             f"{r.get(diff[0])}); combine studies of models trained with one recipe (seeds may differ)")
    return metas, tables, [c for _, c in recipes]


def combine_tables(tables: Sequence[pd.DataFrame], labels: Sequence[str], models: Sequence[str],
                   alpha: float = 0.05) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(combined, per model)`` of studies' ``head_sets.csv`` tables: one row per cell (:data:`KEY`) with
    ``n_models, labels, heads`` (each model's, ``;``-separated), the means of ``acc_none, acc, effect,
    ctrl_acc_mean, ctrl_effect_mean``, ``effect_min, effect_max``, ``p_max, p_bh_max``, ``n_significant``
    (models with ``p_bh`` ≤ ``alpha``), ``p_fisher`` (Fisher's combination of the models' matched-control p,
    :func:`posym.stats.fisher_combined`: the models are independent replicates) and ``p_fisher_bh``
    (Benjamini–Hochberg over the combined cells); and the long table (one row per cell and model)."""
    check_float(alpha, "--alpha", lo=0.0, hi=1.0)
    parts = []
    for t, label, model in zip(tables, labels, models):
        cols = [c for c in MODEL_COLUMNS if c in t.columns]
        part = t[KEY + cols].copy()
        part.insert(len(KEY), "label", label)
        part.insert(len(KEY) + 1, "model", model)
        parts.append(part)
    long = pd.concat(parts, ignore_index=True)  # cells in the studies' order, models in the given order within a cell
    long["k"] = long["k"].fillna(0).astype(int)
    rows = []
    for key, g in long.groupby(KEY, sort=False, dropna=False):
        sig = (g["p_bh"] <= alpha).sum() if "p_bh" in g else np.nan
        rows.append({**dict(zip(KEY, key)), "n_models": len(g), "labels": ";".join(g["label"]), "heads": ";".join(g["heads"]),
                     "n_prompts": int(g["n_prompts"].min()), "n_controls_min": int(g["n_controls"].min()),
                     "acc_none": g["acc_none"].mean(), "acc": g["acc"].mean(), "effect": g["effect"].mean(),
                     "effect_min": g["effect"].min(), "effect_max": g["effect"].max(),
                     "effects": ";".join(f"{x:+.3f}" for x in g["effect"]),
                     "ctrl_acc_mean": g["ctrl_acc_mean"].mean(), "ctrl_effect_mean": g["ctrl_effect_mean"].mean(),
                     "acc_all_heads": g["acc_all_heads"].mean() if "acc_all_heads" in g else np.nan,
                     "p_max": g["p"].max(), "p_bh_max": g["p_bh"].max(), "n_significant": int(sig), "alpha": alpha,
                     "p_fisher": fisher_combined(g["p"])})
    out = pd.DataFrame(rows)
    out["p_fisher_bh"] = benjamini_hochberg(out["p_fisher"]) if len(out) else []
    long = long.assign(_cell=long.groupby(KEY, sort=False, dropna=False).ngroup()).sort_values("_cell", kind="stable")
    return out, long.drop(columns="_cell").reset_index(drop=True)


def combined_markdown(t: pd.DataFrame, n_studies: int, null: str, labels: Sequence[str]) -> str:
    """``head_sets_combined.md``: one line per cell — each model's effect, their mean, the controls' mean
    effect and in how many models the cell survives BH."""
    lines = [f"{n_studies} models ({', '.join(labels)}), each against its own matched controls. Null: {null}. "
             "Effect = untouched − intervened accuracy, paired over the same prompts within a model; "
             f"significant: BH-adjusted p ≤ {t['alpha'].iloc[0] if len(t) else 0.05:g} within the model's study.", "",
             "Across models: Fisher's combination of their matched-control p, Benjamini–Hochberg over these cells.", "",
             "| part | set | what | k | +len | models | effect per model | mean [min, max] | controls' mean effect | "
             "significant | p (Fisher) | p (Fisher, BH) |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in t.itertuples(index=False):
        lines.append(f"| {r.part} | {r.set} | {r.what} | {r.k} | {r.extra_tokens} | {r.n_models} of {n_studies} | "
                     f"{r.effects} | {r.effect:+.3f} [{r.effect_min:+.3f}, {r.effect_max:+.3f}] | "
                     f"{r.ctrl_effect_mean:+.3f} | {r.n_significant} of {r.n_models} | {r.p_fisher:.3g} | "
                     f"{r.p_fisher_bh:.3g} |")
    return "\n".join(lines) + "\n"


def combine_head_sets(studies: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                      labels: Sequence[str] | None = None, alpha: float = 0.05, force: bool = False) -> VerbResult:
    """Combine ``posym head-sets`` studies of replicate models (module doc) into ``out``:
    ``head_sets_combined.csv`` (one row per cell), ``head_sets_combined_models.csv`` (one per cell and
    model), ``head_sets_combined.md`` and, per set, the dose and intervention figures with one line per model."""
    check_float(alpha, "--alpha", lo=0.0, hi=1.0)
    metas, tables, configs = check_studies(studies)
    labels = _labels(metas, configs, labels)
    out = Path(out)
    sets = sorted(set().union(*(set(t["set"]) for t in tables)))
    stems = [out / layout.FIG_HEAD_SETS_COMBINED_DOSES.format(set=s) for s in sets] + \
            [out / layout.FIG_HEAD_SETS_COMBINED_INTERVENTION.format(set=s) for s in sets]
    files = [out / f for f in (layout.HEAD_SETS_COMBINED, layout.HEAD_SETS_COMBINED_MODELS, layout.HEAD_SETS_COMBINED_MD)]
    outputs = Outputs(files + [p for s in stems for p in figure_paths(s)], force).check()
    models = [str(m.get("llm") or m["model"]) for m in metas]
    combined, long = combine_tables(tables, labels, models, alpha)
    null, window = str(metas[0].get("null", "")), metas[0].get("llm") is not None
    outputs.csv(combined, out / layout.HEAD_SETS_COMBINED)
    outputs.csv(long, out / layout.HEAD_SETS_COMBINED_MODELS)
    outputs.text(combined_markdown(combined, len(tables), null, labels)
                 + "".join(f"\nStudy {lab}: {Path(str(s))} (model {m})\n" for lab, s, m in zip(labels, studies, models)),
                 out / layout.HEAD_SETS_COMBINED_MD)
    for s in sets:
        if ((long["set"] == s) & (long["part"] == "dose")).any():
            outputs.figure(plot_combined_doses(long, s, null, window=window),
                           out / layout.FIG_HEAD_SETS_COMBINED_DOSES.format(set=s))
        if ((long["set"] == s) & (long["part"] == "temperature")).any():
            outputs.figure(plot_combined_intervention(long, s, null, window=window),
                           out / layout.FIG_HEAD_SETS_COMBINED_INTERVENTION.format(set=s))
    partial = combined[combined["n_models"] < len(tables)]
    summary = (f"head-sets-combine: {len(combined)} cells of {len(tables)} models ({', '.join(labels)}); "
               f"{len(partial)} cells in fewer models (a set some models lack)\nwrote {out / layout.HEAD_SETS_COMBINED}")
    return VerbResult(table=combined, files=list(outputs.written), summary=summary, data={"labels": labels})


__all__ = ["KEY", "RECIPE", "SETTINGS", "check_studies", "combine_head_sets", "combine_tables", "combined_markdown"]
