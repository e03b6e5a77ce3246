"""Independent reference solver (SPEC §1.1, §1.2), plain Python on token *strings*.

Written without reference to the generators: it only knows the chain rules.

- Number task: starting at the query (last token, an integer), an integer ``v`` at ``t`` moves to
  ``t - v``; stop on the first letter, which is the answer.
- Letter task: starting at the query (a (letter, letter) token), the right letter names the unique
  non-query token whose left letter equals it; continue through (letter, letter) tokens until a
  (letter, number) token is reached, which is the answer. Zero or several matches raise PosymError
  (this is how answer uniqueness is checked).

Hops = number of pointer moves; answer position is the 0-based index of the answer in ``tokens``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from posym.errors import PosymError

if TYPE_CHECKING:  # pragma: no cover
    from posym.tasks.dataset import TaskBatch

_LETTERS = "abcdefgh"


def _is_int_token(tok: str) -> bool:
    return tok.isdigit() and 1 <= int(tok) <= 16


def _is_number_letter(tok: str) -> bool:
    return tok.isalpha() and tok.islower() and 1 <= len(tok) <= 2


def _solve_number(tokens: Sequence[str]) -> tuple[str, int, int]:
    for tok in tokens:
        if not (_is_int_token(tok) or _is_number_letter(tok)):
            raise PosymError(f"number task: invalid token {tok!r}")
    pos = len(tokens) - 1
    if not _is_int_token(tokens[pos]):
        raise PosymError(f"number task: query {tokens[pos]!r} is not an integer")
    hops = 0
    while _is_int_token(tokens[pos]):
        nxt = pos - int(tokens[pos])
        if nxt < 0:
            raise PosymError(f"number task: token {tokens[pos]!r} at {pos} points before the sequence start")
        pos = nxt
        hops += 1
    return tokens[pos], hops, pos


def _kind(tok: str) -> str:
    if len(tok) == 2 and tok[0] in _LETTERS:
        if tok[1] in _LETTERS:
            return "ll"
        if tok[1] in "12345678":
            return "ln"
    raise PosymError(f"letter task: invalid token {tok!r}")


def _solve_letter(tokens: Sequence[str]) -> tuple[str, int, int]:
    kinds = [_kind(t) for t in tokens]
    q = len(tokens) - 1
    if kinds[q] != "ll":
        raise PosymError(f"letter task: query {tokens[q]!r} is not a (letter, letter) token")
    by_left: dict[str, list[int]] = {}
    for i in range(q):  # every token except the query
        by_left.setdefault(tokens[i][0], []).append(i)
    pos, hops = q, 0
    while kinds[pos] == "ll":
        want = tokens[pos][1]
        matches = by_left.get(want, [])
        if len(matches) != 1:
            raise PosymError(
                f"letter task: {len(matches)} tokens have left letter {want!r} (needed by {tokens[pos]!r} at {pos})")
        pos = matches[0]
        hops += 1
        if hops > q:
            raise PosymError("letter task: the chain has a cycle")
    return tokens[pos], hops, pos


def solve(task: str, tokens: Sequence[str]) -> tuple[str, int, int]:
    """Follow the chain of ``tokens`` (query last, no label): ``(label, hops, answer_pos)``."""
    if len(tokens) == 0:
        raise PosymError("cannot solve an empty sequence")
    if task == "number":
        return _solve_number(tokens)
    if task == "letter":
        return _solve_letter(tokens)
    raise PosymError(f"unknown task {task!r} (expected one of: number, letter)")


def solve_batch(batch: "TaskBatch") -> list[tuple[str, int, int]]:
    """:func:`solve` every row of a :class:`~posym.tasks.dataset.TaskBatch`."""
    table = batch.vocab.token_array()
    return [solve(batch.task, table[row].tolist()) for row in batch.input_ids]


def verify_batch(batch: "TaskBatch") -> int:
    """Check every row against the solver (label, hops, answer_pos); PosymError on the first mismatch.

    Returns the number of rows checked.
    """
    table = batch.vocab.token_array()
    for r, got in enumerate(solve_batch(batch)):
        want = (str(table[batch.labels[r]]), int(batch.hops[r]), int(batch.answer_pos[r]))
        if got != want:
            raise PosymError(f"row {r} (index {int(batch.index[r])}): solver gives {got}, batch says {want}")
    return len(batch)
