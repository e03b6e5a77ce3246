"""``posym dynamics``: pure positional/symbolic heads over training and Fig. 2 (Paper A Fig. 2, SPEC §3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from posym.errors import PosymError
from posym.heads.dynamics import load_scores, normalized_entropy, pure_counts, purity_table, select_tau
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.verbs import Outputs, VerbResult, figure_paths


def dynamics(run: str | os.PathLike, *, gammas: Sequence[float] = (0.1,), tau: float | None = None,
             layers: Sequence[int] | None = None, out: str | os.PathLike | None = None,
             force: bool = False) -> VerbResult:
    """For each γ: the purity table (``purity_gamma{γ}.csv``), pure-head counts per step
    (``pure_counts_gamma{γ}.csv``) and Fig. 2 (``figures/fig2_gamma{γ}``), in ``out`` (default: the run).

    ``layers`` picks the layers drawn in panel B (default: up to six spread over the model).
    ``table`` is the purity table of the first γ; ``data["purity"]`` maps every γ to its table.
    """
    from posym.report.figures import plot_fig2

    run = Path(run)
    gammas = [float(g) for g in gammas]
    bad = [g for g in gammas if not 0 < g < 0.5]
    if not gammas or bad:
        raise PosymError(f"gamma must lie in (0, 0.5), got {bad or gammas}")
    out_dir = Path(out) if out else run
    files = []
    for g in gammas:
        files += [out_dir / layout.purity(g), out_dir / layout.pure_counts(g),
                  *figure_paths(layout.figure(out_dir, layout.fig2(g)))]
    scores = select_tau(load_scores(run), tau)
    n_layers = int(scores["layer"].max()) + 1
    if layers is None:
        layers = sorted(set(np.linspace(0, n_layers - 1, min(6, n_layers)).round().astype(int).tolist()))
    bad_layers = [lay for lay in layers if not 0 <= lay < n_layers]
    if bad_layers:
        raise PosymError(f"layer(s) {bad_layers} out of range 0..{n_layers - 1}")
    outputs = Outputs(files, force).check()
    metrics_path = run / layout.METRICS
    metrics = pd.read_csv(metrics_path) if metrics_path.is_file() else pd.DataFrame(columns=["split", "step", "acc"])
    if "entropy" in scores:
        scores = scores.assign(entropy_norm=normalized_entropy(scores))
    tables, lines = {}, []
    for g in gammas:
        purity = purity_table(scores, gamma=g)
        counts = pure_counts(purity, np.sort(scores["step"].unique()))
        outputs.csv(purity, out_dir / layout.purity(g))
        outputs.csv(counts, out_dir / layout.pure_counts(g))
        fig = plot_fig2(metrics, scores, counts, list(layers),
                        entropy=scores["entropy_norm"] if "entropy_norm" in scores else None,
                        title=f"{run.name} (γ={g:g})")
        outputs.figure(fig, layout.figure(out_dir, layout.fig2(g)))
        tables[g] = purity
        lines += [f"gamma={g:g}:", purity.to_string(index=False)]
    note = in_progress_note(run, int(scores["step"].max()))
    return VerbResult(tables[gammas[0]], outputs.written, "\n".join(lines + ([note] if note else [])),
                      {"purity": tables})


__all__ = ["dynamics"]
