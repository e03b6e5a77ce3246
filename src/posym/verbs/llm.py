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
              force: bool = False, **kwargs: Any) -> VerbResult:
    """:func:`posym.heads.llm_heads.llm_heads`, written to ``out``: ``llm_heads.csv``,
    ``llm_heads_freq_use.csv``, ``llm_heads_layers.csv`` (per-layer medians), ``llm_heads_summary.csv``,
    ``llm_heads.json`` (settings) and ``figures/llm_heads_plane.png|pdf``."""
    from posym.heads.llm_heads import layer_medians, summarize_llm_heads
    from posym.heads.llm_heads import llm_heads as score_llm
    from posym.report.llm_heads_figures import plot_llm_heads_plane

    out = Path(out)
    stem = layout.figure(out, layout.FIG_LLM_HEADS)
    names = (layout.LLM_HEADS, layout.LLM_HEADS_FREQ_USE, layout.LLM_HEADS_LAYERS, layout.LLM_HEADS_SUMMARY,
             layout.LLM_HEADS_JSON)
    outputs = Outputs([out / n for n in names] + figure_paths(stem), force).check()
    table = score_llm(model, gguf, **kwargs)
    layers, summary = layer_medians(table), summarize_llm_heads(table)
    outputs.csv(table, out / layout.LLM_HEADS)
    outputs.csv(table.attrs["freq_use"], out / layout.LLM_HEADS_FREQ_USE)
    outputs.csv(layers, out / layout.LLM_HEADS_LAYERS)
    outputs.csv(summary, out / layout.LLM_HEADS_SUMMARY)
    outputs.json(table.attrs["meta"], out / layout.LLM_HEADS_JSON)
    outputs.figure(plot_llm_heads_plane(table, title=str(table.attrs["model"])), stem)
    med = layers.pivot(index="layer", columns="prompt_set", values=["s_pos", "s_sym"])
    text = "\n".join([f"median over heads per layer ({table.attrs['model']}):", med.round(3).to_string(),
                      summary.round(3).to_string(index=False), *(f"wrote {f}" for f in outputs.written)])
    return VerbResult(table, outputs.written, text)


__all__ = ["HEADS_OUT", "llm_eval", "llm_heads"]
