"""``posym data``: task samples as JSONL, or printed decoded (SPEC §1)."""

from __future__ import annotations

import os

from posym.errors import PosymError
from posym.verbs import Outputs, VerbResult


def export(task: str, split: str, n: int, out: str | os.PathLike, *, seed: int = 0, extra_tokens: int = 0,
           ids: bool = False, force: bool = False) -> VerbResult:
    """Write the first ``n`` samples of ``split`` to ``out`` (JSONL, atomic; refused if it exists without
    ``force``). ``ids``: each record also holds the token ids, and the vocabulary (token -> id, ``<PAD>``
    = 0) is written beside it as ``<out stem>.vocab.json`` (:func:`posym.runs.layout.vocab_path`)."""
    from posym.runs import layout
    from posym.tasks import export_jsonl, vocab_json
    from posym.tasks.vocab import check_task

    check_task(task)
    if os.path.isdir(out):  # also "/" and "~", whose vocab.json name would be empty
        raise PosymError(f"{out} is a folder; give a file path (e.g. {os.path.join(out, 'samples.jsonl')})")
    vocab = layout.vocab_path(out)
    if ids:  # checked before anything is written (the JSONL itself by export_jsonl)
        Outputs([vocab], force).check()
    path = export_jsonl(task, split, n, out, seed=seed, extra_tokens=extra_tokens, force=force, ids=ids)
    files = [path]
    if ids:
        files.append(Outputs([vocab], force=True).json(vocab_json(task), vocab))
    return VerbResult(None, files, f"wrote {n} {task}/{split} samples to {path}"
                      + (f" (token ids; vocabulary in {vocab})" if ids else ""))


def show(task: str, split: str = "train", n: int = 5, *, seed: int = 0, extra_tokens: int = 0) -> VerbResult:
    """Decoded examples (target window | pre-target | query -> answer)."""
    from posym.tasks import format_examples, make_split

    batch = make_split(task, split, seed=seed, n=n, extra_tokens=extra_tokens)
    return VerbResult(None, [], format_examples(batch, k=n))


__all__ = ["export", "show"]
