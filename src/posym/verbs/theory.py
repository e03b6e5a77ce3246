"""``posym theory``: Δ(n) of the RoPE constructions (Paper A Fig. 5A, Theorem 3.2), Δ of trained
heads vs added tokens, and Paper B's frequency-restricted one-layer heads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from posym.runs import layout
from posym.verbs import Outputs, VerbResult, figure_paths


def _files(out: Path, name: str) -> list[Path]:
    return [out / f"{name}.csv", *figure_paths(out / name)]


def discrepancy(out: str | os.PathLike, *, theta_index: float = 0.8, theta_retrieval: float = 0.0027,
                alphabet: int = 8, n_max: int = 100, runs: Sequence[str | os.PathLike] = (),
                grid: Sequence[int] | None = None, n: int = 64, seed: int = 0, task: str | None = None,
                intervene: Sequence[str] = (), lengths: Sequence[int] | None = None,
                force: bool = False, progress: bool = True) -> VerbResult:
    """Write ``OUT/discrepancy.csv`` + Fig. 5A and, for each of ``runs``, Δ of every trained head's
    last-query logits vs added tokens (``OUT/trained_discrepancy.csv`` + figure). A run is a posym run
    or checkpoint, an HF Trainer output or a model folder of any RoPE family posym reads (GPT-J, Llama,
    Qwen3, Gemma-3, GPT-NeoX, ...; docs/models.md; ``task`` for a folder posym did not write): each
    head's logits come from the model's own rotary through its adapter, and every run is checked to
    take the grid's longest input before any work (:func:`posym.theory.trained.check_grid`). With ``intervene``
    (canonical intervention strings, docs/interventions.md): Δ(n) and the weight on the correct key of
    both constructions untouched (``none``) and under each, over ``lengths`` (default 17..5,017), β set
    at the training length 17 (``OUT/discrepancy_interventions.csv`` + figure; :mod:`posym.theory.intervened`);
    those constructions are the paper's one-head GPT-J (:func:`rope_frame`), never a ``runs`` model."""
    from posym.report.theory_figures import plot_discrepancy, plot_trained_discrepancy
    from posym.runs.resolve import resolve_model
    from posym.theory.discrepancy import check_parameters, discrepancy_table
    from posym.theory.trained import DEFAULT_GRID, check_grid, trained_discrepancy

    out = Path(out)
    check_parameters(theta_index, theta_retrieval, alphabet, n_max)
    if lengths is not None and not intervene:
        from posym.errors import PosymError

        raise PosymError("--lengths sets the lengths of --intervene; give an intervention, e.g. --intervene ntk:kappa=4")
    effects = intervention_effects(intervene) if intervene else None
    files = _files(out, layout.DISCREPANCY) + (_files(out, layout.TRAINED_DISCREPANCY) if runs else [])
    if effects is not None:
        from posym.interventions.registry import DEFAULT_N_TRAIN
        from posym.theory.intervened import DEFAULT_LENGTHS, check_frame, check_lengths

        lengths = check_lengths(DEFAULT_LENGTHS if lengths is None else lengths)
        check_frame(theta_index, theta_retrieval, alphabet, DEFAULT_N_TRAIN, *rope_frame())
        files += _files(out, layout.DISCREPANCY_INTERVENTIONS)
    outputs = Outputs(files, force).check()
    models = [resolve_model(p, task=task) for p in runs]  # every path checked before the work
    grid = list(grid or DEFAULT_GRID)
    for m in models:  # ... and every model's longest input
        check_grid(m.model, m.task, grid)
    # every table computed (and every refusal passed) before the first file is written
    table = discrepancy_table(theta_index, theta_retrieval, alphabet, n_max)
    at = table[table["n"].isin([8, 20, 40, 80, 100])]
    lines = [at.pivot(index="n", columns="mechanism", values="delta").round(4).to_string()]
    data = {"discrepancy": table}
    trained = under = None
    if runs:
        import pandas as pd

        frames = [trained_discrepancy(m.model, m.task, grid=grid, n=n, seed=seed,
                                      progress=progress).assign(run=str(p)) for m, p in zip(models, runs)]
        trained = pd.concat(frames, ignore_index=True)
        per_layer = trained.groupby(["task", "layer", "extra_tokens"])["delta_median"].median()
        lines += ["trained heads: median Δ of the last query per layer (rows) and added tokens (columns)",
                  per_layer.unstack("extra_tokens").round(4).to_string()]
        data["trained"] = trained
    if effects is not None:
        from posym.theory.intervened import intervened_table

        rotary_dim, base = rope_frame()
        under = intervened_table(effects, lengths, rotary_dim=rotary_dim, base=base, theta_index=theta_index,
                                 theta_retrieval=theta_retrieval, alphabet=alphabet, n0=DEFAULT_N_TRAIN,
                                 progress=progress)
        lines.append(_summary(under))
        lines.append(f"(constructions in the paper's GPT-J frame: rotary dim {rotary_dim}, base {base:g}"
                     + ("; not the --run models' rotary)" if runs else ")"))
        data["interventions"] = under
    outputs.csv(table, out / f"{layout.DISCREPANCY}.csv")
    outputs.figure(plot_discrepancy(table), out / layout.DISCREPANCY)
    if trained is not None:
        outputs.csv(trained, out / f"{layout.TRAINED_DISCREPANCY}.csv")
        outputs.figure(plot_trained_discrepancy(trained), out / layout.TRAINED_DISCREPANCY)
    if under is not None:
        from posym.report.theory_figures import plot_intervened

        outputs.csv(under, out / f"{layout.DISCREPANCY_INTERVENTIONS}.csv")
        outputs.figure(plot_intervened(under), out / layout.DISCREPANCY_INTERVENTIONS)
    lines.append(f"wrote {', '.join(str(p) for p in outputs.written if p.suffix == '.csv')}")
    return VerbResult(table, outputs.written, "\n".join(lines), data)


def _summary(table, at: Sequence[int] = (17, 117, 1017, 5017)) -> str:
    """Δ and the weight on the correct key at the lengths ``at`` (those in the table), one row per
    (intervention, mechanism): the text ``posym theory discrepancy --intervene`` prints."""
    import pandas as pd

    t = table[table["n"].isin(at)]
    wide = t.pivot_table(index=["intervention", "mechanism"], columns="n", values=["delta", "weight"], sort=False)
    wide.columns = [f"{'Δ' if v == 'delta' else 'w'}@{n}" for v, n in wide.columns]
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.3g}".format):
        return "theory under interventions: worst-case Δ and weight on the correct key at n\n" + wide.to_string()


def rope_frame() -> tuple[int, float]:
    """``(rotary dim, base)`` the constructions' angles are read in: the paper preset's GPT-J (SPEC §2).

    The frame of the theory's one-head constructions only (their θ's frequency ID, a base change's
    new angles): it is not read from, and does not describe, a ``--run`` model of any family, whose
    Δ comes from its own rotary (:mod:`posym.theory.trained`)."""
    from posym.interventions.rope import GPTJ_BASE
    from posym.model.gptj import PRESETS

    return int(PRESETS["paper"]["rotary_dim"]), float(GPTJ_BASE)


def intervention_effects(specs: Sequence[str]) -> dict:
    """Canonical string -> :class:`posym.theory.intervened.Effect` for ``none`` and each of ``specs``
    (parsed by :func:`posym.interventions.spec.parse_intervention`; every one checked before any work;
    each intervention's effect is its :meth:`~posym.interventions.registry.Intervention.theory_effect`).
    The constructions are one head: a ``layers=`` restriction is refused; frequency IDs are those of
    the paper preset's rotary dim at GPT-J's base (:func:`rope_frame`)."""
    from posym.errors import PosymError
    from posym.interventions.spec import NONE, describe, parse_intervention
    from posym.theory.intervened import Effect

    rotary_dim, base = rope_frame()
    effects = {NONE: Effect()}
    seen: set[str] = set()
    for text in specs:
        iv = parse_intervention(text)
        key = describe(iv)
        if key in seen:
            raise PosymError(f"{text!r} repeats {key!r}; give each intervention once")
        seen.add(key)
        if iv is None:  # "none": the untouched row is always there
            continue
        if getattr(iv, "layers", None) is not None:
            raise PosymError(f"{text!r}: the theory's constructions are one head; drop layers=")
        effect = iv.theory_effect(base, rotary_dim)
        if effect is None:
            raise PosymError(f"{text!r}: the theory has no prediction for {iv.name} yet")
        effects[key] = Effect(**effect)
    return effects


def restricted(out: str | os.PathLike, *, steps: int = 1500, seed: int = 0, force: bool = False,
               progress: bool = True, **config) -> VerbResult:
    """Train every (task, band, mode) frequency-restricted toy; write ``OUT/restricted.csv`` + figure."""
    from posym.report.theory_figures import plot_restricted
    from posym.theory.restricted import restricted_table

    out = Path(out)
    outputs = Outputs(_files(out, layout.RESTRICTED), force).check()
    table = restricted_table(steps=steps, seed=seed, progress=progress, **config)
    outputs.csv(table, out / f"{layout.RESTRICTED}.csv")
    outputs.figure(plot_restricted(table), out / layout.RESTRICTED)
    text = table.groupby(["task", "band", "mode"])["acc"].mean().round(3).to_string()
    return VerbResult(table, outputs.written, text + f"\nwrote {out / (layout.RESTRICTED + '.csv')}")


__all__ = ["discrepancy", "intervention_effects", "restricted", "rope_frame"]
