"""``posym export lm-eval``: the 1-hop LLM prompts as an lm-evaluation-harness task pack (SPEC §1.5)."""

from __future__ import annotations

import os
from typing import Sequence

from posym.constants import TASKS
from posym.verbs import Outputs, VerbResult

#: the grid of ``posym llm eval`` (SPEC §1.5): 5 runs of 40 samples per (task, length)
DEFAULT_RUNS, DEFAULT_N = 5, 40


def export_lm_eval(out: str | os.PathLike, *, tasks: Sequence[str] = TASKS, lengths: Sequence[int] | None = None,
                   runs: int = DEFAULT_RUNS, n: int = DEFAULT_N, n_examples: int = 3, force: bool = False) -> VerbResult:
    """Write the task pack of :mod:`posym.tasks.lm_eval_pack` under ``out``: ``lengths`` (default SPEC §1.5's
    grid) × ``tasks``, runs ``0..runs-1`` × ``n`` samples each, both protocols, plain and chat prompts. Every
    file is checked before any is written; existing ones are refused without ``force``."""
    from posym.tasks.lm_eval_pack import check_grid, group_name, pack_files, write_lm_eval_pack
    from posym.tasks.prompts import DEFAULT_LENGTHS

    tasks, lengths = list(tasks), list(DEFAULT_LENGTHS if lengths is None else lengths)
    check_grid(tasks, lengths, runs, n, n_examples)
    Outputs(pack_files(out, tasks, lengths), force).check()
    files = write_lm_eval_pack(out, tasks=tasks, lengths=lengths, runs=runs, n=n, n_examples=n_examples)
    groups = ", ".join(group_name(t, v) for t in tasks for v in ("", "_gen"))
    return VerbResult(None, files, f"wrote {len(files)} files to {out}: groups {groups} (and *_chat, *_chat_gen for "
                      f"--apply_chat_template --fewshot_as_multiturn); run: lm_eval --model hf --model_args "
                      f"pretrained=MODEL --include_path {out} --tasks {group_name(tasks[0])}")


__all__ = ["export_lm_eval"]
