"""Shared helpers for the posym.tasks tests, exposed as session fixtures."""

from __future__ import annotations

import numpy as np
import pytest

from posym.tasks import TaskBatch


def _chain_positions(batch: TaskBatch, r: int) -> list[int]:
    """Positions visited from the query to the answer (query first), recomputed from token strings."""
    toks = batch.tokens(r)
    pos = len(toks) - 1
    path = [pos]
    if batch.task == "number":
        while toks[pos].isdigit():
            pos -= int(toks[pos])
            path.append(pos)
    else:
        while toks[pos][1].isalpha():
            (pos,) = [i for i in range(len(toks) - 1) if toks[i][0] == toks[pos][1]]
            path.append(pos)
    return path


def _assert_batches_equal(a: TaskBatch, b: TaskBatch) -> None:
    assert a.task == b.task
    for name in ("input_ids", "labels", "hops", "answer_pos", "index"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


@pytest.fixture(scope="session")
def chain_positions():
    """``chain_positions(batch, r)`` -> positions visited from the query to the answer."""
    return _chain_positions


@pytest.fixture(scope="session")
def assert_batches_equal():
    """``assert_batches_equal(a, b)`` compares every array of two TaskBatches."""
    return _assert_batches_equal
