"""``posym data``: task samples as JSONL, or printed decoded (SPEC §1)."""

from __future__ import annotations

import os

from posym.verbs import VerbResult


def export(task: str, split: str, n: int, out: str | os.PathLike, *, seed: int = 0, extra_tokens: int = 0,
           force: bool = False) -> VerbResult:
    """Write the first ``n`` samples of ``split`` to ``out`` (JSONL, atomic; refused if it exists without ``force``)."""
    from posym.tasks import export_jsonl

    path = export_jsonl(task, split, n, out, seed=seed, extra_tokens=extra_tokens, force=force)
    return VerbResult(None, [path], f"wrote {n} {task}/{split} samples to {path}")


def show(task: str, split: str = "train", n: int = 5, *, seed: int = 0, extra_tokens: int = 0) -> VerbResult:
    """Decoded examples (target window | pre-target | query -> answer)."""
    from posym.tasks import format_examples, make_split

    batch = make_split(task, split, seed=seed, n=n, extra_tokens=extra_tokens)
    return VerbResult(None, [], format_examples(batch, k=n))


__all__ = ["export", "show"]
