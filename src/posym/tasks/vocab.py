"""Token vocabularies of the two tasks (SPEC §1.1, §1.2).

Number task (137 ids): ``<PAD>`` = 0, integers ``"1"``..``"16"`` = ids 1..16, then the 120 letters:
``"a"``..``"z"`` (ids 17..42) followed by the 94 bigrams ``"aa"``, ``"ab"``, … ``"dp"`` in
lexicographic order (ids 43..136).

Letter task (129 ids): ``<PAD>`` = 0, (letter, number) pairs ``"a1"``..``"h8"`` with
``id = 1 + 8 * letter_index + (number - 1)`` (ids 1..64), then (letter, letter) pairs ``"aa"``..``"hh"``
with ``id = 65 + 8 * left_index + right_index`` (ids 65..128).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from posym.constants import TASKS
from posym.errors import PosymError

PAD = "<PAD>"

# --- number task ---------------------------------------------------------------------------------
N_INTEGERS = 16  # integer tokens "1".."16" (ids 1..16)
INT_OFFSET = 0  # id of integer v is INT_OFFSET + v
N_NUMBER_LETTERS = 120  # 26 single letters + 94 bigrams
NUMBER_LETTER_OFFSET = 17  # id of letter k (0-based) is 17 + k


def _number_letters() -> list[str]:
    singles = list(string.ascii_lowercase)
    bigrams = [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase]
    letters = singles + bigrams[: N_NUMBER_LETTERS - len(singles)]
    assert letters[-1] == "dp" and len(letters) == N_NUMBER_LETTERS
    return letters


NUMBER_LETTERS: list[str] = _number_letters()

# --- letter task ---------------------------------------------------------------------------------
LETTER_ALPHABET: str = "abcdefgh"  # 8 letters
N_LETTERS = len(LETTER_ALPHABET)  # 8
N_NUMBERS = 8  # numbers 1..8 of the (letter, number) tokens
LN_OFFSET = 1  # id of (l, num) = 1 + 8 * l + (num - 1)
LL_OFFSET = 65  # id of (l, r) = 65 + 8 * l + r


@dataclass
class Vocab:
    """A task vocabulary: ``tokens[id]`` is the string of token ``id``; id 0 is ``<PAD>``."""

    name: str
    tokens: list[str]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)
    _array: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index = {tok: i for i, tok in enumerate(self.tokens)}
        self._array = np.asarray(self.tokens, dtype=object)
        if len(self._index) != len(self.tokens):
            raise PosymError(f"vocabulary {self.name!r} has duplicate tokens")

    @property
    def size(self) -> int:
        """Number of token ids (including ``<PAD>``)."""
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._index

    def id_of(self, token: str) -> int:
        """Token id of ``token``; PosymError if it is not in the vocabulary."""
        try:
            return self._index[token]
        except (KeyError, TypeError):
            raise PosymError(f"token {token!r} is not in the {self.name} vocabulary") from None

    def encode(self, tokens: Iterable[str]) -> np.ndarray:
        """Token strings -> ids, ``int64 [len(tokens)]``."""
        return np.asarray([self.id_of(t) for t in tokens], dtype=np.int64)

    def decode(self, ids: Iterable[int] | np.ndarray) -> list[str]:
        """Token ids -> token strings; PosymError on an id outside ``[0, size)``."""
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.size):
            bad = arr[(arr < 0) | (arr >= self.size)][0]
            raise PosymError(f"token id {int(bad)} is outside the {self.name} vocabulary (size {self.size})")
        return self.token_array()[arr].tolist()

    def token_array(self) -> np.ndarray:
        """The tokens as a numpy object array (for vectorised decoding)."""
        return self._array


def _build_number_vocab() -> Vocab:
    tokens = [PAD] + [str(v) for v in range(1, N_INTEGERS + 1)] + NUMBER_LETTERS
    return Vocab("number", tokens)


def _build_letter_vocab() -> Vocab:
    ln = [l + str(num) for l in LETTER_ALPHABET for num in range(1, N_NUMBERS + 1)]
    ll = [l + r for l in LETTER_ALPHABET for r in LETTER_ALPHABET]
    return Vocab("letter", [PAD] + ln + ll)


NUMBER_VOCAB: Vocab = _build_number_vocab()
LETTER_VOCAB: Vocab = _build_letter_vocab()
assert NUMBER_VOCAB.size == 137 and LETTER_VOCAB.size == 129


def check_task(task: str) -> str:
    """Return ``task`` if it is a known task name, else raise PosymError."""
    if task not in TASKS:
        raise PosymError(f"unknown task {task!r} (expected one of: {', '.join(TASKS)})")
    return task


def get_vocab(task: str) -> Vocab:
    """The vocabulary of ``task`` (``"number"`` or ``"letter"``)."""
    return NUMBER_VOCAB if check_task(task) == "number" else LETTER_VOCAB

