"""``posym select``: a finished run seen with another final model (SPEC §2, the authors' best checkpoint)."""

from __future__ import annotations

import os

from posym.verbs import VerbResult


def select(run: str | os.PathLike, out: str | os.PathLike, *, final_model: str = "best", device: str = "cpu",
           force: bool = False, progress: bool = True, task: str | None = None,
           n_test: int | None = None) -> VerbResult:
    """:func:`posym.train.select.select_final_model`: write the derived run ``out`` (a posym run or an
    HF ``Trainer`` output_dir; ``task``, ``n_test`` for the latter)."""
    from posym.train.select import select_final_model

    res = select_final_model(run, out, final_model, device=device, force=force, progress=progress, task=task,
                             n_test=n_test)
    text = (f"{out}: {run} standing for its {res['final_model']} model (step {res['final_step']}); "
            f"test accuracy {res['test']['acc']:.4f}")
    return VerbResult(None, [], text, res)


__all__ = ["select"]
