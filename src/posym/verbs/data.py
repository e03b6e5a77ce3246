"""``posym data``: task samples as JSONL or a Hugging Face ``datasets`` folder, or printed decoded (SPEC §1)."""

from __future__ import annotations

import os
from typing import Sequence

from posym.errors import PosymError
from posym.verbs import Outputs, VerbResult

FORMATS: tuple[str, ...] = ("jsonl", "hf")


def export(task: str, split: str, n: int, out: str | os.PathLike, *, seed: int = 0, extra_tokens: int = 0,
           ids: bool = False, format: str = "jsonl", llm: bool = False, lengths: Sequence[int] | None = None,
           runs: int = 5, force: bool = False) -> VerbResult:
    """Write the first ``n`` samples of ``split`` to ``out`` (JSONL, atomic; refused if it exists without
    ``force``). ``ids``: each record also holds the token ids, and the vocabulary (token -> id, ``<PAD>``
    = 0) is written beside it as ``<out stem>.vocab.json`` (:func:`posym.runs.layout.vocab_path`).

    ``format="hf"``: ``out`` is a folder for ``datasets.load_dataset`` (:mod:`posym.tasks.hf_export`):
    every split, ``n`` samples each at most, ids included (``split`` must stay ``"train"``, the default);
    ``llm``: the 1-hop LLM prompts instead (SPEC §1.5), one split per length of ``lengths`` (default
    SPEC §1.5's), runs ``0..runs-1`` × ``n`` samples each."""
    if format not in FORMATS:
        raise PosymError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}")
    if format == "hf":
        return _export_hf(task, split, n, out, seed=seed, extra_tokens=extra_tokens, llm=llm, lengths=lengths,
                          runs=runs, force=force)
    if llm or lengths is not None:
        raise PosymError("--llm and --lengths go with --format hf (posym export lm-eval renders the LLM prompts)")
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


def _export_hf(task: str, split: str, n: int, out: str | os.PathLike, *, seed: int, extra_tokens: int, llm: bool,
               lengths: Sequence[int] | None, runs: int, force: bool) -> VerbResult:
    from posym.checks import check_int
    from posym.tasks import hf_export
    from posym.tasks.prompts import DEFAULT_LENGTHS
    from posym.tasks.vocab import check_task

    check_task(task)
    if split != "train":
        raise PosymError(f"--format hf writes every split (train, val, test); drop --split {split}")
    n = check_int(n, "n", lo=1)
    if os.path.exists(out) and not os.path.isdir(out):
        raise PosymError(f"{out} is a file; --format hf writes a folder")
    if llm:
        if extra_tokens:
            raise PosymError("--extra-tokens does not apply to the LLM prompts (--llm): their length is --lengths")
        lengths = list(DEFAULT_LENGTHS if lengths is None else lengths)
        from posym.tasks.lm_eval_pack import check_grid

        check_grid([task], lengths, runs, n, 0)
        Outputs(hf_export.prompt_files(out, lengths), force).check()
        files = hf_export.write_prompt_dataset(out, task, lengths, runs, n)
        what = f"the 1-hop {task} prompts ({len(lengths)} lengths × {runs} runs × {n})"
    else:
        if lengths is not None:
            raise PosymError("--lengths goes with --llm (the LLM prompts); the training task's length is --extra-tokens")
        Outputs(hf_export.task_files(out), force).check()
        files = hf_export.write_task_dataset(out, task, n, seed=seed, extra_tokens=extra_tokens)
        sizes = hf_export.split_sizes(n)
        what = f"{task} train/val/test ({sizes['train']:,}/{sizes['val']:,}/{sizes['test']:,} samples)"
    return VerbResult(None, files, f"wrote {what} as a datasets folder {out}: datasets.load_dataset({str(out)!r})")


def show(task: str, split: str = "train", n: int = 5, *, seed: int = 0, extra_tokens: int = 0) -> VerbResult:
    """Decoded examples (target window | pre-target | query -> answer)."""
    from posym.tasks import format_examples, make_split

    batch = make_split(task, split, seed=seed, n=n, extra_tokens=extra_tokens)
    return VerbResult(None, [], format_examples(batch, k=n))


__all__ = ["FORMATS", "export", "show"]
