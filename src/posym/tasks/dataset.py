"""Dataset generation and splits (SPEC §1.3, §1.4).

``generate(task, n, seed, start_index=s)`` returns the samples with global indices ``s .. s+n-1`` of
the stream ``seed``; each one is a pure function of ``(seed, index)`` and the layout, so
``generate(task, 1, seed, start_index=i)`` reproduces row ``i`` of ``generate(task, N, seed)``.
Splits: train / val / test = 432,000 / 2,400 / 45,600 samples from the seeds ``seed``,
``seed + 432000`` and ``seed + 434400`` (each split is a separate stream, indices starting at 0).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from posym.checks import check_int
from posym.errors import PosymError
from posym.resources import require_memory
from posym.tasks import letter as _letter
from posym.tasks import number as _number
from posym.tasks._common import Layout, check_seed, make_layout
from posym.tasks.vocab import Vocab, check_task, get_vocab

DEFAULT_HOPS: tuple[int, ...] = (1, 2, 3, 4)
SPLITS: tuple[str, ...] = ("train", "val", "test")
SPLIT_SIZES: dict[str, int] = {"train": 432_000, "val": 2_400, "test": 45_600}
N_TOTAL: int = sum(SPLIT_SIZES.values())  # 480,000 sequences per task

_GENERATORS = {"number": _number, "letter": _letter}
_CHUNK_ELEMENTS = 1 << 19  # rows per internal chunk ~ this / seq_len (bounds temporary memory)


@dataclass
class TaskBatch:
    """A batch of task samples (SPEC §1). Row ``r`` is sample ``index[r]`` of the stream ``seed``.

    Arrays: ``input_ids [n, L] int64`` with ``L = extra_tokens + target_len + pretarget_len + 1``
    (query last; the label is *not* included), ``labels [n] int64`` (token id of the answer),
    ``hops [n] int64``, ``answer_pos [n] int64`` (0-based column of the answer in ``input_ids``,
    extra tokens included), ``index [n] int64`` (global sample index).
    """

    task: str
    input_ids: np.ndarray
    labels: np.ndarray
    hops: np.ndarray
    answer_pos: np.ndarray
    index: np.ndarray
    seed: int = 0
    target_len: int = 8
    pretarget_len: int = 8
    extra_tokens: int = 0
    distractors: str = "pool"
    extra_rule: str = "window"

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def seq_len(self) -> int:
        """Input length ``L`` (label excluded)."""
        return int(self.input_ids.shape[1])

    @property
    def vocab(self) -> Vocab:
        """The task vocabulary."""
        return get_vocab(self.task)

    @property
    def query_pos(self) -> int:
        """Column of the query (the last one)."""
        return self.seq_len - 1

    def subset(self, idx: int | slice | Sequence[int] | np.ndarray) -> "TaskBatch":
        """Rows selected by an int, slice, index array or boolean mask (always a TaskBatch)."""
        if isinstance(idx, (int, np.integer)) and not isinstance(idx, bool):
            i = int(idx)
            if not -len(self) <= i < len(self):
                raise PosymError(f"row {i} is out of range for a batch of {len(self)}")
            idx = [i]
        sel = idx if isinstance(idx, slice) else np.asarray(idx)
        return replace(self, input_ids=self.input_ids[sel], labels=self.labels[sel], hops=self.hops[sel],
                       answer_pos=self.answer_pos[sel], index=self.index[sel])

    def tokens(self, i: int) -> list[str]:
        """Decoded input tokens of row ``i`` (query last, label excluded)."""
        return self.vocab.decode(self.input_ids[i])

    def label_token(self, i: int) -> str:
        """Decoded answer of row ``i``."""
        return self.vocab.decode([self.labels[i]])[0]

    def sequences(self) -> np.ndarray:
        """Training sequences: ``input_ids`` with the answer appended, ``int64 [n, L+1]``."""
        return np.concatenate([self.input_ids, self.labels[:, None]], axis=1)


def generate(
    task: str,
    n: int,
    seed: int,
    *,
    hops: int | Sequence[int] = DEFAULT_HOPS,
    target_len: int = 8,
    pretarget_len: int = 8,
    extra_tokens: int = 0,
    start_index: int = 0,
    distractors: str = "pool",
    extra_rule: str = "window",
) -> TaskBatch:
    """Generate samples ``start_index .. start_index+n-1`` of ``task`` from stream ``seed`` (SPEC §1).

    Balanced (SPEC §1.3): every complete block of ``K`` consecutive indices (``K`` = hop classes x
    target positions x answer values; 3,840 number / 2,048 letter by default) holds each tuple
    exactly once, and hop classes are equally frequent in every aligned run of ``len(hops)`` indices.
    ``extra_tokens`` prepends that many filler tokens (SPEC §1.4) without changing anything else; what
    they are is ``extra_rule`` (:data:`~posym.tasks._common.EXTRA_RULES`, our choice). ``distractors``
    (letter task): ``"pool"`` — the authors' rule, SPEC §1.2 — or ``"uniform"`` (the ablation).
    Raises PosymError for an unknown task or an impossible layout.
    """
    check_task(task)
    n = check_int(n, "n")
    seed = check_seed(seed)
    start_index = check_int(start_index, "start_index")
    if start_index + n > 2**62:
        raise PosymError(f"start_index + n must be <= 2**62, got {start_index + n}")
    layout = make_layout(task, hops, target_len, pretarget_len, extra_tokens, distractors, extra_rule)
    require_memory(generate_bytes(n, layout.seq_len), f"{n} {task} samples of length {layout.seq_len}")
    return _generate(task, n, seed, layout, start_index)


def _chunk_rows(seq_len: int) -> int:
    """Rows generated at a time: about ``_CHUNK_ELEMENTS`` tokens, at least 1,024 rows."""
    return max(1024, _CHUNK_ELEMENTS // seq_len)


def generate_bytes(n: int, seq_len: int) -> float:
    """Bytes :func:`generate` needs for ``n`` rows of length ``seq_len``: the int64 output plus the
    temporaries of one chunk (at most 8 int64 arrays of its shape), whose rows are ``min(n, chunk)``."""
    return 8.0 * n * seq_len + 64.0 * min(n, _chunk_rows(seq_len)) * seq_len


def _generate(task: str, n: int, seed: int, layout: Layout, start_index: int) -> TaskBatch:
    gen = _GENERATORS[task]
    L = layout.seq_len
    input_ids = np.empty((n, L), dtype=np.int64)
    labels = np.empty(n, dtype=np.int64)
    hops = np.empty(n, dtype=np.int64)
    answer_pos = np.empty(n, dtype=np.int64)
    index = np.arange(start_index, start_index + n, dtype=np.int64)
    chunk = _chunk_rows(L)
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        ids, lab, hp, ap = gen.generate_rows(seed, index[lo:hi], layout)
        input_ids[lo:hi], labels[lo:hi], hops[lo:hi], answer_pos[lo:hi] = ids, lab, hp, ap
    return TaskBatch(task=task, input_ids=input_ids, labels=labels, hops=hops, answer_pos=answer_pos,
                     index=index, seed=seed, target_len=layout.target_len, pretarget_len=layout.pretarget_len,
                     extra_tokens=layout.extra_tokens, distractors=layout.distractors, extra_rule=layout.extra_rule)


def tuple_count(task: str, *, hops: int | Sequence[int] = DEFAULT_HOPS, target_len: int = 8,
                pretarget_len: int = 8) -> int:
    """Balancing block size ``K`` for a layout (3,840 number / 2,048 letter by default; SPEC §1.3)."""
    layout = make_layout(task, hops, target_len, pretarget_len, 0)
    H, R = _GENERATORS[task].tuple_counts(layout)
    return H * R


def _check_split(split: str) -> str:
    if split not in SPLIT_SIZES:
        raise PosymError(f"unknown split {split!r} (expected one of: {', '.join(SPLITS)})")
    return split


def split_seed(seed: int, split: str) -> int:
    """Seed of a split (SPEC §1.3): ``seed``, ``seed + n_train``, ``seed + n_train + n_val``."""
    seed = check_seed(seed)
    k = SPLITS.index(_check_split(split))
    return seed + sum(SPLIT_SIZES[name] for name in SPLITS[:k])


def make_split(task: str, split: str, seed: int = 0, n: int | None = None, **layout: Any) -> TaskBatch:
    """The first ``n`` samples (default: all) of ``split`` (SPEC §1.3); ``layout`` as in :func:`generate`."""
    check_task(task)
    size = SPLIT_SIZES[_check_split(split)]
    if n is None:
        n = size
    n = check_int(n, "n")
    if n > size:
        raise PosymError(f"n={n} exceeds the {split} split size {size}")
    if "start_index" in layout:
        raise PosymError("make_split does not take start_index (use generate)")
    return generate(task, n, split_seed(seed, split), **layout)


def make_splits(task: str, seed: int = 0, **layout: Any) -> dict[str, TaskBatch]:
    """All three full splits ``{"train", "val", "test"}`` of ``task`` (SPEC §1.3)."""
    return {split: make_split(task, split, seed, **layout) for split in SPLITS}
