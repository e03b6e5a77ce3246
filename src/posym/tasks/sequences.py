"""A researcher's own sequences for the head scores (SPEC §3): token-id files and text files.

* :func:`read_id_sequences` — one sequence of token ids per line: a JSON list (``[1, 5, 7]``), a
  JSON object with an ``input_ids`` list (``posym data export --ids``), or whitespace-separated
  integers (``1 5 7``); blank lines are skipped.
* :func:`read_text_lines` — one text per line (blank lines skipped; the line break is not part of
  the text); :func:`tokenize_texts` turns them into ids with the model's own tokenizer, special
  tokens as the tokenizer adds them (e.g. a start token).
* :func:`check_sequences` — every id in the model's vocabulary and every sequence long enough for a
  swap (3 tokens: two swappable keys and the query, plus the keys `--swap-exclude` keeps out), the offending line named.
* :func:`group_by_length` — sequences of one length are scored as one batch (the query is each
  sequence's last token; no padding is ever scored).

NumPy and the standard library only; a tokenizer is an argument, never a model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from posym.errors import PosymError

#: The shortest sequence the scores can read: two swappable keys and the query (SPEC §3).
MIN_TOKENS = 3


def _lines(path: str | os.PathLike) -> list[tuple[int, str]]:
    """``(line number, line without its line break)`` of every non-blank line of a UTF-8 text file."""
    path = Path(path)
    if not path.is_file():
        raise PosymError(f"{path} does not exist" if not path.exists() else f"{path} is not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PosymError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    out = [(i, line.rstrip("\r")) for i, line in enumerate(text.split("\n"), 1) if line.strip()]
    if not out:
        raise PosymError(f"{path} holds no sequence (one per line)")
    return out


def _int_ids(values: Any, where: str) -> tuple[int, ...]:
    if (not isinstance(values, list) or not values
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)):
        raise PosymError(f"{where}: expected a non-empty list of integer token ids")
    return tuple(values)


def read_id_sequences(path: str | os.PathLike) -> list[tuple[int, ...]]:
    """Token-id sequences of ``path``, one per non-blank line (module doc for the three line forms).
    PosymError naming the line for anything else."""
    seqs = []
    for lineno, line in _lines(path):
        where = f"{path}:{lineno}"
        s = line.strip()
        if s[0] in "[{":
            try:
                rec = json.loads(s)
            except json.JSONDecodeError as exc:
                raise PosymError(f"{where}: invalid JSON ({exc.msg})") from None
            if isinstance(rec, dict):
                if "input_ids" not in rec:
                    raise PosymError(f"{where}: a JSON object needs an 'input_ids' list")
                rec = rec["input_ids"]
            seqs.append(_int_ids(rec, where))
        else:
            try:
                seqs.append(tuple(int(x) for x in s.split()))
            except ValueError:
                bad = next(x for x in s.split() if not x.lstrip("+-").isdigit())
                raise PosymError(f"{where}: {bad!r} is not a token id (integers separated by spaces, "
                                 "or a JSON list)") from None
    return seqs


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """The texts of ``path``: one per non-blank line, without the line break."""
    return [line for _, line in _lines(path)]


def tokenize_texts(tokenizer: Any, texts: Sequence[str]) -> list[tuple[int, ...]]:
    """Each text as the tokenizer encodes it (``tokenizer(text)["input_ids"]``: special tokens such as
    a start token as the tokenizer adds them)."""
    return [tuple(int(i) for i in tokenizer(t)["input_ids"]) for t in texts]


def check_sequences(seqs: Sequence[Sequence[int]], vocab_size: int | None, source: str = "the sequences",
                    min_tokens: int = MIN_TOKENS) -> None:
    """PosymError (one line, naming the sequence's line among the non-blank lines of ``source``)
    unless every sequence has at least ``min_tokens`` tokens and every id lies in ``[0, vocab_size)``
    (``vocab_size=None``: not checked)."""
    if not seqs:
        raise PosymError(f"{source} holds no sequence")
    for k, s in enumerate(seqs, 1):
        if len(s) < min_tokens:
            kept = min_tokens - MIN_TOKENS
            raise PosymError(f"{source}: sequence {k} has {len(s)} token(s); the scores need at least "
                             f"{min_tokens} (two swappable keys and the query"
                             + (f", and the {kept} key(s) --swap-exclude keeps out of the swaps)" if kept > 0 else ")"))
        if vocab_size is not None:
            bad = [i for i in s if not 0 <= i < vocab_size]
            if bad:
                raise PosymError(f"{source}: sequence {k} holds token id {bad[0]}, outside the model's vocabulary "
                                 f"of {vocab_size} ids (0..{vocab_size - 1}); give ids of the model's own tokenizer")


def group_by_length(seqs: Sequence[Sequence[int]]) -> dict[int, list[int]]:
    """Indices of the sequences of each length, lengths in increasing order, indices in file order."""
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        groups.setdefault(len(s), []).append(i)
    return dict(sorted(groups.items()))


__all__ = ["MIN_TOKENS", "check_sequences", "group_by_length", "read_id_sequences", "read_text_lines",
           "tokenize_texts"]
