"""``posym ablate``: accuracy with each head zero- or mean-ablated (Paper A Fig. 3 right), for a run, an
HF Trainer output_dir or a model folder of any family posym reads (docs/models.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from posym.heads.ablate import MODES, ablation_for_run
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.runs.resolve import StepChoice, check_model_folder
from posym.runs.tables import with_step
from posym.verbs import Outputs, VerbResult, figure_paths


def ablate(run: str | os.PathLike, *, task: str | None = None, n: int = 2000, seed: int = 0,
           modes: Sequence[str] = MODES, step: StepChoice = None, out: str | os.PathLike | None = None,
           force: bool = False, progress: bool = True) -> VerbResult:
    """Write ``ablation.csv`` (with the ``step`` of the ablated checkpoint) and ``figures/ablation.png|pdf``
    in ``out`` (default: the run directory). The folder, its task, family and vocabulary are checked
    (:func:`posym.runs.resolve.check_model_folder`) before any work: an unsupported family is one line."""
    from posym.report.flow_figures import plot_ablation

    check_model_folder(run, task, step)
    out_dir = Path(out) if out is not None else Path(run)
    stem = layout.figure(out_dir, layout.FIG_ABLATION)
    outputs = Outputs([out_dir / layout.ABLATION, *figure_paths(stem)], force).check()
    table = ablation_for_run(run, task=task, n=n, seed=seed, modes=tuple(modes), step=step, progress=progress)
    table = with_step(table, table.attrs.get("step"))
    outputs.csv(table, out_dir / layout.ABLATION)
    outputs.figure(plot_ablation(table), stem)
    note = in_progress_note(run, table.attrs.get("step"))
    return VerbResult(table, outputs.written, table.to_string(index=False) + (f"\n{note}" if note else ""))


__all__ = ["ablate"]
