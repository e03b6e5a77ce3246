"""Balancing (SPEC §1.3) and splits."""

from __future__ import annotations

import time

import numpy as np
import pytest

from posym.errors import PosymError
from posym.tasks import SPLIT_SIZES, generate, make_split, make_splits, split_seed, tuple_count


def _tuples(b):
    """(answer position, answer token, hops): the letter-task label id encodes (letter, number)."""
    return list(zip(b.answer_pos.tolist(), b.labels.tolist(), b.hops.tolist()))


def test_tuple_counts():
    assert tuple_count("number") == 8 * 120 * 4 == 3840
    assert tuple_count("letter") == 8 * 8 * 8 * 4 == 2048
    assert tuple_count("number", hops=(1, 3), target_len=3, pretarget_len=5) == 2 * 3 * 120
    assert tuple_count("letter", hops=(2,), target_len=12) == 12 * 64


@pytest.mark.parametrize("task", ["number", "letter"])
@pytest.mark.parametrize("seed", [0, 99])
@pytest.mark.parametrize("block", [0, 3])
def test_complete_block_exactly_balanced(task, seed, block):
    K = tuple_count(task)
    b = generate(task, K, seed, start_index=block * K, extra_tokens=2)
    tuples = _tuples(b)
    assert len(set(tuples)) == K  # every (position, value, hops) tuple exactly once
    assert sorted(set(b.answer_pos.tolist())) == list(range(2, 10))
    assert len(set(b.labels.tolist())) == (120 if task == "number" else 64)
    np.testing.assert_array_equal(np.bincount(b.hops)[1:], [K // 4] * 4)


@pytest.mark.parametrize("task", ["number", "letter"])
def test_blocks_differ_and_partial_blocks(task):
    K = tuple_count(task)
    b = generate(task, 2 * K, 5, start_index=K // 2)  # half block, full block, half block
    counts = {}
    for t in _tuples(b):
        counts[t] = counts.get(t, 0) + 1
    assert len(counts) == K and max(counts.values()) <= 3
    assert len(set(_tuples(b.subset(slice(K // 2, K // 2 + K))))) == K  # the complete middle block
    first, second = generate(task, K, 5), generate(task, K, 5, start_index=K)
    assert (first.labels != second.labels).any()  # a fresh permutation per block


@pytest.mark.parametrize("task", ["number", "letter"])
def test_hop_classes_equal_in_aligned_groups(task):
    b = generate(task, 1000, 3)
    groups = b.hops.reshape(-1, 4)
    assert (np.sort(groups, axis=1) == [1, 2, 3, 4]).all()
    assert not (groups == groups[0]).all()  # random order inside groups


def test_general_layout_balance():
    kw = dict(hops=(1, 3), target_len=3, pretarget_len=5)
    K = tuple_count("number", **kw)
    b = generate("number", K, 1, **kw)
    assert len(set(_tuples(b))) == K
    kw = dict(hops=(2, 5, 7), target_len=2, pretarget_len=6)
    K = tuple_count("letter", **kw)
    b = generate("letter", K, 1, **kw)
    assert len(set(_tuples(b))) == K


# --- splits --------------------------------------------------------------------------------------


def test_split_seeds():
    assert SPLIT_SIZES == {"train": 432_000, "val": 2_400, "test": 45_600}
    assert split_seed(0, "train") == 0
    assert split_seed(0, "val") == 432_000
    assert split_seed(10, "test") == 10 + 434_400
    with pytest.raises(PosymError):
        split_seed(0, "dev")


@pytest.mark.parametrize("task", ["number", "letter"])
def test_make_split(task):
    val = make_split(task, "val")
    assert len(val) == 2400 and val.seed == 432_000
    np.testing.assert_array_equal(np.bincount(val.hops)[1:], [600] * 4)  # equal hop shares
    head = make_split(task, "val", n=100)
    np.testing.assert_array_equal(head.input_ids, val.input_ids[:100])
    test = make_split(task, "test", n=100)
    train = make_split(task, "train", n=100)
    assert (test.input_ids != head.input_ids).any(axis=1).all()
    assert (train.input_ids != head.input_ids).any(axis=1).all()
    assert make_split(task, "val", n=50, extra_tokens=3).input_ids.shape == (50, 20)
    with pytest.raises(PosymError):
        make_split(task, "val", n=2401)
    with pytest.raises(PosymError):
        make_split(task, "valid")
    with pytest.raises(PosymError):
        make_split(task, "val", n=10, start_index=5)


def test_full_dataset_speed_and_sizes():
    """All 480,000 sequences of a task (SPEC §1.3) generate in seconds."""
    t0 = time.perf_counter()
    splits = make_splits("number", seed=0)
    t1 = time.perf_counter()
    letter = generate("letter", 480_000, 0)
    t2 = time.perf_counter()
    assert {k: len(v) for k, v in splits.items()} == SPLIT_SIZES
    for b in splits.values():  # hop classes in exactly equal shares in every split
        counts = np.bincount(b.hops)[1:]
        assert (counts == len(b) // 4).all()
    assert (np.bincount(letter.hops)[1:] == 120_000).all()
    assert t1 - t0 < 30 and t2 - t1 < 30, (t1 - t0, t2 - t1)
