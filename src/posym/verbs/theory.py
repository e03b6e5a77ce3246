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
                force: bool = False, progress: bool = True) -> VerbResult:
    """Write ``OUT/discrepancy.csv`` + Fig. 5A and, for each of ``runs``, Δ of every trained head's
    last-query logits vs added tokens (``OUT/trained_discrepancy.csv`` + figure)."""
    from posym.report.theory_figures import plot_discrepancy, plot_trained_discrepancy
    from posym.runs.resolve import resolve_model
    from posym.theory.discrepancy import check_parameters, discrepancy_table
    from posym.theory.trained import DEFAULT_GRID, trained_discrepancy

    out = Path(out)
    check_parameters(theta_index, theta_retrieval, alphabet, n_max)
    files = _files(out, layout.DISCREPANCY) + (_files(out, layout.TRAINED_DISCREPANCY) if runs else [])
    outputs = Outputs(files, force).check()
    models = [resolve_model(p, task=task) for p in runs]  # every path checked before the work
    table = discrepancy_table(theta_index, theta_retrieval, alphabet, n_max)
    outputs.csv(table, out / f"{layout.DISCREPANCY}.csv")
    outputs.figure(plot_discrepancy(table), out / layout.DISCREPANCY)
    at = table[table["n"].isin([8, 20, 40, 80, 100])]
    lines = [at.pivot(index="n", columns="mechanism", values="delta").round(4).to_string()]
    data = {"discrepancy": table}
    if runs:
        import pandas as pd

        frames = [trained_discrepancy(m.model, m.task, grid=list(grid or DEFAULT_GRID), n=n, seed=seed,
                                      progress=progress).assign(run=str(p)) for m, p in zip(models, runs)]
        trained = pd.concat(frames, ignore_index=True)
        outputs.csv(trained, out / f"{layout.TRAINED_DISCREPANCY}.csv")
        outputs.figure(plot_trained_discrepancy(trained), out / layout.TRAINED_DISCREPANCY)
        per_layer = trained.groupby(["task", "layer", "extra_tokens"])["delta_median"].median()
        lines += ["trained heads: median Δ of the last query per layer (rows) and added tokens (columns)",
                  per_layer.unstack("extra_tokens").round(4).to_string()]
        data["trained"] = trained
    lines.append(f"wrote {', '.join(str(p) for p in outputs.written if p.suffix == '.csv')}")
    return VerbResult(table, outputs.written, "\n".join(lines), data)


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


__all__ = ["discrepancy", "restricted"]
