"""The acceptance of issue 37 point 3 for ``posym head-sets``: on the known-answer model (head L1H2 carries
the answer through frequency ID ``pair`` alone, tests/known_heads.py) with a hand-made readout typing L1H2 as
the set under test, the study finds that head and that pair — dropping that ID inside the set drops accuracy,
its permutation p sits at the floor 1/(1 + K) (K distinct count-matched controls;
layer-matched: all 3 that exist) and its BH-adjusted p is below every other cell's — and the
matched random controls (other heads of layer 1) find nothing (effect 0)."""

import numpy as np
import pandas as pd
import pytest
import torch

from posym.interventions import intervened
from posym.lengthgen.outcomes import candidate_ranks, prompt_outcomes
from posym.studies.head_sets import measure_head_sets

from known_heads import build_known_answer_model

K = 6


def _readout() -> pd.DataFrame:
    rows = [{"layer": ly, "head": h, "posym_type": "mixed", "classic_type": "none", "is_sink": False}
            for ly in range(2) for h in range(4)]
    df = pd.DataFrame(rows)
    df.loc[(df["layer"] == 1) & (df["head"] == 2), ["posym_type", "classic_type"]] = ["positional", "previous_token"]
    return df


@pytest.mark.parametrize("family, pair", [("gptj", 1), ("llama", 2)])
def test_the_study_finds_the_answer_head_and_its_pair(family, pair):
    torch.set_num_threads(1)
    model, ids, labels = build_known_answer_model(family, (1, 2), pair, n_prompts=64, length=6)
    calls = []

    def evaluate(iv: str, extra: int) -> pd.DataFrame:
        calls.append(iv)
        return prompt_outcomes(model, ids, labels, intervene=lambda: intervened(model, iv))

    table, controls, notes = measure_head_sets(
        evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional", "symbolic"), controls=K, seed=0,
        doses=(1, 2), directions=("low", "high"), temperature=(), readout_name="hand-made", match="count")
    assert notes == ["symbolic: no head of this type in the readout; skipped"]
    assert set(table["heads"]) == {"L1H2"} and set(table["acc_none"]) == {1.0}
    hit = table["dropped"].str.split("+").apply(lambda ids_: str(pair) in ids_)
    assert hit.any() and (~hit).any()
    # the pair dropped inside the set: accuracy falls, p at the permutation floor (K = 6 distinct heads of the
    # 7 others), BH below every other cell
    assert (table.loc[hit, "effect"] > 0.5).all() and (table.loc[hit, "effect_lo"] > 0.3).all()
    assert set(table["n_controls"]) == {K} and np.allclose(table.loc[hit, "p"], 1 / (1 + K))
    assert table.loc[hit, "p_bh"].max() < table.loc[~hit, "p_bh"].min()
    # any other ID changes nothing; the controls (other heads) find nothing anywhere
    assert (table.loc[~hit, "effect"] == 0).all()
    assert (controls["effect"] == 0).all() and len(controls) == len(table) * K
    assert "L1H2" not in set(controls["heads"]) and controls.groupby("k")["heads"].nunique().eq(K).all()
    # layer-matched: one head among 3 others of its layer, so only 3 distinct controls exist; K = 6 asks gives
    # all 3 (the exact null) and the floor is 1/(1 + 3), not the 1/(1 + 6) repeated draws would claim
    layer_t, layer_c, _ = measure_head_sets(
        evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional",), controls=K, seed=0,
        doses=(1, 2), directions=("low", "high"), temperature=(), readout_name="hand-made")
    assert set(layer_t["n_controls"]) == {3} and np.allclose(layer_t.loc[hit, "p"], 1 / (1 + 3))
    assert sorted(set(layer_c["heads"])) == ["L1H0", "L1H1", "L1H3"]
    assert (table["rank"][hit] > table["rank_none"][hit]).all()
    # the rank test: the answer's rank rises in the hit cells only, above every control, and BH keeps that order
    assert np.allclose(table.loc[hit, "rank_effect"], table.loc[hit, "rank"] - table.loc[hit, "rank_none"])
    assert (table.loc[hit, "rank_effect"] > 0).all() and (table.loc[~hit, "rank_effect"] == 0).all()
    assert np.allclose(table.loc[hit, "p_rank"], 1 / (1 + K)) and (table.loc[~hit, "p_rank"] == 1).all()
    assert (table.loc[hit, "ctrl_rank_effect_mean"] == 0).all() and table["p_rank_bh"].notna().all()


def test_candidate_rank_rule():
    logits = np.array([[0.0, 3.0, 1.0, 2.0], [5.0, 0.0, 0.0, 0.0]])
    rank, count = candidate_ranks(logits, np.array([3, 0]), np.array([[1, 2, 3, 3], [0, 1, 2, 0]]))
    assert rank.tolist() == [0.5, 0.0] and count.tolist() == [3, 3]  # label 3 second of {1, 2, 3}
