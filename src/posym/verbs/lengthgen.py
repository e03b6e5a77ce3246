"""``posym lengthgen``: accuracy of a trained model vs added target-window tokens (Paper A Fig. 5B)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from posym.errors import PosymError
from posym.lengthgen.trained import largest_length_above, lengthgen as lengthgen_table, parse_grid, summarize_lengthgen
from posym.runs import layout
from posym.runs.resolve import StepChoice, resolve_model
from posym.verbs import Outputs, VerbResult, figure_paths


def lengthgen(run: str | os.PathLike, *, task: str | None = None, grid: str | Sequence[int] | None = "paper",
              n: int = 200, seeds: int = 1, out: str | os.PathLike | None = None, extra_rule: str = "window",
              step: StepChoice = None, device: str = "cpu", force: bool = False, progress: bool = True) -> VerbResult:
    """Evaluate the model a run stands for (or ``step``), or any HF GPT-J dir with ``task``, on the grid.

    Writes ``lengthgen.csv`` (one row per added length and data seed), ``lengthgen_summary.csv``
    (mean, sd over data seeds) and the figure ``figures/lengthgen_fig5b`` beside ``out`` (default:
    in the run directory). The letter data follow the run's own distractor rule (SPEC §1.2).
    """
    from posym.report.figures import plot_lengthgen
    from posym.report.paper import LENGTHGEN

    grid_values = parse_grid(grid)
    table_path = Path(out) if out else Path(run) / layout.LENGTHGEN
    if table_path.suffix != ".csv":
        raise PosymError(f"--out must be a .csv file, got {table_path}")
    fig_stem = layout.figure(table_path.parent, layout.FIG_LENGTHGEN if out is None else table_path.stem + "_fig5b")
    outputs = Outputs([table_path, layout.summary_path(table_path), *figure_paths(fig_stem)], force).check()
    model, task, ckpt_step = resolve_model(run, task=task, step=step)
    stored = layout.read_meta(run).get("config") or {}
    distractors = stored.get("distractors", "uniform" if stored else "pool")
    table = lengthgen_table(model, task, grid_values, n=n, seeds=seeds, device=device, progress=progress,
                            extra_rule=extra_rule, distractors=distractors)
    table.insert(0, "task", task)
    table.insert(1, "step", ckpt_step)
    table.insert(2, "extra_rule", extra_rule)
    summary = summarize_lengthgen(table)
    outputs.csv(table, table_path)
    outputs.csv(summary, layout.summary_path(table_path))
    outputs.figure(plot_lengthgen({task: summary}, paper=LENGTHGEN), fig_stem)
    cols = ["extra_tokens", "acc_mean", "acc_sd"] + [f"acc_hop{h}_mean" for h in range(1, 5)]
    text = (summary[cols].round(3).to_string(index=False) + "\n"
            f"largest added length with accuracy >= 0.9: {largest_length_above(summary)}; "
            f"time {table['seconds'].sum():.0f} s, peak RSS {table['peak_rss_mb'].max():.0f} MB; wrote {table_path}")
    return VerbResult(table, outputs.written, text, {"summary": summary, "task": task, "step": ckpt_step})


__all__ = ["lengthgen"]
