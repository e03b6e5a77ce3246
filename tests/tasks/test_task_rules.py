"""Generation rules: the letter task's distractor rule (SPEC §1.2, the authors' data) and the
extra-token rules of length-extended inputs (SPEC §1.4, our choice)."""

from __future__ import annotations

import numpy as np
import pytest

from posym.errors import PosymError
from posym.tasks import export_jsonl, generate, read_jsonl, solve, verify_batch
from posym.tasks.vocab import LL_OFFSET, LN_OFFSET, N_LETTERS

EXTRA_RULES = ("window", "distractor", "copies")


def _chain_positions(tokens: list[str]) -> set[int]:
    """Positions visited by the letter chain (query, pre-target chain tokens, answer)."""
    by_left = {}
    for i, t in enumerate(tokens[:-1]):
        by_left.setdefault(t[0], []).append(i)
    pos, seen = len(tokens) - 1, {len(tokens) - 1}
    while tokens[pos][1].isalpha():
        pos = by_left[tokens[pos][1]][0]
        seen.add(pos)
    return seen


def _distractor_hits(batch) -> tuple[int, int]:
    """(non-chain pre-target right letters naming a chain or answer letter, all non-chain pre-target tokens)."""
    E, T, P = batch.extra_tokens, batch.target_len, batch.pretarget_len
    hits = total = 0
    for r in range(len(batch)):
        toks = batch.tokens(r)
        chain = _chain_positions(toks)
        chain_letters = {toks[p][0] for p in chain if p != len(toks) - 1}
        for p in range(E + T, E + T + P):
            if p not in chain:
                total += 1
                hits += toks[p][1] in chain_letters
    return hits, total


@pytest.mark.parametrize("extra", [0, 37])
def test_letter_distractors_never_name_a_chain_letter(extra):
    b = generate("letter", 3000, 11, extra_tokens=extra)
    hits, total = _distractor_hits(b)
    assert total > 10_000 and hits == 0


def test_uniform_rule_is_the_old_data():
    """The ablation rule draws right letters over a..h, so about 29 % name a chain/answer letter."""
    b = generate("letter", 3000, 11, distractors="uniform")
    verify_batch(b)
    hits, total = _distractor_hits(b)
    assert 0.2 < hits / total < 0.4
    pool = generate("letter", 3000, 11)
    # only the distractor right letters differ: everything else is the same draw
    diff = pool.input_ids != b.input_ids
    assert diff.any() and not diff[:, :8].any() and not diff[:, -1].any()


def test_number_task_ignores_the_distractor_rule():
    np.testing.assert_array_equal(generate("number", 500, 3).input_ids,
                                  generate("number", 500, 3, distractors="uniform").input_ids)


@pytest.mark.parametrize("task", ["number", "letter"])
@pytest.mark.parametrize("rule", EXTRA_RULES)
@pytest.mark.parametrize("extra", [0, 1000])
def test_extra_rules_keep_a_valid_unique_answer(task, rule, extra, tmp_path):
    b = generate(task, 60, 4, extra_tokens=extra, extra_rule=rule)
    assert verify_batch(b) == 60
    # the effective part does not depend on the rule (offsets, chain and answer unchanged)
    w = generate(task, 60, 4, extra_tokens=extra)
    np.testing.assert_array_equal(b.input_ids[:, extra:], w.input_ids[:, extra:])
    path = export_jsonl(task, "test", 20, tmp_path / "x.jsonl", extra_tokens=extra, extra_rule=rule)
    for rec in read_jsonl(path):
        assert solve(task, rec["tokens"])[0] == rec["label"]


def test_extra_rule_contents():
    E = 200
    b = generate("letter", 50, 2, extra_tokens=E, extra_rule="distractor")
    assert (b.input_ids[:, :E] >= LL_OFFSET).all()  # (letter, letter) pairs
    c = generate("letter", 50, 2, extra_tokens=E, extra_rule="copies")
    for r in range(50):
        window = set(c.input_ids[r, E:E + 8].tolist()) - set()
        assert set(c.input_ids[r, :E].tolist()) <= window
        assert c.labels[r] not in set(c.input_ids[r, :E].tolist()) or \
            (c.input_ids[r, E:E + 8] == c.labels[r]).sum() > 1  # the answer token itself is never copied
    w = generate("letter", 50, 2, extra_tokens=E)
    assert ((w.input_ids[:, :E] >= LN_OFFSET) & (w.input_ids[:, :E] < LN_OFFSET + N_LETTERS * 8)).all()
    n = generate("number", 50, 2, extra_tokens=E, extra_rule="distractor")
    assert (n.input_ids[:, :E] <= 16).all() and (n.input_ids[:, :E] >= 1).all()
    for e in range(1, E):  # an integer at extra position e points inside the row
        assert (n.input_ids[:, e] <= max(e, 1)).all()


def test_unknown_rules_are_refused():
    with pytest.raises(PosymError, match="distractor rule"):
        generate("letter", 5, 0, distractors="chain")
    with pytest.raises(PosymError, match="extra-token rule"):
        generate("number", 5, 0, extra_tokens=3, extra_rule="bogus")
