"""The head-type join, its labels, rank correlations and contingency table (docs/spec.md, "Classic
head detectors and per-prompt readings"), on hand-built tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.heads.detectors import DETECTORS, detection_patterns, pattern_scores
from posym.heads.head_types import (
    CLASSIC_TYPES,
    POSYM_TYPES,
    classic_types,
    contingency,
    format_contingency,
    format_p,
    join_head_types,
    posym_types,
    pure_counts,
    sink_counts,
    sink_flags,
    spearman,
    type_correlations,
)
from posym.heads.prompt_readings import per_prompt_kinds
from posym.heads.scores import HeadScores


def _det(rows):
    return pd.DataFrame(rows, columns=["layer", "head", "previous_token", "duplicate_token", "induction", "first_token"])


def _scores(rows, mass="swap_mass"):
    return pd.DataFrame(rows, columns=["layer", "head", "s_pos", "s_sym", "entropy", mass])


DET = _det([
    (0, 0, 0.95, 0.01, 0.02, 0.05),  # previous-token
    (0, 1, 0.10, 0.20, 0.80, 0.10),  # induction
    (1, 0, 0.10, 0.70, 0.30, 0.05),  # duplicate-token
    (1, 1, 0.30, 0.00, 0.00, 0.60),  # sink
    (2, 0, 0.30, 0.20, 0.10, 0.40),  # none
    (2, 1, 0.50, 0.10, 0.50, 0.00),  # tie at the threshold: previous-token first
])
SCORES = _scores([
    (0, 0, 0.99, 0.05, 0.3, 0.9),    # positional
    (0, 1, 0.02, 0.99, 0.4, 0.5),    # symbolic
    (1, 0, 0.03, 0.97, 0.3, 0.4),    # symbolic
    (1, 1, 0.10, 0.95, 0.2, 0.004),  # uninformative (mass below 1 %)
    (2, 0, 0.96, 0.95, 0.5, 0.5),    # diffuse: the (1, 1) corner
    (2, 1, 0.60, 0.40, 0.95, 0.5),   # diffuse: entropy
])


def test_classic_types_rule():
    assert classic_types(DET).tolist() == ["previous_token", "induction", "duplicate_token", "sink", "none",
                                           "previous_token"]
    assert classic_types(DET, threshold=0.9).tolist()[:3] == ["previous_token", "none", "none"]
    assert classic_types(DET, sink_share=0.7).tolist()[3] == "none"
    # an induction head resting on the start token where the prompt has no target is an induction head
    assert classic_types(_det([(0, 0, 0.0, 0.0, 0.8, 0.6)])).tolist() == ["induction"]


def test_posym_types_rule():
    mean = dict(pure_fraction=0)  # the means alone decide
    assert posym_types(SCORES, **mean).tolist() == ["positional", "symbolic", "symbolic", "uninformative", "diffuse",
                                                    "diffuse"]
    assert posym_types(SCORES, min_mass=0.0, **mean).tolist()[3] == "symbolic"
    assert posym_types(SCORES, max_entropy=None, **mean).tolist()[5] == "mixed"
    assert posym_types(SCORES, gamma=0.01, **mean).tolist()[:3] == ["mixed", "mixed", "mixed"]
    nan = SCORES.assign(s_pos=[np.nan, *SCORES.s_pos[1:]])
    assert posym_types(nan, **mean).tolist()[0] == "uninformative"
    # the default needs the per-prompt fractions: one line naming them and the switch
    with pytest.raises(PosymError, match=r"pure_fraction=0.9 needs the per-prompt fractions.*pure_fraction=0"):
        posym_types(SCORES)


def test_join_llm_heads_table_with_readings():
    table = _scores(SCORES.to_numpy().tolist(), mass="block_mass").assign(tau=1e-4, prompt_set="binding")
    readings = pd.DataFrame({"layer": [2, 0, 1, 0, 1, 2], "head": [1, 0, 0, 1, 1, 0],
                             "frac_positional": [0.1, 0.9, 0, 0, 0, 0.5], "frac_positional_lo": 0.0,
                             "frac_symbolic": [0.0, 0.0, 0.95, 0.9, 0.5, 0.0],
                             "s_pos": 9.0})  # readings' own means are not copied
    det = DET.sample(frac=1.0, random_state=0).assign(sink=0.0)
    j = join_head_types(table.iloc[::-1], det, readings)
    assert j[["layer", "head"]].to_numpy().tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [2, 1]]
    assert j["s_pos"].tolist() == SCORES["s_pos"].tolist()
    assert j["frac_positional"].tolist() == [0.9, 0, 0, 0, 0.5, 0.1] and "frac_positional_lo" in j
    assert j["classic_type"].tolist() == classic_types(DET).tolist()
    assert j["posym_type"].tolist() == posym_types(SCORES, pure_fraction=0).tolist()  # every fraction >= 0.9
    assert j["purity_fraction"].tolist()[:3] == [0.9, 0.9, 0.95] and np.isnan(j["purity_fraction"].iloc[3:]).all()
    assert {"block_mass", "sink", "prompt_set", "tau"} <= set(j.columns)


def test_join_refuses_bad_tables():
    with pytest.raises(PosymError, match="several rows per"):
        join_head_types(pd.concat([SCORES, SCORES]), DET)
    with pytest.raises(PosymError, match="lacks heads"):
        join_head_types(SCORES, DET.iloc[:3])
    with pytest.raises(PosymError, match="lacks column"):
        join_head_types(SCORES, DET.drop(columns="induction"))
    with pytest.raises(PosymError, match="swap_mass or block_mass"):
        join_head_types(SCORES.drop(columns="swap_mass"), DET)
    with pytest.raises(PosymError, match="no swap mass"):
        join_head_types(SCORES.assign(swap_mass=np.nan), DET)
    assert join_head_types(SCORES.assign(swap_mass=np.nan), DET, min_mass=0,
                           pure_fraction=0)["posym_type"].tolist()[3] == "symbolic"
    with pytest.raises(PosymError, match="per-prompt fractions"):
        join_head_types(SCORES, DET)  # no readings: the purity rule cannot be read
    with pytest.raises(PosymError, match="pure_fraction must be a number in"):
        join_head_types(SCORES, DET, pure_fraction=1.5)
    with pytest.raises(PosymError, match="frac_"):
        join_head_types(SCORES, DET, DET[["layer", "head"]])


def test_spearman_matches_pearson_of_average_ranks_with_ties():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 5, 40).astype(float), rng.random(40)

    def ranks(v):  # 1-based, ties get the mean of their positions
        return np.array([(v < a).sum() + ((v == a).sum() + 1) / 2 for a in v])

    assert spearman(x, y) == pytest.approx(np.corrcoef(ranks(x), ranks(y))[0, 1])
    assert np.isnan(spearman(np.ones(5), np.arange(5.0)))


def _planted(n=60, seed=0):
    """Heads whose s_SYM − s_POS rises with induction and falls with previous-token (plus noise);
    duplicate_token is independent noise."""
    rng = np.random.default_rng(seed)
    z = rng.random(n)
    return pd.DataFrame({"layer": np.arange(n) // 4, "head": np.arange(n) % 4,
                         "s_pos": 1 - z, "s_sym": z, "induction": z + 0.1 * rng.random(n),
                         "previous_token": 1 - z + 0.1 * rng.random(n), "duplicate_token": rng.random(n),
                         "first_token": rng.random(n)})


def test_type_correlations_known_signs():
    c = type_correlations(_planted(), n_boot=500, n_null=500).set_index("detector")
    assert list(c.index) == ["previous_token", "duplicate_token", "induction", "first_token"]
    assert c.loc["induction", "rho"] > 0.9 and c.loc["previous_token", "rho"] < -0.9
    for d in ("induction", "previous_token"):
        assert c.loc[d, "rho_lo"] <= c.loc[d, "rho"] <= c.loc[d, "rho_hi"]
        assert c.loc[d, "p_value"] == pytest.approx(1 / 501)  # no shuffle comes close
    assert c.loc["duplicate_token", "p_value"] > 0.01 and c.loc["duplicate_token", "rho_lo"] < 0 < c.loc["duplicate_token", "rho_hi"]
    assert (c["n_heads"] == 60).all() and (c["n_boot"] == 500).all()


def test_type_correlations_exact_on_a_monotone_table_and_nan_rows():
    t = _planted(10)
    t["induction"] = t["s_sym"] - t["s_pos"]  # identical ranks
    t.loc[3, "previous_token"] = np.nan
    c = type_correlations(t, n_boot=50, n_null=50).set_index("detector")
    assert c.loc["induction", "rho"] == pytest.approx(1.0)
    assert c.loc["induction", "rho_lo"] == pytest.approx(1.0) and c.loc["induction", "rho_hi"] == pytest.approx(1.0)
    assert c.loc["previous_token", "n_heads"] == 9
    seeded = type_correlations(t, n_boot=50, n_null=50, seed=3)
    assert seeded.equals(type_correlations(t, n_boot=50, n_null=50, seed=3))


def test_contingency_counts():
    j = join_head_types(SCORES, DET, pure_fraction=0)
    tab = contingency(j)
    assert list(tab.index) == [*CLASSIC_TYPES, "total"]
    assert list(tab.columns) == [*POSYM_TYPES, "total", "positional_purity", "symbolic_purity", "positional_mean_only",
                                 "symbolic_mean_only", "sink_flagged"]
    assert list(contingency(j[["classic_type", "posym_type"]]).columns) == [*POSYM_TYPES, "total"]
    assert tab.loc["previous_token", "positional"] == 1 and tab.loc["previous_token", "diffuse"] == 1
    assert tab.loc["induction", "symbolic"] == 1 and tab.loc["duplicate_token", "symbolic"] == 1
    assert tab.loc["sink", "uninformative"] == 1 and tab.loc["none", "diffuse"] == 1
    assert tab.loc["total", "total"] == 6 and tab.loc["total", "symbolic"] == 2 and tab.loc["sink", "total"] == 1
    assert tab.drop(index="total", columns="total")[list(POSYM_TYPES)].to_numpy().sum() == 6
    with pytest.raises(PosymError, match="unknown head type"):
        contingency(j.assign(posym_type="weird"))


# ---- issue 34, "readings a researcher misreads" -------------------------------------------------


def _rest_then_induct(n: int = 6):
    """Attention of three heads on one ``[bos] x x`` prompt (T = 1 + 2n): head 0 an induction head
    that rests on the start token in the first half (where it has no target), head 1 a pure sink,
    head 2 a previous-token head. -> (ids [1, T], attention [1, 3, T, T])."""
    T = 1 + 2 * n
    x = np.arange(1, n + 1)
    ids = torch.tensor(np.concatenate(([0], x, x))[None])
    a = torch.zeros(1, 3, T, T, dtype=torch.float64)
    for i in range(T):
        a[0, 0, i, i - n + 1 if i > n else 0] = 1.0  # the token after the earlier occurrence, else bos
        a[0, 1, i, 0] = 1.0
        a[0, 2, i, max(i - 1, 0)] = 1.0
    return ids, a


def test_a_sink_whose_pattern_type_wins_is_flagged_sink():
    """Known answer: the induction head resting on the start token is typed ``induction`` (the
    pattern wins) and flagged ``is_sink`` (first-token share (n + 1) / (2n + 1) = 7/13 > 0.5);
    the pure sink is typed and flagged sink; the previous-token head is neither."""
    ids, att = _rest_then_induct(6)
    s = pattern_scores(att, detection_patterns(ids))
    det = pd.DataFrame({"layer": 0, "head": [0, 1, 2], **{d: s[d][0].numpy() for d in DETECTORS}})
    assert det["induction"][0] == pytest.approx(1.0) and det["first_token"][0] == pytest.approx(7 / 13)
    assert classic_types(det).tolist() == ["induction", "sink", "previous_token"]
    assert sink_flags(det).tolist() == [True, True, False]
    scores = _scores([(0, 0, 0.0, 1.0, 0.3, 0.5), (0, 1, 0.0, 1.0, 0.1, 0.5), (0, 2, 1.0, 0.0, 0.1, 0.5)])
    j = join_head_types(scores, det, pure_fraction=0)
    assert j["is_sink"].tolist() == [True, True, False] and j["classic_type"].tolist()[0] == "induction"
    tab = contingency(j)
    assert tab.loc["induction", "sink_flagged"] == 1 and tab.loc["sink", "sink_flagged"] == 1
    assert tab.loc["previous_token", "sink_flagged"] == 0 and tab.loc["total", "sink_flagged"] == 2
    k = sink_counts(j)
    assert k == {"sink_heads": 2, "sink_typed_sink": 1, "sink_typed_pattern": {"induction": 1},
                 "sink_pure_symbolic": 2, "sink_pure_positional": 0}
    printed = format_contingency(tab)
    assert "sink-flag" in printed.splitlines()[0]


def _k_of_n(ks=(10, 9, 8), n=10):
    """HeadScores of one layer: head h positional (1, 0) on ks[h] of n prompts and (0.5, 0) on the
    rest (mean s_POS >= 0.9: pure on the mean for k >= 8); a last head symbolic (0, 1) on every
    prompt, with swap mass 0.5 on 3 of them and 0.001 on 7 (uninformative there; mean mass 0.15)."""
    H = len(ks) + 1
    sp, ss, mass = np.zeros((n, H)), np.zeros((n, H)), np.full((n, H), 0.5)
    for h, k in enumerate(ks):
        sp[:, h] = np.where(np.arange(n) < k, 1.0, 0.5)
    ss[:, -1] = 1.0
    mass[3:, -1] = 0.001
    return HeadScores(s_pos=sp[:, None, :, None], s_sym=ss[:, None, :, None], entropy=np.full((n, 1, H), 0.3),
                      taus=(1e-4,), layers=(0,), query_pos=np.full(n, 9), swap_mass=mass[:, None, :])


def _k_of_n_join(pure_fraction=0.9):
    sc = _k_of_n()
    det = _det([(0, h, 0.1, 0.1, 0.1, 0.1) for h in range(4)])
    readings = per_prompt_kinds(sc, gamma=0.1, min_mass=0.01, n_boot=20)
    return join_head_types(sc.to_frame(), det, readings, pure_fraction=pure_fraction)


def test_a_head_pure_on_k_of_n_prompts_gets_fraction_k_over_n():
    """Known answer: purity fractions 10/10, 9/10, 8/10 and 3/10; typed pure only where the fraction
    is >= the threshold (0.9: the first two; 0.8: three; 0: the mean alone, all four)."""
    j = _k_of_n_join()
    assert j["mean_type"].tolist() == ["positional", "positional", "positional", "symbolic"]
    assert j["purity_fraction"].tolist() == [1.0, 0.9, 0.8, 0.3]
    assert j["posym_type"].tolist() == ["positional", "positional", "mixed", "mixed"]
    assert _k_of_n_join(0.8)["posym_type"].tolist() == ["positional", "positional", "positional", "mixed"]
    assert _k_of_n_join(0.3)["posym_type"].tolist()[3] == "symbolic"
    assert _k_of_n_join(0)["posym_type"].tolist() == j["mean_type"].tolist()
    sc = _k_of_n()
    other = per_prompt_kinds(sc, gamma=0.05, min_mass=0.01, n_boot=5)  # read at another γ: refused
    with pytest.raises(PosymError, match="read with gamma 0.05 and the heads are typed with gamma 0.1"):
        join_head_types(sc.to_frame(), _det([(0, h, 0.1, 0.1, 0.1, 0.1) for h in range(4)]), other)
    tab = contingency(j)
    assert tab.loc["total", "positional"] == 2 and tab.loc["total", "positional_purity"] == pytest.approx(0.95)
    assert tab.loc["total", "positional_mean_only"] == 1 and tab.loc["total", "symbolic_mean_only"] == 1
    assert np.isnan(tab.loc["total", "symbolic_purity"])
    assert "2 (0.95)" in format_contingency(tab)
    c = pure_counts(j)
    assert c["positional"] == {"heads": 2, "purity_mean": pytest.approx(0.95), "purity_min": 0.9, "mean_only": 1,
                               "mean_only_purity_mean": 0.8}
    assert c["symbolic"]["heads"] == 0 and c["symbolic"]["mean_only"] == 1 and c["symbolic"]["purity_mean"] is None


def test_permutation_p_at_its_floor_is_printed_as_below_one_over_the_shuffles():
    c = type_correlations(_planted(), n_boot=50, n_null=1000).set_index("detector")
    assert c.loc["induction", "p_at_floor"] and c.loc["induction", "p_value"] == pytest.approx(1 / 1001)
    assert not c.loc["duplicate_token", "p_at_floor"]
    assert format_p(1 / 1001, 1000, True) == "< 0.001" and format_p(1 / 1001, 1000) == "< 0.001"
    assert format_p(1 / 21, 20) == "< 0.05" and format_p(0.0123, 1000, False) == "0.0123"
    assert format_p(float("nan"), 1000) == "nan"
