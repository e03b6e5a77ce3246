"""``posym llm eval`` / ``posym llm heads``: real LLMs — the 1-hop protocol vs length (Paper A Table 3,
SPEC §1.5) and block-swap scores of every head (Paper B §5)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from posym.heads.llm_heads import DEFAULT_MIN_MASS
from posym.interventions import check_interventions, describe, holds_under_kv_cache, intervened, plan_interventions
from posym.runs import layout
from posym.runs.lock import DirLock
from posym.runs.tables import INTERVENTION, short_intervention, with_intervention
from posym.verbs import Outputs, VerbResult, figure_paths

#: Root of the default output folders of ``posym llm heads``: ``runs/llm-heads/<model>/``.
HEADS_OUT_ROOT = "runs/llm-heads"


def heads_out(model: Any = None, gguf: str | os.PathLike | None = None) -> Path:
    """Default output folder of :func:`llm_heads`, relative to the current folder:
    ``runs/llm-heads/<model>/`` — a bundled short name as it is (``smollm2``, the default model), a
    folder or ``.gguf`` file by its last part, an in-memory model by its ``name_or_path``."""
    from posym.model.llm import DEFAULT_LLM

    if model is not None and not isinstance(model, (str, os.PathLike)):  # an in-memory HF model
        name = getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__
    else:
        name = str(model) if model is not None else (str(gguf) if gguf is not None else DEFAULT_LLM)
    return Path(HEADS_OUT_ROOT) / layout.llm_model_slug(name)


def llm_eval(model: str | os.PathLike | None = None, gguf: str | os.PathLike | None = None, *,
             progress: bool = True, intervene: Sequence[str] | None = None, layers: Sequence[int] | None = None,
             **kwargs: Any) -> VerbResult:
    """:func:`posym.lengthgen.llm_eval.llm_eval` (answers cached in the output folder, so a re-run only
    asks for missing samples; ``protocol="choice"`` scores the candidates by log-likelihood) plus the
    accuracy-vs-length figure ``figures/llm_lengthgen`` (with chance lines for the choice protocol).
    ``intervene``: canonical intervention strings (docs/interventions.md), one measurement each
    (``layers`` for temperature / freq-mask), cached and tabulated under their canonical string."""
    from posym.lengthgen.llm_eval import llm_eval as run_eval
    from posym.lengthgen.llm_eval import short_label, table_markdown, table_title
    from posym.report.llm_figures import plot_llm_lengthgen

    specs = plan_interventions(intervene, layers)  # a bad spec: one line, first
    texts = [describe(s) for s in specs]
    cache_ok = [t for s, t in zip(specs, texts) if holds_under_kv_cache(s)]
    lock = contextlib.nullcontext()
    if kwargs.get("out") is not None:  # refuse an unwritable output folder before loading any model
        Outputs(figure_paths(layout.figure(kwargs["out"], layout.FIG_LLM)), force=True).check()
        # one writer per --out, the figure included (run_eval takes the same lock again, re-entrantly)
        lock = DirLock.for_file(Path(kwargs["out"]) / layout.LLM_ANSWERS, "LLM answers file").check_free()
    with lock:
        res = run_eval(model=model, gguf=gguf, progress=progress, intervene=texts, apply=intervened,
                       kv_cache_ok=cache_ok, **kwargs)
        outputs = Outputs(figure_paths(layout.figure(res.out_dir, layout.FIG_LLM)), force=True)
        several = len(texts) > 1  # one line style per intervention, the model in the title
        drawn = res.table.assign(model=res.table[INTERVENTION].map(short_intervention) if several else res.model)
        outputs.figure(plot_llm_lengthgen(drawn, title=short_label(res.model) if several else None),
                       layout.figure(res.out_dir, layout.FIG_LLM))
    contrast = res.paths.get("contrast_markdown")
    text = (table_markdown(res.table, title=table_title(res.model, res.protocol))
            + (contrast.read_text() if contrast is not None else "")
            + f"{res.n_new} answered, {res.n_cached} from cache, {res.seconds:.0f} s; output in {res.out_dir}")
    return VerbResult(res.table, [*res.paths.values(), *outputs.written], text, {"result": res})


def _summary_lines(summary: pd.DataFrame, chance: dict[str, float]) -> str:
    """The summary as a narrow table (≤ 100 characters): per set, accuracy vs chance, heads kept,
    median block mass, median s_POS / s_SYM in the first and second half of the layers, Pearson r.
    The sliding/global medians stay in the CSV (the grid above shows the layer types)."""
    import numpy as np

    chances = [v for v in chance.values() if np.isfinite(v)]
    mean_chance = float(np.mean(chances)) if chances else float("nan")
    t = pd.DataFrame({
        "set": summary["prompt_set"],
        "acc": summary["accuracy"],
        "chance": [chance.get(s, mean_chance) for s in summary["prompt_set"]],
        "kept": [f"{h - x}/{h}" for h, x in zip(summary["n_heads"], summary["n_excluded"])],
        "mass": summary["median_block_mass"],
        "s_pos 1st": summary["median_s_pos_first"], "s_pos 2nd": summary["median_s_pos_second"],
        "s_sym 1st": summary["median_s_sym_first"], "s_sym 2nd": summary["median_s_sym_second"],
        "r": summary["pearson_r"]})
    return t.round(2).to_string(index=False)


def llm_heads(model: Any = None, gguf: str | os.PathLike | None = None, *, out: str | os.PathLike | None = None,
              force: bool = False, min_mass: float = DEFAULT_MIN_MASS, progress: bool = True,
              intervene: Sequence[str] | None = None, layers: Sequence[int] | None = None,
              **kwargs: Any) -> VerbResult:
    """:func:`posym.heads.llm_heads.llm_heads`, written to ``out`` (default :func:`heads_out`:
    ``runs/llm-heads/<model>/``, printed to stderr at the start unless ``progress=False``):
    ``llm_heads.csv`` (every head), ``llm_heads_freq_use.csv``, ``llm_heads_layers.csv`` (per-layer
    medians), ``llm_heads_summary.csv``, ``llm_heads_groups.csv`` (layer type × depth medians),
    ``llm_heads.json`` (settings, warnings) and ``figures/llm_heads_plane.png|pdf``,
    ``figures/llm_heads_layers.png|pdf``. ``min_mass`` (default 0.01; 0 keeps every head): heads
    with ``block_mass < min_mass`` are left out of the medians and r of the three summary files
    (their count is reported); the heads table keeps them. The printed summary ends with
    :func:`posym.heads.llm_heads.reading_warnings` and a pointer to the reading of the scores
    (:data:`posym.reading.HOW_TO_READ`). ``intervene``: canonical intervention strings
    (docs/interventions.md), one scoring each (``layers`` for temperature / freq-mask), checked on the
    loaded model first; every CSV gets an ``intervention`` column and holds all of them, the figures
    are the first one's."""
    import sys

    from posym.heads.llm_heads import (check_min_mass, group_medians, layer_medians, reading_warnings,
                                       summarize_llm_heads)
    from posym.heads.llm_heads import llm_heads as score_llm
    from posym.reading import READ_POINTER
    from posym.report.llm_heads_figures import plot_llm_heads_layers, plot_llm_heads_plane

    min_mass = check_min_mass(min_mass)
    specs = plan_interventions(intervene, layers)
    out = Path(out) if out is not None else heads_out(model, gguf)
    stems = [layout.figure(out, layout.FIG_LLM_HEADS), layout.figure(out, layout.FIG_LLM_HEADS_LAYERS)]
    names = (layout.LLM_HEADS, layout.LLM_HEADS_FREQ_USE, layout.LLM_HEADS_LAYERS, layout.LLM_HEADS_SUMMARY,
             layout.LLM_HEADS_GROUPS, layout.LLM_HEADS_JSON)
    outputs = Outputs([out / n for n in names] + [p for s in stems for p in figure_paths(s)], force).check()
    label = None
    if model is None or isinstance(model, (str, os.PathLike)):
        from posym.model.llm import check_llm_model, load_llm, model_label

        check_llm_model(model, gguf)  # a missing folder or one without a tokenizer: one line, nothing loaded
        if specs != (None,):  # loaded here, once, so that every intervention applies to the same model
            label = model_label(model, gguf)
            model, kwargs["tokenizer"] = load_llm(model, gguf, device=kwargs.pop("device", None),
                                                  dtype=kwargs.pop("dtype", None))
            gguf = None
    texts = check_interventions(model, specs) if specs != (None,) else [describe(None)]
    if progress:
        print(f"llm heads: output folder {out}{os.sep}", file=sys.stderr, flush=True)
    parts = []
    for spec, text in zip(specs, texts):
        with intervened(model, spec):
            table = score_llm(model, gguf, progress=progress, label=label, **kwargs)
        parts.append((text, table, layer_medians(table, min_mass=min_mass),
                      summarize_llm_heads(table, min_mass=min_mass), group_medians(table, min_mass=min_mass),
                      reading_warnings(table)))
    def cat(pick) -> pd.DataFrame:  # one table of every intervention, each tagged with its canonical string
        frames = [with_intervention(pick(p), p[0]) for p in parts]
        for f in frames:
            f.attrs = {}  # side tables live in attrs; pandas compares attrs when it concatenates
        return pd.concat(frames, ignore_index=True)

    table = parts[0][1]
    heads = cat(lambda p: p[1])
    heads.attrs.update(table.attrs)
    outputs.csv(heads, out / layout.LLM_HEADS)
    outputs.csv(cat(lambda p: p[1].attrs["freq_use"]), out / layout.LLM_HEADS_FREQ_USE)
    outputs.csv(cat(lambda p: p[2]), out / layout.LLM_HEADS_LAYERS)
    outputs.csv(cat(lambda p: p[3]), out / layout.LLM_HEADS_SUMMARY)
    outputs.csv(cat(lambda p: p[4]), out / layout.LLM_HEADS_GROUPS)
    meta = {**table.attrs["meta"], "min_mass": min_mass, "warnings": parts[0][5], INTERVENTION: texts}
    if len(parts) > 1:
        meta["warnings_by_intervention"] = {p[0]: p[5] for p in parts}
        meta["accuracy_by_intervention"] = {p[0]: p[1].attrs["accuracy"] for p in parts}
    outputs.json(meta, out / layout.LLM_HEADS_JSON)
    title = str(table.attrs["model"]) + (" (centred)" if table.attrs["meta"].get("centred") else "")
    fig_title = title + (f" · {texts[0]}" if specs[0] is not None else "")
    outputs.figure(plot_llm_heads_plane(table, title=fig_title), stems[0])
    outputs.figure(plot_llm_heads_layers(parts[0][2], title=fig_title), stems[1])
    kept = (f"heads with block_mass >= {min_mass:g}" if min_mass > 0 else "all heads (--min-mass 0)")
    lines = [f"model: {title}",
             f"swap-exclude: {table.attrs['meta'].get('swap_exclude', 'none')} (keys kept out of the swaps; "
             "docs/spec.md §3)"]
    for text, t, lay, summary, groups, warnings in parts:
        med = lay.pivot(index="layer", columns="prompt_set", values=["s_pos", "s_sym"])
        grid = groups[groups["depth"].isin(["all", "half 1", "half 2"])].pivot(
            index=["layer_type", "depth"], columns="prompt_set", values=["median_s_pos", "median_s_sym"])
        lines += ([f"intervention: {text}"] if len(parts) > 1 else []) + [
            f"median over {kept}, per layer:", med.round(3).to_string(),
            "medians by layer type and depth:", grid.round(3).to_string(),
            "summary (1st/2nd: first/second half of the layers; kept: heads in the medians):",
            _summary_lines(summary, t.attrs.get("chance", {})), *warnings]
    lines += [f"wrote {len(outputs.written)} files to {out}{os.sep}", READ_POINTER]
    return VerbResult(heads, outputs.written, "\n".join(lines))


__all__ = ["HEADS_OUT_ROOT", "heads_out", "llm_eval", "llm_heads"]
