"""Random token sequences repeated twice: the prompts of the classic induction-head setup
(Olsson et al. 2022; TransformerLens's head detectors), used by :mod:`posym.heads.detectors`
(SPEC §7).

Each row is ``[bos] x_1 .. x_n x_1 .. x_n``: ``n`` = ``length`` distinct tokens drawn uniformly from
the vocabulary (without the start token and ``exclude_ids``), then the same ``n`` tokens again, so
every second-half token has exactly one earlier occurrence, ``n`` positions back. NumPy only; a
pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from posym.checks import check_int, check_positive_int
from posym.errors import PosymError


def repeated_random_sequences(vocab_size: int, n: int, length: int, *, seed: int = 0, bos_id: int | None = None,
                              exclude_ids: Sequence[int] = ()) -> np.ndarray:
    """``n`` random sequences of ``length`` distinct tokens, each repeated twice -> int64
    ``[n, (1 if bos_id is not None) + 2·length]``.

    Tokens are drawn from ``0..vocab_size-1`` minus ``bos_id`` and ``exclude_ids`` (e.g. the
    tokenizer's special tokens), without replacement within a sequence; ``bos_id`` (the model's
    start token), when given, is put at position 0. Deterministic in ``seed``.
    """
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    n = check_positive_int(n, "n")
    length = check_positive_int(length, "length")
    seed = check_int(seed, "seed")
    if bos_id is not None:
        bos_id = check_int(bos_id, "bos_id")
    excl = [check_int(x, "exclude_ids entry") for x in exclude_ids]
    bad = [x for x in ([bos_id] if bos_id is not None else []) + excl if x >= vocab_size]
    if bad:
        raise PosymError(f"token id {bad[0]} lies outside the vocabulary of {vocab_size} ids; "
                         f"pass ids below {vocab_size}")
    keep = np.ones(vocab_size, dtype=bool)
    keep[excl] = False
    if bos_id is not None:
        keep[bos_id] = False
    pool = np.flatnonzero(keep)
    if len(pool) < length:
        raise PosymError(f"length {length} needs {length} distinct tokens but only {len(pool)} ids are left "
                         f"after the exclusions; use a shorter length")
    rng = np.random.default_rng(seed)
    body = np.stack([rng.choice(pool, size=length, replace=False) for _ in range(n)]).astype(np.int64)
    seqs = np.concatenate((body, body), axis=1)
    if bos_id is not None:
        seqs = np.concatenate((np.full((n, 1), bos_id, dtype=np.int64), seqs), axis=1)
    return seqs


def repeated_ids(tokenizer: Any, vocab: int, n: int, length: int, seed: int) -> np.ndarray:
    """``[n, 1 + 2·length]`` repeated random sequences for a model with ``vocab`` embedding rows: the
    tokenizer's start token first (when it has one), the other tokens drawn from the ids both the
    tokenizer and the model know, special tokens left out."""
    size = min(int(vocab), len(tokenizer))
    bos = tokenizer.bos_token_id
    special = [int(i) for i in getattr(tokenizer, "all_special_ids", []) if int(i) < size and i != bos]
    return repeated_random_sequences(size, n, length, seed=seed, bos_id=bos if bos is not None and bos < size else None,
                                     exclude_ids=special)


__all__ = ["repeated_ids", "repeated_random_sequences"]
