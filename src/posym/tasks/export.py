"""JSONL export and human-readable display of task samples (SPEC §1).

One JSON object per line: ``{"task", "index", "tokens", "label", "hops", "answer_pos"}`` where
``tokens`` are the input token strings (query last, label not included), ``label`` the answer token
string, ``answer_pos`` its 0-based index in ``tokens`` and ``index`` the sample's global index in its
split stream. With ``ids=True`` each object also has ``input_ids`` and ``label_id``, the token ids of
``tokens`` and ``label`` in the task vocabulary (SPEC §1.1/§1.2; :func:`vocab_json` is that vocabulary,
token -> id, ``<PAD>`` = 0).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from posym.checks import check_int
from posym.errors import PosymError
from posym.files import write_atomic
from posym.tasks.dataset import SPLIT_SIZES, TaskBatch, generate, make_split, split_seed
from posym.tasks.vocab import check_task

_EXPORT_CHUNK = 50_000


def batch_records(batch: TaskBatch, ids: bool = False) -> list[dict[str, Any]]:
    """The JSONL records of a batch (see the module docstring); ``ids``: with the token ids too."""
    table = batch.vocab.token_array()
    toks = table[batch.input_ids].tolist()
    labels = table[batch.labels].tolist()
    recs = [
        {"task": batch.task, "index": int(i), "tokens": t, "label": lab, "hops": int(h), "answer_pos": int(p)}
        for i, t, lab, h, p in zip(batch.index, toks, labels, batch.hops, batch.answer_pos)
    ]
    if ids:
        for rec, row, lab in zip(recs, batch.input_ids.tolist(), batch.labels.tolist()):
            rec["input_ids"], rec["label_id"] = row, int(lab)
    return recs


def vocab_json(task: str) -> dict[str, int]:
    """The vocabulary of ``task`` as ``{token: id}`` in id order (``<PAD>`` = 0; SPEC §1.1/§1.2), the
    mapping of the ``input_ids`` / ``label_id`` of an export with ids."""
    from posym.tasks.vocab import get_vocab

    return {tok: i for i, tok in enumerate(get_vocab(task).tokens)}


def export_jsonl(task: str, split: str, n: int | None, path: str | os.PathLike[str], *, seed: int = 0,
                 extra_tokens: int = 0, force: bool = False, ids: bool = False, **layout: Any) -> Path:
    """Write the first ``n`` samples (``None``: all) of ``split`` to ``path`` as JSONL; returns the path.
    ``ids``: each record also holds the token ids (module docstring).

    Refuses (PosymError) a folder, and an existing file unless ``force=True``. The file is written
    to a temporary name and renamed, so an interrupted export leaves no partial file.
    """
    check_task(task)
    path = Path(path)
    if path.is_dir():
        raise PosymError(f"{path} is a folder; give a file path (e.g. {path / 'samples.jsonl'})")
    if path.exists() and not force:
        raise PosymError(f"{path} already exists (use force=True / --force to overwrite)")
    # validate task, split and layout before touching the file system
    make_split(task, split, seed, 0, extra_tokens=extra_tokens, **layout)
    size = SPLIT_SIZES[split] if n is None else check_int(n, "n")
    if size > SPLIT_SIZES[split]:
        raise PosymError(f"n={size} exceeds the {split} split size {SPLIT_SIZES[split]}")

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as fh:
            # generate in chunks (samples are per-index deterministic, so chunks match one big batch)
            for lo in range(0, size, _EXPORT_CHUNK):
                hi = min(size, lo + _EXPORT_CHUNK)
                batch = generate(task, hi - lo, split_seed(seed, split), extra_tokens=extra_tokens,
                                 start_index=lo, **layout)
                fh.writelines(json.dumps(rec, separators=(",", ":")) + "\n" for rec in batch_records(batch, ids))

    try:
        write_atomic(path, write)
    except OSError as exc:  # a full disk, a read-only folder: name the file (the write itself names none)
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    return path


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSONL file written by :func:`export_jsonl` (one JSON object per line); PosymError naming
    the line for anything else (broken JSON, a value that is not an object, bytes that are not UTF-8)."""
    path = Path(path)
    if not path.is_file():
        raise PosymError(f"{path} does not exist" if not path.exists() else f"{path} is not a file")
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise PosymError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None
                    if not isinstance(rec, dict):
                        raise PosymError(f"{path}:{lineno}: expected a JSON object, got {type(rec).__name__}")
                    out.append(rec)
    except UnicodeDecodeError as exc:
        raise PosymError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise PosymError(f"cannot read {path}: {exc.strerror or exc}") from None
    return out


def read_prompt_ids(path: str | os.PathLike[str], task: str) -> np.ndarray:
    """Token ids ``[P, n]`` of a JSONL prompt file (``posym data export`` format: each line an object
    with a ``tokens`` list of strings; all prompts of one length). PosymError naming the line otherwise."""
    from posym.tasks.vocab import get_vocab

    rows = read_jsonl(path)
    if not rows:
        raise PosymError(f"no prompts in {path}")
    vocab = get_vocab(task)
    ids = []
    for lineno, r in enumerate(rows, 1):
        toks = r.get("tokens")
        if not isinstance(toks, list) or not toks or not all(isinstance(t, str) for t in toks):
            raise PosymError(f"{path}: prompt {lineno} needs a non-empty 'tokens' list of strings")
        try:
            ids.append(vocab.encode(toks))
        except (KeyError, ValueError, PosymError) as exc:
            raise PosymError(f"{path}: prompt {lineno}: token not in the {task} vocabulary ({exc})") from None
    lengths = sorted({len(x) for x in ids})
    if len(lengths) != 1:
        raise PosymError(f"prompts in {path} have different lengths {lengths}; score one length at a time")
    return np.stack(ids)


def _segment(tokens: list[str], max_shown: int | None = None) -> str:
    if max_shown is not None and len(tokens) > max_shown:
        half = max_shown // 2
        return " ".join(tokens[:half]) + f" … ({len(tokens) - 2 * half} more) … " + " ".join(tokens[-half:])
    return " ".join(tokens)


def format_example(batch: TaskBatch, i: int, *, max_extra: int = 16) -> str:
    """One row as ``[extra |] target | pre-target | query -> label (h hops, answer at p)``."""
    toks = batch.tokens(i)
    E, T, P = batch.extra_tokens, batch.target_len, batch.pretarget_len
    parts = []
    if E:
        parts.append(_segment(toks[:E], max_extra))
    parts.append(_segment(toks[E:E + T]))
    if P:
        parts.append(_segment(toks[E + T:E + T + P]))
    parts.append(toks[-1])
    h = int(batch.hops[i])
    return (f"{' | '.join(parts)} -> {batch.label_token(i)} "
            f"({h} hop{'s' if h != 1 else ''}, answer at {int(batch.answer_pos[i])})")


def format_examples(batch: TaskBatch, k: int = 5) -> str:
    """The first ``k`` rows of ``batch``, one per line (for ``posym data show``)."""
    if k < 0:
        raise PosymError(f"k must be >= 0, got {k}")
    return "\n".join(format_example(batch, i) for i in range(min(k, len(batch))))
