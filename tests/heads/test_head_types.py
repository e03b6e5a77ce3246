"""The head-type join, its labels, rank correlations and contingency table (docs/spec.md, "Classic
head detectors and per-prompt readings"), on hand-built tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.heads.head_types import (
    CLASSIC_TYPES,
    POSYM_TYPES,
    classic_types,
    contingency,
    join_head_types,
    posym_types,
    spearman,
    type_correlations,
)


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
