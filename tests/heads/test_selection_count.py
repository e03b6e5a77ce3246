"""posym.heads.selection, ``match=count`` (issue 37): as many heads as the typed set, drawn without
replacement from every head outside it (seeded, sorted); the layer form's canonical string unchanged; a
one-head-per-layer model has a count-matched control and no layer-matched one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.heads.selection import HeadSelection, matched_control, parse_heads, resolve_heads


def test_syntax_and_canonical_strings():
    assert parse_heads("random:positional,seed=3,match=count") == HeadSelection(type="positional", random=True, seed=3,
                                                                                match="count")
    assert parse_heads("random:positional,match=count,seed=3").canonical() == "random:positional,seed=3,match=count"
    assert parse_heads("random:positional,seed=3,match=layer").canonical() == "random:positional,seed=3"  # unchanged
    assert parse_heads("random:positional,seed=3") == HeadSelection(type="positional", random=True, seed=3)
    with pytest.raises(PosymError, match="match is layer or count, got 'all'"):
        parse_heads("random:positional,match=all")


def test_count_matched_draw_is_seeded_disjoint_and_sorted():
    typed = ((0, 1), (0, 3), (2, 2))
    got = matched_control(typed, 3, 4, 5, "positional", match="count")
    others = [(ly, h) for ly in range(3) for h in range(4) if (ly, h) not in typed]
    pick = np.random.default_rng(5).choice(len(others), size=3, replace=False)
    assert got == tuple(sorted(others[int(i)] for i in pick))  # the documented draw
    assert len(got) == 3 and not set(got) & set(typed) and list(got) == sorted(got)
    assert got == matched_control(typed, 3, 4, 5, "positional", match="count")
    assert len({matched_control(typed, 3, 4, s, match="count") for s in range(10)}) > 1


def test_one_head_per_layer_count_not_layer():
    df = pd.DataFrame({"layer": range(4), "head": 0, "posym_type": ["positional", "symbolic", "symbolic", "mixed"]})
    with pytest.raises(PosymError, match="layer 1 has 1 symbolic heads and only 0 other heads; use --match count") as e:
        resolve_heads("random:symbolic,seed=0", df, 4, 1)
    assert "\n" not in str(e.value)
    ctrl = resolve_heads("random:symbolic,seed=0,match=count", df, 4, 1)
    assert len(ctrl) == 2 and set(ctrl) <= {(0, 0), (3, 0)}
    with pytest.raises(PosymError, match="the model has 3 symbolic heads and only 1 other head$"):
        matched_control(((0, 0), (1, 0), (2, 0)), 4, 1, 0, "symbolic", match="count")


def test_control_draws_are_distinct_and_all_of_them_when_few():
    """One head among 11 others (posym's 12-layer one-head GPT-J): only 11 count-matched sets exist, so K = 20
    asks gives all 11 (the exact null, p floor 1/12), each reproduced by its recorded seed; many sets: K
    distinct draws."""
    from posym.heads.selection import control_draws, n_matched_sets

    typed = ((1, 0),)
    assert n_matched_sets(typed, 12, 1, "count") == 11 and n_matched_sets(typed, 12, 1, "layer") == 0
    draws = control_draws(typed, 12, 1, 20, 0, "positional", match="count")
    assert sorted(h for _, h in draws) == [((ly, 0),) for ly in range(12) if ly != 1]
    for s, heads in draws:
        assert matched_control(typed, 12, 1, s, "positional", match="count") == heads
    typed = ((0, 1), (2, 0), (2, 3))
    assert n_matched_sets(typed, 3, 4, "layer") == 3 * 1 and n_matched_sets(typed, 3, 8, "layer") == 7 * 15
    many = control_draws(typed, 3, 8, 10, 7, "x")
    assert len(many) == 10 and len({h for _, h in many}) == 10 and many[0][0] == 7
    assert sorted(h for _, h in control_draws(typed, 3, 4, 40, 7, "x")) == sorted(  # all 3 layer-matched sets
        ((0, h), (2, 1), (2, 2)) for h in (0, 2, 3))
