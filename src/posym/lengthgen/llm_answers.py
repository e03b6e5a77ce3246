"""The answer cache of the LLM length-generalisation protocol (SPEC §1.5): ``answers.jsonl``, one record
per answered sample, keyed by ``(protocol, intervention, model, task, length, run, index, prompt
digest)``. :mod:`posym.lengthgen.llm_eval` describes the file; this module reads it (skipping a torn
line, dropping repeats), appends to it, and builds a record from a reply."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from posym.errors import PosymError
from posym.files import write_text_atomic
from posym.runs.tables import INTERVENTION, NO_INTERVENTION
from posym.tasks.prompts import PromptSample, candidates, is_correct, parse_answer


def answer_key(protocol: str, intervention: str, model: str, task: str, length: int, run: int, index: int,
               digest: str) -> tuple:
    """The cache key of one sample: ``(protocol, intervention, model, task, length, run, index, digest)``."""
    return (protocol, intervention, model, task, int(length), int(run), int(index), digest)


def record_key(r: dict) -> tuple:
    """The :func:`answer_key` of a cache record."""
    # records written before the choice protocol existed carry no protocol: they are generate answers;
    # records written before interventions existed carry none: they are answers of the untouched model
    return answer_key(r.get("protocol", "generate"), r.get(INTERVENTION, NO_INTERVENTION), r["model"], r["task"],
                      r["length"], r["run"], r["index"], r["digest"])


def load_cache(path: str | os.PathLike) -> dict[tuple, dict]:
    """Records of an ``answers.jsonl`` keyed by ``(protocol, intervention, model, task, length, run,
    index, digest)``.

    Lines that do not parse (a line torn by an interrupted write) are skipped. A sample answered twice
    (two writers of one folder before it was locked) keeps its first record when the two agree (they
    may differ in ``seconds`` only); two different answers to one sample are a PosymError naming both
    lines (which one counts cannot be told).
    """
    return read_cache(Path(path))[0]


def read_cache(p: Path) -> tuple[dict[tuple, dict], list[int]]:
    """:func:`load_cache` and the (0-based) numbers of the lines it dropped as repeats."""
    out: dict[tuple, dict] = {}
    line_of: dict[tuple, int] = {}
    repeats: list[int] = []
    if not p.is_file():
        return out, repeats
    with p.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
                key = record_key(r)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                continue
            if key in out:
                first = out[key]
                if {k: v for k, v in first.items() if k != "seconds"} != {k: v for k, v in r.items() if k != "seconds"}:
                    raise PosymError(f"{p} lines {line_of[key] + 1} and {i + 1} answer one sample ({key[3]}, length "
                                     f"{key[4]}, run {key[5]}, index {key[6]}, intervention {key[1]}) differently; "
                                     "remove the line that should not count")
                repeats.append(i)
                continue
            out[key], line_of[key] = r, i
    return out, repeats


def drop_lines(p: Path, lines: Sequence[int]) -> None:
    """Rewrite ``p`` (atomically) without the given 0-based lines (the repeats :func:`read_cache` found)."""
    drop = set(lines)
    kept = [x for i, x in enumerate(p.read_text(encoding="utf-8").splitlines(keepends=True)) if i not in drop]
    write_text_atomic(p, "".join(kept), mkdir=False)


class CacheWriter:
    """Appends records to ``answers.jsonl``, one JSON line each, flushed per call (a torn last line of an
    interrupted writer is ended first, so it never glues onto the next record)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # a torn last line (no trailing newline) must not glue onto the next record
        if path.is_file() and path.stat().st_size > 0:
            with path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
        else:
            torn = False
        self.f = path.open("a", encoding="utf-8")
        if torn:
            self.f.write("\n")

    def write(self, records: Iterable[dict]) -> None:
        for r in records:
            self.f.write(json.dumps(r, ensure_ascii=False) + "\n")
        self.f.flush()

    def close(self) -> None:
        self.f.close()


def answer_record(protocol: str, model: str, digest: str, sample: PromptSample, out: Any, seconds: float,
                  intervention: str = NO_INTERVENTION) -> dict:
    """The cache record of one answered sample: ``out`` is the raw reply (generate) or the
    log-probs of :func:`~posym.tasks.prompts.candidates` (choice; the first maximum is the prediction)."""
    rec: dict[str, Any] = {"protocol": protocol, INTERVENTION: intervention, "model": model, "task": sample.task,
                           "length": sample.length,
                           "run": sample.run, "index": sample.index, "digest": digest,
                           "answer": sample.answer, "answer_pos": sample.answer_pos}
    if protocol == "choice":
        cands = candidates(sample)
        if len(out) != len(cands):
            raise PosymError(f"scorer returned {len(out)} log-probs for {len(cands)} candidates")
        best = max(range(len(cands)), key=lambda i: (out[i], -i))
        target = out[cands.index(sample.answer)]
        rec.update(prediction=cands[best], correct=cands[best] == sample.answer, chance=1.0 / len(cands),
                   n_candidates=len(cands), target_logprob=round(float(target), 5),
                   target_rank=1 + sum(float(x) > target for x in out),
                   logprobs={c: round(float(x), 5) for c, x in zip(cands, out)})
    else:
        pred = parse_answer(out)
        rec.update(output=out, prediction=pred, correct=is_correct(pred, sample.answer))
    rec["seconds"] = seconds
    return rec


__all__ = ["CacheWriter", "answer_key", "answer_record", "drop_lines", "load_cache", "read_cache", "record_key"]
