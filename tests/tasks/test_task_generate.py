"""Generated samples follow SPEC §1.1/§1.2/§1.4 and solve with the independent reference solver."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posym.errors import PosymError
from posym.tasks import generate, get_vocab, solve, verify_batch
from posym.tasks import dataset as dataset_mod

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def layouts(draw, task=None):
    task = task or draw(st.sampled_from(["number", "letter"]))
    if task == "number":
        T = draw(st.integers(1, 10))
        P = draw(st.integers(0, 16 - T))
        max_h = P + 1
    else:
        T = draw(st.integers(1, 24))
        P = draw(st.integers(0, 12))
        max_h = min(P + 1, 7)
    hops = draw(st.lists(st.integers(1, max_h), min_size=1, max_size=max_h, unique=True))
    return task, dict(hops=hops, target_len=T, pretarget_len=P, extra_tokens=draw(st.integers(0, 40)))


@pytest.mark.parametrize("task", ["number", "letter"])
def test_default_layout_shapes(task):
    b = generate(task, 100, 0)
    assert b.input_ids.shape == (100, 17) and b.input_ids.dtype == np.int64
    for arr in (b.labels, b.hops, b.answer_pos, b.index):
        assert arr.shape == (100,) and arr.dtype == np.int64
    assert len(b) == 100 and b.seq_len == 17 and b.query_pos == 16
    assert set(np.unique(b.hops)) == {1, 2, 3, 4}
    assert ((b.answer_pos >= 0) & (b.answer_pos < 8)).all()
    assert b.sequences().shape == (100, 18)
    np.testing.assert_array_equal(b.sequences()[:, -1], b.labels)
    assert b.input_ids.min() >= 1 and b.input_ids.max() < get_vocab(task).size  # no <PAD>


@pytest.mark.parametrize("task", ["number", "letter"])
@pytest.mark.parametrize("seed", [0, 1, 7, 12345, 2**63 + 5])
def test_default_layout_solves(task, seed):
    assert verify_batch(generate(task, 2000, seed)) == 2000


@SETTINGS
@given(layouts(), st.integers(0, 2**64 - 1), st.integers(0, 10**9))
def test_any_layout_solves(layout, seed, start):
    task, kw = layout
    b = generate(task, 40, seed, start_index=start, **kw)
    L = kw["extra_tokens"] + kw["target_len"] + kw["pretarget_len"] + 1
    assert b.input_ids.shape == (40, L)
    verify_batch(b)
    E, T = kw["extra_tokens"], kw["target_len"]
    assert ((b.answer_pos >= E) & (b.answer_pos < E + T)).all()
    assert set(np.unique(b.hops)) <= set(kw["hops"])


@SETTINGS
@given(layouts(), st.integers(0, 2**32))
def test_extra_tokens_only_prepend(layout, seed):
    """SPEC §1.4: extra tokens go before the target window; everything else is unchanged."""
    task, kw = layout
    E = kw.pop("extra_tokens")
    plain = generate(task, 30, seed, **kw)
    extra = generate(task, 30, seed, extra_tokens=E, **kw)
    np.testing.assert_array_equal(extra.input_ids[:, E:], plain.input_ids)
    np.testing.assert_array_equal(extra.answer_pos, plain.answer_pos + E)
    np.testing.assert_array_equal(extra.labels, plain.labels)
    np.testing.assert_array_equal(extra.hops, plain.hops)
    verify_batch(extra)


def test_number_extra_tokens_are_letters():
    b = generate("number", 300, 3, extra_tokens=50)
    assert (b.input_ids[:, :50] >= 17).all()
    assert len(np.unique(b.input_ids[:, :50])) > 100  # uniform over the 120 letters


def test_letter_extra_tokens_are_pool_pairs(chain_positions):
    b = generate("letter", 300, 3, extra_tokens=30)
    assert ((b.input_ids[:, :30] >= 1) & (b.input_ids[:, :30] <= 64)).all()
    for r in range(len(b)):
        toks = b.tokens(r)
        chain_letters = {toks[p][0] for p in chain_positions(b, r)[1:]}
        assert not chain_letters & {t[0] for t in toks[:30]}


@pytest.mark.parametrize("task", ["number", "letter"])
def test_one_pretarget_free_layout(task):
    b = generate(task, 200, 0, hops=1, pretarget_len=0, target_len=5)
    assert b.input_ids.shape == (200, 6)
    verify_batch(b)


# --- number task rules (SPEC §1.1) ---------------------------------------------------------------


def test_number_distractor_offsets(chain_positions):
    """Non-chain pre-target token at t points uniformly to [0, t-1] (offset in [1, t])."""
    T, P = 8, 8
    b = generate("number", 4000, 11)
    seen = {t: set() for t in range(T, T + P)}
    for r in range(len(b)):
        chain = set(chain_positions(b, r))
        toks = b.tokens(r)
        assert all(t.isalpha() for t in toks[:T])
        assert all(t.isdigit() for t in toks[T:])
        assert len(chain) == b.hops[r] + 1
        for t in range(T, T + P):
            if t not in chain:
                v = int(toks[t])
                assert 1 <= v <= t
                seen[t].add(v)
    for t in range(T, T + P):
        assert seen[t] == set(range(1, t + 1))  # every offset in [1, t] occurs


def test_number_chain_structure(chain_positions):
    """Chain: query -> h-1 pre-target positions (descending) -> answer in the target window."""
    b = generate("number", 2000, 5, extra_tokens=3)
    for r in range(len(b)):
        path = chain_positions(b, r)
        h = int(b.hops[r])
        assert path[0] == 3 + 16 and path[-1] == b.answer_pos[r]
        assert all(3 + 8 <= p < 3 + 16 for p in path[1:-1]) and len(path) == h + 1
        assert path == sorted(path, reverse=True)


# --- letter task rules (SPEC §1.2) ---------------------------------------------------------------


def test_letter_rules(chain_positions):
    T, P = 8, 8
    b = generate("letter", 3000, 9)
    nums = []
    for r in range(len(b)):
        toks = b.tokens(r)
        path = chain_positions(b, r)
        h = int(b.hops[r])
        assert len(path) == h + 1 and path[-1] == b.answer_pos[r]
        chain_letters = [toks[p][0] for p in path[1:]]  # c_1..c_{h-1}, answer letter
        assert len(set(chain_letters)) == h  # distinct
        assert chain_letters[-1] == b.label_token(r)[0]
        # uniqueness: each chain letter is the left letter of exactly one non-query token
        for c in chain_letters:
            assert sum(t[0] == c for t in toks[:-1]) == 1
        # left letters of all non-chain tokens and of the query avoid the chain letters
        chain_set = set(path[1:])
        for i, t in enumerate(toks):
            if i not in chain_set:
                assert t[0] not in chain_letters
        assert all(t[1].isdigit() for t in toks[:T]) and all(t[1].isalpha() for t in toks[T:])
        assert path[1:-1] == sorted(path[1:-1], reverse=True)
        assert all(T <= p < T + P for p in path[1:-1])
        nums.extend(int(t[1]) for i, t in enumerate(toks[:T]) if i != path[-1])
    counts = np.bincount(nums, minlength=9)[1:]
    assert counts.min() > 0.8 * counts.mean()  # target-window numbers uniform 1..8


def test_letter_seven_hops():
    b = generate("letter", 500, 2, hops=7, pretarget_len=6)
    assert (b.hops == 7).all()
    verify_batch(b)
    # the query's left letter is the only pool letter (8 - 7 = 1)
    for r in range(20):
        toks = b.tokens(r)
        assert all(t[0] == toks[-1][0] for t in toks[:8] if t != b.label_token(r))


# --- determinism (SPEC §1.3) ---------------------------------------------------------------------


@pytest.mark.parametrize("task", ["number", "letter"])
def test_per_index_determinism(task, assert_batches_equal):
    full = generate(task, 3000, 42, extra_tokens=4)
    for i in [0, 1, 2047, 2048, 2999]:
        one = generate(task, 1, 42, extra_tokens=4, start_index=i)
        assert_batches_equal(one, full.subset(i))
    part = generate(task, 1000, 42, extra_tokens=4, start_index=1500)
    assert_batches_equal(part, full.subset(slice(1500, 2500)))
    assert_batches_equal(generate(task, 3000, 42, extra_tokens=4), full)


@pytest.mark.parametrize("task", ["number", "letter"])
def test_internal_chunking_invisible(task, monkeypatch, assert_batches_equal):
    ref = generate(task, 5000, 8)
    monkeypatch.setattr(dataset_mod, "_CHUNK_ELEMENTS", 17 * 1024)  # force 1024-row chunks
    assert_batches_equal(generate(task, 5000, 8), ref)


@SETTINGS
@given(st.sampled_from(["number", "letter"]), st.integers(0, 2**40), st.integers(0, 10**7), st.integers(1, 30))
def test_start_index_property(task, seed, start, k):
    full = generate(task, k + 5, seed, start_index=start)
    part = generate(task, 5, seed, start_index=start + k)
    np.testing.assert_array_equal(part.input_ids, full.input_ids[k:])
    np.testing.assert_array_equal(part.labels, full.labels[k:])


@pytest.mark.parametrize("task", ["number", "letter"])
def test_seeds_differ(task):
    a, b = generate(task, 500, 0), generate(task, 500, 1)
    assert (a.input_ids != b.input_ids).any(axis=1).mean() > 0.99


# --- TaskBatch helpers ---------------------------------------------------------------------------


def test_batch_helpers():
    b = generate("number", 10, 0)
    assert len(b.subset(3)) == 1 and b.subset(3).index.tolist() == [3]
    assert b.subset([1, 4]).index.tolist() == [1, 4]
    assert len(b.subset(b.hops == 1)) == int((b.hops == 1).sum())
    assert b.tokens(0) == get_vocab("number").decode(b.input_ids[0])
    assert solve("number", b.tokens(0))[0] == b.label_token(0)
    with pytest.raises(PosymError):
        b.subset(10)


def test_empty_batch():
    b = generate("letter", 0, 0, extra_tokens=2)
    assert len(b) == 0 and b.input_ids.shape == (0, 19)


# --- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("task, kw", [
    ("numbers", {}),
    ("number", {"hops": 0}),
    ("number", {"hops": (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)}),  # > pretarget_len + 1
    ("number", {"hops": 3, "pretarget_len": 1}),
    ("number", {"target_len": 9, "pretarget_len": 8}),  # offsets > 16
    ("number", {"target_len": 121, "pretarget_len": 0, "hops": 1}),
    ("number", {"target_len": 0}),
    ("number", {"pretarget_len": -1}),
    ("number", {"extra_tokens": -1}),
    ("number", {"n": -1}),
    ("number", {"n": 2.5}),
    ("number", {"seed": -3}),
    ("number", {"start_index": -1}),
    ("number", {"start_index": 2**62}),
    ("number", {"hops": ()}),
    ("number", {"hops": (1, 1)}),
    ("number", {"hops": "12"}),
    ("letter", {"hops": 8, "pretarget_len": 10}),  # 8 chain letters leave an empty pool
    ("letter", {"hops": (1, 2, 3, 4, 5, 6, 7, 8), "pretarget_len": 8}),
    ("letter", {"hops": 5, "pretarget_len": 3}),
    ("letter", {"target_len": 0}),
])
def test_invalid_layouts(task, kw):
    kw = dict(kw)
    n = kw.pop("n", 4)
    seed = kw.pop("seed", 0)
    with pytest.raises(PosymError):
        generate(task, n, seed, **kw)
