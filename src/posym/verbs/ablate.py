"""``posym ablate``: accuracy with each head zero- or mean-ablated (Paper A Fig. 3 right), for a run, an
HF Trainer output_dir or a model folder of any family posym reads (docs/models.md); with ``heads`` a head
set ablated together (docs/interventions.md, "Head selections")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from posym.errors import PosymError
from posym.heads.ablate import MODES, ablation_for_run
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.runs.resolve import StepChoice, check_model_folder
from posym.runs.tables import with_step
from posym.verbs import Outputs, VerbResult, figure_paths


def ablate(run: str | os.PathLike, *, task: str | None = None, n: int = 2000, seed: int = 0,
           modes: Sequence[str] = MODES, step: StepChoice = None, out: str | os.PathLike | None = None,
           force: bool = False, progress: bool = True, heads: str | None = None,
           readout: str | os.PathLike | None = None, method: str = "batched") -> VerbResult:
    """Write ``ablation.csv`` (with the ``step`` of the ablated checkpoint) and ``figures/ablation.png|pdf``
    in ``out`` (default: the run directory). The folder, its task, family and vocabulary are checked
    (:func:`posym.runs.resolve.check_model_folder`) before any work: an unsupported family is one line.

    ``heads``: a head selection (``L3H1+L5H0``, a type, ``random:<type>[,seed=S]``; a type needs
    ``readout``, the head readout of the same model) ablated together: ``ablation.csv`` in ``out`` (which
    must be given, and not the run directory, whose ``ablation.csv`` is the per-head table) holds the
    baseline and one row per mode, with the columns ``heads, selection, readout, seed``; no figure.

    ``method``: the per-head table's forwards, ``"batched"`` (all heads' prompts stacked) or ``"loop"`` (one
    head at a time, the reference; :func:`posym.heads.ablate.ablate_heads`); the tables are equal."""
    from posym.report.flow_figures import plot_ablation

    check_model_folder(run, task, step)
    if heads is not None:
        return _ablate_set(run, task=task, n=n, seed=seed, modes=modes, step=step, out=out, force=force, heads=heads,
                           readout=readout)
    if readout is not None:
        raise PosymError("--readout is read for --heads TYPE or random:TYPE; give --heads too")
    out_dir = Path(out) if out is not None else Path(run)
    stem = layout.figure(out_dir, layout.FIG_ABLATION)
    outputs = Outputs([out_dir / layout.ABLATION, *figure_paths(stem)], force).check()
    table = ablation_for_run(run, task=task, n=n, seed=seed, modes=tuple(modes), step=step, progress=progress,
                             method=method)
    table = with_step(table, table.attrs.get("step"))
    outputs.csv(table, out_dir / layout.ABLATION)
    outputs.figure(plot_ablation(table), stem)
    note = in_progress_note(run, table.attrs.get("step"))
    return VerbResult(table, outputs.written, table.to_string(index=False) + (f"\n{note}" if note else ""))


def _ablate_set(run: str | os.PathLike, *, task: str | None, n: int, seed: int, modes: Sequence[str], step: StepChoice,
                out: str | os.PathLike | None, force: bool, heads: str, readout: str | os.PathLike | None) -> VerbResult:
    """:func:`ablate` with ``heads``: the set's table in ``out`` (checked before any work)."""
    from posym.heads.selection import parse_heads

    selection = parse_heads(heads)
    if out is None or Path(out).resolve() == Path(run).resolve():
        raise PosymError(f"--heads {selection.canonical()} writes a head-set table: give --out DIR other than the run "
                         "directory (its ablation.csv is the per-head table)")
    out_dir = Path(out)
    outputs = Outputs([out_dir / layout.ABLATION], force).check()
    table = ablation_for_run(run, task=task, n=n, seed=seed, modes=tuple(modes), step=step, heads=heads, readout=readout)
    table = with_step(table, table.attrs.get("step"))
    outputs.csv(table, out_dir / layout.ABLATION)
    a = table.attrs
    head = (f"ablated together: {a['heads']} (selection {a['selection']}"
            + (f", readout {a['readout']}" if a["readout"] else "")
            + (f", seed {a['selection_seed']}" if a["selection_seed"] is not None else "") + ")")
    note = in_progress_note(run, a.get("step"))
    shown = table.drop(columns=["heads", "selection", "readout", "seed"])
    return VerbResult(table, outputs.written, head + "\n" + shown.to_string(index=False) + (f"\n{note}" if note else ""))


__all__ = ["ablate"]
