"""Purity rule, emergence step and counts (SPEC §3) on hand-made score tables."""

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.heads.dynamics import classify, normalized_entropy, pure_counts, purity_table, select_tau


def _table():
    rows = []
    # layer 0 becomes positional at step 100 and stays; layer 1 is symbolic at 100, mixed at 150, symbolic from 200;
    # layer 2 is never pure; every head starts at (1, 1) (uniform attention).
    traj = {0: [(1, 1), (0.95, 0.05), (0.97, 0.02), (0.99, 0.01)],
            1: [(1, 1), (0.05, 0.95), (0.5, 0.5), (0.02, 0.98)],
            2: [(1, 1), (0.6, 0.4), (0.7, 0.3), (0.8, 0.3)]}
    for layer, tr in traj.items():
        for step, (p, s) in zip([0, 100, 150, 200], tr):
            rows.append(dict(step=step, layer=layer, head=0, tau=1e-4, s_pos=p, s_sym=s, entropy=layer + step / 100, n_prompts=8))
            rows.append(dict(step=step, layer=layer, head=0, tau=1e-2, s_pos=1.0, s_sym=1.0, entropy=0.0, n_prompts=8))
    return pd.DataFrame(rows)


def test_classify_rule_boundaries():
    k = classify(np.array([0.9, 0.89, 0.1, 0.5, 1.0]), np.array([0.1, 0.1, 0.9, 0.5, 1.0]), gamma=0.1)
    assert list(k) == ["positional", "mixed", "symbolic", "mixed", "mixed"]


def test_purity_table_and_counts():
    pur = purity_table(_table(), gamma=0.1)
    assert list(pur["kind"]) == ["positional", "symbolic", "mixed"]
    assert pur["pure_from"].iloc[0] == 100 and pur["pure_from"].iloc[1] == 200 and np.isnan(pur["pure_from"].iloc[2])
    c = pure_counts(pur, np.array([0, 100, 200]))
    assert list(c["positional"]) == [0, 1, 1] and list(c["symbolic"]) == [0, 0, 1]
    # a stricter gamma: (0.95, 0.05) at step 100 is no longer pure, so the head is pure from step 150
    assert purity_table(_table(), gamma=0.04)["pure_from"].iloc[0] == 150


def test_tau_selection_and_entropy():
    df = _table()
    assert select_tau(df)["tau"].unique().tolist() == [1e-4]
    assert (purity_table(df, tau=1e-2)["kind"] == "mixed").all()
    with pytest.raises(PosymError, match="tau"):
        select_tau(df, 0.5)
    e = normalized_entropy(select_tau(df))
    assert e.min() == 0.0 and e.max() == 1.0
