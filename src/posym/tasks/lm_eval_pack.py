"""The 1-hop LLM prompts (SPEC §1.5) as an EleutherAI lm-evaluation-harness task pack (docs/llm.md).

:func:`write_lm_eval_pack` writes, for each task and target-window length of the grid, the samples
``posym llm eval`` asks (:func:`posym.tasks.prompts.make_sample`, runs ``0..runs-1`` × ``n``) as one
JSONL file and four task YAMLs, plus one group YAML per (task, variant) over the lengths:

* ``posym_<task>_1hop_L<len>`` — **log-likelihood multiple choice** (``output_type: multiple_choice``):
  the prompt rendered as posym renders it for a model without a chat template
  (:func:`~posym.tasks.prompts.render_plain`), the choices the distinct window tokens in order of first
  occurrence (:func:`~posym.tasks.prompts.candidates`), each scored as ``" " + token`` after ``Output:``.
  lm-eval's ``acc`` (argmax of the summed log-likelihood, first maximum) is posym's ``--protocol
  choice`` rule; ``acc_norm`` (divided by the choice's length in bytes) is not.
* ``posym_<task>_1hop_gen_L<len>`` — **greedy generation** (``generate_until``, ``max_gen_toks`` 8,
  stopped only at the end-of-sequence token): the reply's first word
  (:func:`~posym.tasks.prompts.parse_answer`) against the target (:func:`~posym.tasks.prompts.is_correct`)
  by ``posym_lm_eval.py`` beside the YAMLs, which imports posym.
* ``posym_<task>_1hop_chat_L<len>`` / ``…_chat_gen_L<len>`` — the same two for chat models, run with
  ``--apply_chat_template --fewshot_as_multiturn``: the instructions as the system turn (``description``),
  the worked examples as user/assistant turns (``fewshot_config`` with fixed ``samples``, ``first_n``),
  the sequence as the last user turn — :func:`~posym.tasks.prompts.build_messages` exactly.

The groups ``posym_<task>_1hop``, ``…_1hop_gen``, ``…_1hop_chat``, ``…_1hop_chat_gen`` average their
lengths weighted by size. The data paths in the YAMLs are absolute (``dataset_path: json``, no hub):
export again after moving the folder. YAML is written as JSON values, which YAML reads as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

from posym.constants import TASKS
from posym.errors import PosymError
from posym.files import write_atomic
from posym.tasks.prompts import (
    DEFAULT_LENGTHS,
    INSTRUCTIONS,
    PROMPT_VERSION,
    build_messages,
    candidates,
    make_sample,
    render_plain,
    sample_chance_level,
    worked_examples,
)

#: the generate protocol's reply length (``posym llm eval --max-new-tokens`` default)
MAX_GEN_TOKS = 8
VARIANTS: tuple[str, ...] = ("", "_gen", "_chat", "_chat_gen")  # name suffixes of the four task kinds
UTILS_MODULE = "posym_lm_eval"
_UTILS_SOURCE = '''"""Scoring of posym's 1-hop generate tasks (written by `posym export lm-eval`; needs posym importable)."""

from posym.tasks.prompts import is_correct, parse_answer


def process_results(doc, results):
    """1.0 when the reply's first word (posym's parse) is the target token, as `posym llm eval` checks it."""
    return {"exact_match": float(is_correct(parse_answer(results[0]), doc["answer"]))}
'''


def group_name(task: str, variant: str = "") -> str:
    """The group over lengths, e.g. ``posym_letter_1hop`` or ``posym_letter_1hop_chat_gen``."""
    return f"posym_{task}_1hop{variant}"


def task_name(task: str, length: int, variant: str = "") -> str:
    """One length's task, e.g. ``posym_letter_1hop_L32``."""
    return f"{group_name(task, variant)}_L{int(length)}"


def doc_record(task: str, length: int, run: int, index: int, n_examples: int = 3) -> dict:
    """One JSONL document: the sample, its choices and both renderings of its prompt (SPEC §1.5)."""
    s = make_sample(task, length, run, index)
    cands = candidates(s)
    return {"task": task, "length": int(length), "run": int(run), "index": int(index),
            "sequence": s.sequence, "answer": s.answer, "choices": cands, "answer_index": cands.index(s.answer),
            "chance": sample_chance_level(s), "prompt": render_plain(build_messages(s, n_examples))}


def _yaml(cfg: dict, functions: dict[str, str] | None = None) -> str:
    lines = [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in cfg.items()]
    lines += [f"{k}: !function {v}" for k, v in (functions or {}).items()]
    return "\n".join(lines) + "\n"


def _task_yaml(task: str, length: int, variant: str, data: Path, chance: float, n_examples: int, n: int) -> str:
    chat, gen = "_chat" in variant, variant.endswith("_gen")
    cfg: dict = {"task": task_name(task, length, variant), "tag": ["posym"], "dataset_path": "json",
                 "dataset_kwargs": {"data_files": {"test": str(data)}}, "test_split": "test"}
    if chat:
        cfg.update(description=INSTRUCTIONS[task], doc_to_text="{{sequence}}", num_fewshot=n_examples,
                   fewshot_config={"sampler": "first_n", "samples": [{"sequence": q, "answer": a, "choices": [a], "answer_index": 0}
                                                                     for q, a in worked_examples(task, n_examples)]})
    else:
        cfg.update(doc_to_text="prompt", num_fewshot=0)
    functions = None
    if gen:
        cfg.update(output_type="generate_until", doc_to_target="answer",
                   generation_kwargs={"until": [], "max_gen_toks": MAX_GEN_TOKS, "do_sample": False},
                   metric_list=[{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}])
        functions = {"process_results": f"{UTILS_MODULE}.process_results"}
    else:
        cfg.update(output_type="multiple_choice", doc_to_choice="choices", doc_to_target="answer_index",
                   target_delimiter=" ", metric_list=[{"metric": "acc", "aggregation": "mean", "higher_is_better": True}])
    protocol = "greedy generation, first word vs target" if gen else "log-likelihood choice over the window tokens (acc)"
    cfg["metadata"] = {"version": 1.0, "posym_prompt_version": PROMPT_VERSION, "spec": "SPEC §1.5",
                       "protocol": protocol, "rendering": "chat template" if chat else "plain (Input:/Output:)",
                       "target_window": int(length), "n_docs": int(n), "n_examples": int(n_examples),
                       "chance": round(chance, 6),
                       "chance_note": "mean over the documents of 1 / number of distinct window tokens"}
    return _yaml(cfg, functions)


def _group_yaml(task: str, lengths: Sequence[int], variant: str) -> str:
    metric = "exact_match" if variant.endswith("_gen") else "acc"
    return _yaml({"group": group_name(task, variant), "task": [task_name(task, x, variant) for x in lengths],
                  "aggregate_metric_list": [{"metric": metric, "aggregation": "mean", "weight_by_size": True}],
                  "metadata": {"version": 1.0, "spec": "SPEC §1.5"}})


def pack_files(out: str | os.PathLike, tasks: Sequence[str], lengths: Sequence[int]) -> list[Path]:
    """Every file :func:`write_lm_eval_pack` writes under ``out`` (checked before any work)."""
    root = Path(out)
    files = [root / f"{UTILS_MODULE}.py", root / "README.md"]
    for task in tasks:
        files += [root / "data" / f"{task}_L{int(x)}.jsonl" for x in lengths]
        for v in VARIANTS:
            files += [root / f"{group_name(task, v)}.yaml"] + [root / f"{task_name(task, x, v)}.yaml" for x in lengths]
    return files


def check_grid(tasks: Sequence[str], lengths: Sequence[int], runs: int, n: int, n_examples: int) -> None:
    """One-line :class:`PosymError` for a grid the pack cannot hold."""
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise PosymError(f"unknown task(s) {bad or list(tasks)}; choose from {', '.join(TASKS)}")
    if not lengths or any(int(x) != x or x < 1 for x in lengths):
        raise PosymError(f"lengths must be positive integers, got {list(lengths)}")
    if int(runs) != runs or runs < 1 or int(n) != n or n < 1:
        raise PosymError(f"runs and n must be >= 1, got runs={runs}, n={n}")
    worked_examples(tasks[0], n_examples)  # its range check


def write_lm_eval_pack(out: str | os.PathLike, *, tasks: Sequence[str] = TASKS,
                       lengths: Sequence[int] = DEFAULT_LENGTHS, runs: int = 5, n: int = 40,
                       n_examples: int = 3) -> list[Path]:
    """Write the task pack (module docstring) under ``out``; returns the files written (SPEC §1.5).

    The documents of one length are runs ``0..runs-1`` × samples ``0..n-1``, the grid ``posym llm eval
    --runs R --n N`` asks, so the pooled ``acc`` equals the mean over runs of its table (equal ``n`` per run).
    Existing files are replaced: the caller checks them (``posym.verbs.Outputs``).
    """
    tasks, lengths = list(tasks), [int(x) for x in lengths]
    check_grid(tasks, lengths, runs, n, n_examples)
    root = Path(out).resolve()
    written: list[Path] = []

    def put(path: Path, text: str) -> None:
        write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        written.append(path)

    put(root / f"{UTILS_MODULE}.py", _UTILS_SOURCE)
    rows = []
    for task in tasks:
        for length in lengths:
            docs = [doc_record(task, length, r, i, n_examples) for r in range(int(runs)) for i in range(int(n))]
            data = root / "data" / f"{task}_L{length}.jsonl"
            put(data, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
            chance = sum(d["chance"] for d in docs) / len(docs)
            rows.append(f"| {task} | {length} | {len(docs)} | {chance:.4f} |")
            for v in VARIANTS:
                put(root / f"{task_name(task, length, v)}.yaml", _task_yaml(task, length, v, data, chance, n_examples, len(docs)))
        for v in VARIANTS:
            put(root / f"{group_name(task, v)}.yaml", _group_yaml(task, lengths, v))
    put(root / "README.md", _readme(tasks, lengths, runs, n, n_examples, rows))
    return written


def _readme(tasks: list[str], lengths: list[int], runs: int, n: int, n_examples: int, rows: list[str]) -> str:
    first = tasks[0]
    return f"""# posym 1-hop tasks for lm-evaluation-harness (SPEC §1.5)

Written by `posym export lm-eval` (prompt version {PROMPT_VERSION}): tasks {", ".join(tasks)}, target windows
{", ".join(map(str, lengths))}, runs 0..{runs - 1} × {n} samples per length, {n_examples} worked examples.

    lm_eval --model hf --model_args pretrained=MODEL --include_path THIS_FOLDER --tasks {group_name(first)}
    lm_eval ... --tasks {group_name(first, "_chat")} --apply_chat_template --fewshot_as_multiturn

| name | protocol | prompt | equals |
|---|---|---|---|
| `{group_name(first)}` (`_L<len>`) | log-likelihood choice over the window tokens (`acc`) | plain | \
`posym llm eval --protocol choice`, no chat template |
| `{group_name(first, "_gen")}` | greedy, {MAX_GEN_TOKS} tokens, first word vs target (`exact_match`) | plain | \
`posym llm eval` (generate) |
| `{group_name(first, "_chat")}` | as the first, chat template | chat | `posym llm eval --protocol choice` on a chat model |
| `{group_name(first, "_chat_gen")}` | as the second, chat template | chat | `posym llm eval` on a chat model |

`acc` (summed log-likelihood, first maximum) is posym's choice rule; `acc_norm` is not. The generate
tasks score with `{UTILS_MODULE}.py`, which imports posym. Data paths are absolute: export again after
moving this folder. Chance level (mean of 1 / distinct window tokens):

| task | length | documents | chance |
|---|---|---|---|
""" + "\n".join(rows) + "\n"


__all__ = ["MAX_GEN_TOKS", "VARIANTS", "check_grid", "doc_record", "group_name", "pack_files", "task_name",
           "write_lm_eval_pack"]
