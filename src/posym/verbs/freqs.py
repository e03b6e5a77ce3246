"""``posym freqs``: RoPE frequency use, Table 1, Fig. 8 and Fig. 4B of one model (Paper A §4, SPEC §4)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd

from posym.errors import PosymError
from posym.heads.frequencies import (DEFAULT_GEOMETRY_PROMPTS, DEFAULT_N, WEIGHTINGS, frequency_scores, frequency_use,
                                     pick_geometry_head, qk_geometry, weighted_frequency_id)
from posym.interventions import check_interventions, intervened, plan_interventions
from posym.model.adapters import get_adapter
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.runs.resolve import StepChoice, resolve_model
from posym.runs.tables import with_intervention, with_step
from posym.verbs import Outputs, VerbResult, figure_paths


def freqs(path: str | os.PathLike, *, task: str | None = None, n: int = DEFAULT_N, out: str | os.PathLike | None = None,
          layer_geometry: int | None = None, step: StepChoice = None, seed: int = 0, split: str = "test",
          scores: bool = True, geometry_prompts: int = DEFAULT_GEOMETRY_PROMPTS, batch_size: int = 64,
          weighting: str = "max_abs", force: bool = False, progress: bool = True,
          intervene: Sequence[str] | None = None, layers: Sequence[int] | None = None) -> VerbResult:
    """Frequency analysis of the model a run stands for (or ``step``), a checkpoint, an HF Trainer
    output or a model folder of any RoPE family posym reads (GPT-J, Llama, Qwen3, Gemma-3, GPT-NeoX,
    ...; docs/models.md; ``task`` is required where the folder does not name one), on the first ``n``
    prompts of ``split``.

    Frequencies are the model's own (SPEC §4, :mod:`posym.heads.frequencies`): pair ``k`` in its pair
    convention (GPT-J interleaved, Llama-style rotate-half), partial rotary's non-rotary dims as one
    extra term, q/k read after any q/k norm, GQA key heads, and each layer's own angles (Gemma-3's
    sliding and full layers have different bases: the ``angle`` columns are per layer). Nothing here
    uses :mod:`posym.theory.restricted` (the GPT-J-table frequency restriction of the toys); masking
    frequencies of a model of another family is ``intervene=["freq-mask:keep=..."]``.

    Every table has a first column ``step`` (the analysed checkpoint's). Writes under ``out`` (default:
    ``path``): ``freq_use.csv`` (per layer, head, frequency),
    ``freq_table.csv`` (Table 1), ``freq_scores.csv`` (per-frequency s_POS/s_SYM, τ = 1e-4; skipped
    with ``scores=False``), ``qk_geometry_L{l}.csv`` and the figures ``figures/freq_use`` and
    ``figures/qk_geometry_L{l}`` (geometry on the first ``geometry_prompts`` prompts, layer
    ``layer_geometry`` or the one with the smallest weighted ID, in its dominant plane).

    ``intervene``: canonical intervention strings (docs/interventions.md), one analysis each, in
    order (``layers`` for temperature / freq-mask); every table gets an ``intervention`` column and
    holds the rows of all of them; the figures and the geometry head are the first one's. The
    ``angle`` column stays the model's own θ_k (a base change or interpolation moves the rotation the
    terms are computed with, not the label).
    """
    from tqdm.auto import tqdm

    from posym.report.freq_figures import plot_freq_use, plot_qk_geometry
    from posym.tasks import make_split

    if weighting not in WEIGHTINGS:
        raise PosymError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if isinstance(geometry_prompts, bool) or int(geometry_prompts) < 1:
        raise PosymError(f"geometry_prompts must be a positive integer, got {geometry_prompts!r}")
    specs = plan_interventions(intervene, layers)
    rm = resolve_model(path, task=task, step=step)
    model, task = rm.model, rm.task
    ad = get_adapter(model)
    if layer_geometry is not None:
        ad.check_layers([layer_geometry])
    labels = check_interventions(model, specs)
    out_dir = Path(out) if out is not None else Path(path)
    files = [out_dir / layout.FREQ_USE, out_dir / layout.FREQ_TABLE, *figure_paths(layout.figure(out_dir, layout.FIG_FREQ_USE))]
    if scores:
        files.append(out_dir / layout.FREQ_SCORES)
    outputs = Outputs(files, force).check()
    batch = make_split(task, split, seed=seed, n=n)
    bar = tqdm(total=(3 if scores else 2) * len(specs), desc="frequency analysis", disable=not progress)
    uses, tables, fss = [], [], []
    for spec, text in zip(specs, labels):
        with intervened(model, spec):
            use = frequency_use(ad, batch.input_ids, batch_size=batch_size, weighting=weighting)
            bar.update(1)
            fs = (frequency_scores(ad, batch.input_ids, batch_size=max(1, batch_size // 2)) if scores else None)
            bar.update(1 if scores else 0)
        uses.append(with_intervention(with_step(use, rm.step), text))
        tables.append(with_intervention(with_step(weighted_frequency_id(use), rm.step), text))
        if fs is not None:
            fss.append(with_intervention(with_step(fs, rm.step), text))
    use, table = uses[0], tables[0]  # the figures and the geometry head: the first intervention's
    layer, head = pick_geometry_head(table, layer_geometry)  # may refuse (no rotary use): before any file
    dom = table.loc[(table["layer"] == layer) & (table["head"] == head), "dominant_id"].iloc[0]
    geo = layout.qk_geometry_stem(layer)
    geo_outputs = Outputs([out_dir / f"{geo}.csv", *figure_paths(layout.figure(out_dir, geo))], force).check()
    pts_all = []
    for spec, text in zip(specs, labels):
        with intervened(model, spec):
            pts = qk_geometry(ad, batch.input_ids[: int(geometry_prompts)], layer, head,
                              freq_id=int(dom) if dom > 0 else None, task=task)
        pts_all.append(with_intervention(with_step(pts, rm.step), text))
        bar.update(1)
    bar.close()
    # every table computed and every refusal passed: only now the files
    outputs.csv(pd.concat(uses, ignore_index=True), out_dir / layout.FREQ_USE)
    outputs.csv(pd.concat(tables, ignore_index=True), out_dir / layout.FREQ_TABLE)
    if scores:
        outputs.csv(pd.concat(fss, ignore_index=True), out_dir / layout.FREQ_SCORES)
    label = f"{rm.path.parent.parent.name if rm.path.parent.name == layout.CHECKPOINTS else rm.path.name}"
    label += f" ({task}" + (f", step {rm.step}" if rm.step is not None else "")
    label += (f", {labels[0]})" if specs[0] is not None else ")")
    outputs.figure(plot_freq_use(use, title=f"frequency use — {label}"), layout.figure(out_dir, layout.FIG_FREQ_USE))
    geo_outputs.csv(pd.concat(pts_all, ignore_index=True), out_dir / f"{geo}.csv")
    geo_outputs.figure(plot_qk_geometry(pts_all[0]), layout.figure(out_dir, geo))
    outputs.written += geo_outputs.written
    table.attrs.update(task=task, step=rm.step, checkpoint=str(rm.path), geometry_layer=layer, geometry_head=head,
                       files=[str(p) for p in outputs.written])
    if len(specs) > 1:
        table = pd.concat(tables, ignore_index=True)
        table.attrs.update(tables[0].attrs)
    pairs = f"{ad.rotary_dim // 2} frequency pairs ({ad.pair_convention}) on {ad.rotary_dim} of {ad.head_dim} head dims"
    text = (table.round(2).to_string(index=False) + f"\n{ad.family}: {pairs}, ID 1 = fastest"
            f"\nq/k geometry: layer {layer}, head {head}; wrote {len(outputs.written)} files under {out_dir}")
    note = in_progress_note(path, rm.step)
    text += f"\n{note}" if note else ""
    return VerbResult(table, outputs.written, text, {"geometry_layer": layer, "geometry_head": head})


__all__ = ["freqs"]
