"""``posym flow``: attention flow of single prompts with the hop chain highlighted (Paper A Fig. 3 left),
for a run, an HF Trainer output_dir or a model folder of any family posym reads (docs/models.md)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from posym.errors import PosymError
from posym.heads.flow import DEFAULT_MIN_WEIGHT, DEFAULT_TOP_K, flow_for_example
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.runs.resolve import StepChoice
from posym.runs.tables import with_step
from posym.verbs import Outputs, VerbResult, figure_paths


def flow(run: str | os.PathLike, *, examples: Sequence[int] | None = None, hops: Sequence[int] | None = None,
         task: str | None = None, split: str = "test", seed: int = 0, top_k: int = DEFAULT_TOP_K,
         min_weight: float = DEFAULT_MIN_WEIGHT, step: StepChoice = None, out: str | os.PathLike | None = None,
         force: bool = False) -> VerbResult:
    """Draw the flow of the given split rows (``examples``) or of the first row of each hop count in
    ``hops`` (among the first 256 rows; the report's set, also listed in ``RUN/flow.json``).

    For each example: ``figures/flow-<task>-<split>-<i>.png|pdf`` and its edge table ``.csv`` (with the
    ``step`` of the checkpoint), in
    ``out`` (default: the run directory).
    """
    from posym.report.flow_figures import plot_flow
    from posym.runs.resolve import check_model_folder
    from posym.tasks import make_split

    if (examples is None) == (hops is None):
        raise PosymError("give either examples or hops")
    run = Path(run)
    out_dir = Path(out) if out is not None else run
    _, task = check_model_folder(run, task, step)  # folder, task, family and vocabulary: before any work
    chosen: dict[str, int] = {}
    if hops is not None:
        batch = make_split(task, split, seed=seed, n=256)
        for h in hops:
            idx = np.flatnonzero(np.asarray(batch.hops) == int(h))
            if len(idx):
                chosen[str(h)] = int(idx[0])
    else:
        chosen = {str(i): int(i) for i in examples}
    stems = {k: layout.figure(out_dir, layout.flow_name(task, split, i)) for k, i in chosen.items()}
    files = [p for s in stems.values() for p in (*figure_paths(s), Path(f"{s}.csv"))]
    if hops is not None:
        files.append(out_dir / layout.FLOW_JSON)
    outputs = Outputs(files, force).check()
    listing, lines, steps = {}, [], set()
    for key, i in chosen.items():
        edges, tokens, chain, _ = flow_for_example(run, i, task=task, split=split, seed=seed, top_k=top_k,
                                                   min_weight=min_weight, step=step)
        outputs.figure(plot_flow(edges, tokens, chain), stems[key])
        outputs.csv(with_step(edges, edges.attrs.get("step")), f"{stems[key]}.csv")
        steps.add(edges.attrs.get("step"))
        listing[key] = {"example": i, "figure": str(Path(layout.FIGURES) / f"{stems[key].name}.png"),
                        "tokens": " ".join(tokens), "chain": [int(c) for c in chain],
                        "label": edges.attrs.get("label"), "prediction": edges.attrs.get("prediction")}
        lines.append(f"{task} example {i}: {' '.join(tokens)}; chain {chain}; wrote {stems[key]}.png")
    if hops is not None:
        outputs.json(listing, out_dir / layout.FLOW_JSON)
    note = in_progress_note(run, next(iter(steps)) if len(steps) == 1 else None)
    return VerbResult(None, outputs.written, "\n".join(lines + ([note] if note else [])), {"examples": listing})


__all__ = ["flow"]
