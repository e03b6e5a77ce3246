"""The independent reference solver on the SPEC examples and on malformed inputs."""

from __future__ import annotations

import pytest

from posym.errors import PosymError
from posym.tasks import solve

NUMBER_EXAMPLE = "n h n v h y r s 6 3 2 7 7 8 4 7 2".split()
LETTER_EXAMPLE = "e1 b2 e1 g6 a2 b2 e1 g6 be db ca ge eb hc dg fh eh".split()


def test_spec_number_example():
    assert solve("number", NUMBER_EXAMPLE) == ("n", 4, 2)


def test_spec_letter_example():
    assert solve("letter", LETTER_EXAMPLE) == ("a2", 3, 4)


def test_spec_one_hop_prompts():  # SPEC §1.5 examples (same chain rules)
    assert solve("number", "a z b y c x d w 5".split()) == ("y", 1, 3)
    assert solve("letter", "a4 b3 c2 d1 fc".split()) == ("c2", 1, 2)


@pytest.mark.parametrize("task, tokens", [
    ("number", ["a", "b", "3"]),  # points before the start
    ("number", ["a", "b", "c"]),  # query is not an integer
    ("number", ["a", "0", "1"]),  # invalid token
    ("number", ["a", "17"]),  # invalid integer
    ("letter", ["a1", "a2", "ba"]),  # two matches for left letter a
    ("letter", ["a1", "b2", "cd"]),  # no match
    ("letter", ["a1", "a1"]),  # query is not a (letter, letter) token
    ("letter", ["a1", "i1", "ba"]),  # invalid token
    ("letter", ["ab", "ba", "ca"]),  # cycle a -> b -> a
    ("nope", ["a"]),
    ("number", []),
])
def test_solver_rejects(task, tokens):
    with pytest.raises(PosymError):
        solve(task, tokens)
