"""1-hop LLM prompts (SPEC §1.5): reproducible, unique answers, balanced positions, parsing."""

from __future__ import annotations

import collections

import pytest

from posym.errors import PosymError
from posym.tasks.prompts import (
    DEFAULT_LENGTHS,
    INSTRUCTIONS,
    TASKS,
    WORKED_EXAMPLES,
    answer_position,
    build_messages,
    is_correct,
    make_sample,
    make_samples,
    merge_system,
    parse_answer,
    prompt_digest,
    render_plain,
    solve_sequence,
)


@pytest.mark.parametrize("task", TASKS)
def test_sample_is_pure_function_of_its_key(task):
    a = make_samples(task, 24, 3, 10)
    b = [make_sample(task, 24, 3, i) for i in reversed(range(10))][::-1]
    assert a == b
    assert make_samples(task, 24, 3, 4, start=6) == a[6:]  # independent of n / start
    assert make_samples(task, 24, 4, 10) != a  # another run is a fresh dataset
    assert make_samples(task, 16, 3, 10) != make_samples(task, 16, 2, 10)


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length", DEFAULT_LENGTHS)
def test_answers_correct_and_unique(task, length):
    for s in make_samples(task, length, 1, 12):
        assert len(s.tokens) == length + 1
        assert s.tokens[s.answer_pos] == s.answer
        assert solve_sequence(s.tokens) == s.answer  # independent solver (unique match for letter)
        if task == "number":
            v = int(s.tokens[-1])
            assert 1 <= v <= length and s.answer_pos == length - v
            assert all(len(t) == 1 and t.isalpha() for t in s.tokens[:-1])
        else:
            lefts = [t[0] for t in s.tokens[:-1]]
            assert lefts.count(s.tokens[-1][1]) == 1
            assert s.tokens[-1][0] != s.tokens[-1][1]
            assert all(len(t) == 2 and t[0].isalpha() and t[1].isdigit() for t in s.tokens[:-1])
            if length <= 26:
                assert len(set(lefts)) == length  # distinct left letters
            else:  # repeats as balanced as possible among the 25 non-answer letters
                counts = collections.Counter(x for x in lefts if x != s.tokens[-1][1])
                assert max(counts.values()) - min(counts.values()) <= 1 and len(counts) == 25


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length", [12, 24, 100])
def test_answer_positions_balanced(task, length):
    n = 3 * length + 5
    pos = [answer_position(task, length, 0, i) for i in range(n)]
    counts = collections.Counter(pos)
    assert set(counts) == set(range(length))
    assert max(counts.values()) - min(counts.values()) <= 1
    # a short prefix already spreads over the window (low-discrepancy order)
    k = 10
    prefix = sorted(pos[:k])
    gaps = [b - a for a, b in zip(prefix, prefix[1:])]
    assert max(gaps) <= 2 * length / k + 1
    assert [answer_position(task, length, 1, i) for i in range(n)] != pos


def test_paper_examples_and_worked_examples_are_correct():
    assert WORKED_EXAMPLES["number"][0] == ("a z b y c x d w 5", "y")
    assert WORKED_EXAMPLES["letter"][0] == ("a4 b3 c2 d1 fc", "c2")
    for task in TASKS:
        for seq, ans in WORKED_EXAMPLES[task]:
            assert solve_sequence(seq) == ans
        assert "Output just the target token" in INSTRUCTIONS[task]
    assert "move n positions to the left" in INSTRUCTIONS["number"].lower()
    assert "second character of the last token names the token that starts with it" in INSTRUCTIONS["letter"]


def test_messages_and_plain_rendering():
    s = make_sample("letter", 12, 0, 0)
    msgs = build_messages(s, n_examples=3)
    assert [m["role"] for m in msgs] == ["system"] + ["user", "assistant"] * 3 + ["user"]
    assert msgs[-1]["content"] == s.sequence and msgs[0]["content"] == INSTRUCTIONS["letter"]
    merged = merge_system(msgs)
    assert merged[0]["role"] == "user" and merged[0]["content"].startswith(INSTRUCTIONS["letter"])
    assert len(merged) == len(msgs) - 1
    text = render_plain(msgs)
    assert text.endswith(f"Input: {s.sequence}\nOutput:") and "Input: a4 b3 c2 d1 fc\nOutput: c2\n" in text
    assert build_messages(s, n_examples=0)[1:] == [{"role": "user", "content": s.sequence}]
    assert prompt_digest(msgs) == prompt_digest(build_messages(s, 3)) != prompt_digest(build_messages(s, 2))
    with pytest.raises(PosymError):
        build_messages(s, n_examples=9)


@pytest.mark.parametrize("raw,parsed", [
    ("y", "y"), (" Y", "y"), ('"c2".', "c2"), ("`c2`", "c2"), ("**c2**", "c2"), ("'y'", "y"),
    ("Answer: c2", "c2"), ("answer:c2", "c2"), ("The answer is y", "y"), ("Target token: k4", "k4"),
    ("Output: y z w", "y"), ("y\nBecause ...", "y"), ("", ""), (None, ""), (": .", ""),
    ("c2, since c matches", "c2"),
])
def test_parse_answer(raw, parsed):
    assert parse_answer(raw) == parsed


def test_is_correct_and_errors():
    assert is_correct("C2", "c2") and not is_correct("c", "c2") and not is_correct("", "y")
    with pytest.raises(PosymError):
        make_sample("colour", 12, 0, 0)
    with pytest.raises(PosymError):
        make_sample("number", 0, 0, 0)
    with pytest.raises(PosymError):
        make_sample("number", 12, -1, 0)
