"""``posym dynamics``: pure positional/symbolic heads over training and Fig. 2 (Paper A Fig. 2, SPEC §3)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from posym.errors import PosymError
from posym.heads.dynamics import (accuracy_keys, load_scores, pure_counts, purity_table, select_tau,
                                  trainer_eval_history)
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.runs.tables import INTERVENTION, read_table, with_intervention
from posym.verbs import Outputs, VerbResult, figure_paths


def dynamics(run: str | os.PathLike, *, gammas: Sequence[float] = (0.1,), tau: float | None = None,
             layers: Sequence[int] | None = None, out: str | os.PathLike | None = None,
             force: bool = False) -> VerbResult:
    """For each γ: the purity table (``purity_gamma{γ}.csv``), pure-head counts per step
    (``pure_counts_gamma{γ}.csv``) and Fig. 2 (``figures/fig2_gamma{γ}``), in ``out`` (default: the run).

    Panel A is the run's ``metrics.csv`` (posym) or, for an HF ``Trainer`` output directory, the
    ``eval_*`` entries of its newest ``trainer_state.json``; with neither it is left out, with a note
    in the figure and the text. Panel B draws every head of ``layers`` (default: all layers).
    ``table`` is the purity table of the first γ; ``data["purity"]`` maps every γ to its table and
    ``data["accuracy_source"]`` names what panel A shows.
    """
    from posym.report.figures import NO_ACCURACY_NOTE, plot_fig2

    run = Path(run)
    gammas = [float(g) for g in gammas]
    bad = [g for g in gammas if not 0 < g < 0.5]
    if not gammas or bad:
        raise PosymError(f"gamma must lie in (0, 0.5), got {bad or gammas}")
    out_dir = Path(out) if out else run
    files = []
    for g in gammas:
        files += [out_dir / layout.purity(g), out_dir / layout.pure_counts_csv(g),
                  *figure_paths(layout.figure(out_dir, layout.fig2(g)))]
    scores = select_tau(load_scores(run), tau)
    if INTERVENTION in scores and scores[INTERVENTION].nunique() > 1:
        raise PosymError(f"the scores of {run} were measured under {scores[INTERVENTION].nunique()} interventions "
                         f"({', '.join(map(str, dict.fromkeys(scores[INTERVENTION])))}); Fig. 2 reads one: score "
                         "each intervention into its own table (posym scores --intervene ... --out)")
    iv = str(scores[INTERVENTION].iloc[0]) if INTERVENTION in scores and len(scores) else "none"
    n_layers = int(scores["layer"].max()) + 1
    bad_layers = [lay for lay in layers or () if not 0 <= lay < n_layers]
    if bad_layers:
        raise PosymError(f"layer(s) {bad_layers} out of range 0..{n_layers - 1}")
    metrics, history, source = _accuracy_source(run)
    outputs = Outputs(files, force).check()
    n_heads = scores.groupby(["layer", "head"]).ngroups
    lines = [f"panel A: {source}", f"panel B: s_POS, s_SYM and attention entropy H / ln n of each of {n_heads} "
             f"heads (τ = {float(scores['tau'].iloc[0]):g})"]
    tables = {}
    for g in gammas:
        purity = purity_table(scores, gamma=g)
        counts = pure_counts(purity, np.sort(scores["step"].unique()))
        if iv != "none":  # the tables say what they read; the aggregation keeps them apart from untouched ones
            purity, counts = with_intervention(purity, iv), with_intervention(counts, iv)
        outputs.csv(purity, out_dir / layout.purity(g))
        outputs.csv(counts, out_dir / layout.pure_counts_csv(g))
        fig = plot_fig2(metrics, scores, counts, None if layers is None else list(layers), eval_history=history,
                        title=f"{run.name} (γ = {g:g}, τ = {float(scores['tau'].iloc[0]):g}"
                              + (f", {iv})" if iv != "none" else ")"))
        outputs.figure(fig, layout.figure(out_dir, layout.fig2(g)))
        tables[g] = purity
        lines += [f"gamma={g:g}:", purity.to_string(index=False)]
    if iv != "none":
        lines.append(f"note: the scores were measured under the intervention {iv}; the purity tables carry it "
                     "in their intervention column (the reproduction's aggregation reads only untouched ones)")
    if source.startswith("left out"):
        lines.append(f"note: Fig. 2 panel A left out: {NO_ACCURACY_NOTE}")
    note = in_progress_note(run, int(scores["step"].max()))
    return VerbResult(tables[gammas[0]], outputs.written, "\n".join(lines + ([note] if note else [])),
                      {"purity": tables, "accuracy_source": source})


def _accuracy_source(run: Path) -> tuple[pd.DataFrame, pd.DataFrame | None, str]:
    """``(metrics, eval_history, description)`` for panel A: ``metrics.csv`` when the run has
    validation rows, else the HF ``Trainer``'s ``eval_*`` log entries, else neither."""
    metrics_path = run / layout.METRICS
    metrics = read_table(metrics_path) if metrics_path.is_file() else pd.DataFrame(columns=["split", "step", "acc"])
    missing = [c for c in ("split", "step", "acc") if c not in metrics]  # what panel A reads
    if missing:
        raise PosymError(f"{metrics_path} is not a valid {layout.METRICS} table: it lacks the column(s) "
                         f"{', '.join(missing)}; restore it, or move it away to draw Fig. 2 without panel A")
    if (metrics["split"] == "val").any():
        return metrics, None, f"validation accuracy per hop from {layout.METRICS}"
    state = layout.hf_trainer_state(run)
    if state is not None:
        try:
            log = json.loads(state.read_text()).get("log_history", [])
        except (OSError, json.JSONDecodeError, AttributeError) as e:
            raise PosymError(f"cannot read {state}: {e}; delete or repair it to draw Fig. 2") from None
        history = trainer_eval_history(log)
        if len(history):
            keys = ["eval_loss"] * ("eval_loss" in history) + accuracy_keys(history)
            return metrics, history, f"HF Trainer evaluation ({', '.join(keys) or 'eval_*'}) from {state}"
    return metrics, None, "left out (no accuracy over training)"


__all__ = ["dynamics"]
