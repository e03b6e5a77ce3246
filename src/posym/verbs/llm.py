"""``posym llm eval`` / ``posym llm heads``: real LLMs — the 1-hop protocol vs length (Paper A Table 3,
SPEC §1.5) and block-swap scores of every head (Paper B §5)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from posym.runs import layout
from posym.verbs import Outputs, VerbResult, figure_paths

#: Default output folder of ``posym llm heads``.
HEADS_OUT = "runs/llm/heads"


def llm_eval(model: str | os.PathLike | None = None, gguf: str | os.PathLike | None = None, *,
             progress: bool = True, **kwargs: Any) -> VerbResult:
    """:func:`posym.lengthgen.llm_eval.llm_eval` (answers cached in the output folder, so a re-run only
    asks for missing samples; ``protocol="choice"`` scores the candidates by log-likelihood) plus the
    accuracy-vs-length figure ``figures/llm_lengthgen`` (with chance lines for the choice protocol)."""
    from posym.lengthgen.llm_eval import llm_eval as run_eval
    from posym.lengthgen.llm_eval import table_markdown, table_title
    from posym.report.llm_figures import plot_llm_lengthgen

    if kwargs.get("out") is not None:  # refuse an unwritable output folder before loading any model
        Outputs(figure_paths(layout.figure(kwargs["out"], layout.FIG_LLM)), force=True).check()
    res = run_eval(model=model, gguf=gguf, progress=progress, **kwargs)
    outputs = Outputs(figure_paths(layout.figure(res.out_dir, layout.FIG_LLM)), force=True)
    outputs.figure(plot_llm_lengthgen(res.table.assign(model=res.model)), layout.figure(res.out_dir, layout.FIG_LLM))
    text = (table_markdown(res.table, title=table_title(res.model, res.protocol))
            + f"{res.n_new} answered, {res.n_cached} from cache, {res.seconds:.0f} s; output in {res.out_dir}")
    return VerbResult(res.table, [*res.paths.values(), *outputs.written], text, {"result": res})


def llm_heads(model: Any = None, gguf: str | os.PathLike | None = None, *, out: str | os.PathLike = HEADS_OUT,
              force: bool = False, min_mass: float = 0.0, **kwargs: Any) -> VerbResult:
    """:func:`posym.heads.llm_heads.llm_heads`, written to ``out``: ``llm_heads.csv`` (every head),
    ``llm_heads_freq_use.csv``, ``llm_heads_layers.csv`` (per-layer medians), ``llm_heads_summary.csv``,
    ``llm_heads_groups.csv`` (layer type × depth medians), ``llm_heads.json`` (settings) and
    ``figures/llm_heads_plane.png|pdf``, ``figures/llm_heads_layers.png|pdf``. ``min_mass``: heads with
    ``block_mass < min_mass`` are left out of the medians and r of the three summary files (their
    count is reported); the heads table keeps them."""
    from posym.heads.llm_heads import check_min_mass, group_medians, layer_medians, summarize_llm_heads
    from posym.heads.llm_heads import llm_heads as score_llm
    from posym.report.llm_heads_figures import plot_llm_heads_layers, plot_llm_heads_plane

    min_mass = check_min_mass(min_mass)
    out = Path(out)
    stems = [layout.figure(out, layout.FIG_LLM_HEADS), layout.figure(out, layout.FIG_LLM_HEADS_LAYERS)]
    names = (layout.LLM_HEADS, layout.LLM_HEADS_FREQ_USE, layout.LLM_HEADS_LAYERS, layout.LLM_HEADS_SUMMARY,
             layout.LLM_HEADS_GROUPS, layout.LLM_HEADS_JSON)
    outputs = Outputs([out / n for n in names] + [p for s in stems for p in figure_paths(s)], force).check()
    table = score_llm(model, gguf, **kwargs)
    layers, summary = layer_medians(table, min_mass=min_mass), summarize_llm_heads(table, min_mass=min_mass)
    groups = group_medians(table, min_mass=min_mass)
    outputs.csv(table, out / layout.LLM_HEADS)
    outputs.csv(table.attrs["freq_use"], out / layout.LLM_HEADS_FREQ_USE)
    outputs.csv(layers, out / layout.LLM_HEADS_LAYERS)
    outputs.csv(summary, out / layout.LLM_HEADS_SUMMARY)
    outputs.csv(groups, out / layout.LLM_HEADS_GROUPS)
    outputs.json({**table.attrs["meta"], "min_mass": min_mass}, out / layout.LLM_HEADS_JSON)
    title = str(table.attrs["model"]) + (" (centred)" if table.attrs["meta"].get("centred") else "")
    outputs.figure(plot_llm_heads_plane(table, title=title), stems[0])
    outputs.figure(plot_llm_heads_layers(layers, title=title), stems[1])
    med = layers.pivot(index="layer", columns="prompt_set", values=["s_pos", "s_sym"])
    grid = groups[groups["depth"].isin(["all", "half 1", "half 2"])].pivot(
        index=["layer_type", "depth"], columns="prompt_set", values=["median_s_pos", "median_s_sym"])
    excl = (f"; left out, block_mass < {min_mass:g}: "
            + ", ".join(f"{r.prompt_set} {r.n_excluded}/{r.n_heads}" for r in summary.itertuples())) if min_mass > 0 else ""
    text = "\n".join([f"median over heads per layer ({title}{excl}):", med.round(3).to_string(),
                      "medians by layer type and depth:", grid.round(3).to_string(),
                      summary.round(3).to_string(index=False), *(f"wrote {f}" for f in outputs.written)])
    return VerbResult(table, outputs.written, text)


__all__ = ["HEADS_OUT", "llm_eval", "llm_heads"]
