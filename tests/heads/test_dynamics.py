"""Purity rule, emergence step and counts (SPEC §3) on hand-made score tables."""

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
import posym.heads
import posym.heads.dynamics
from posym.heads.dynamics import (accuracy_keys, classify, entropy_minmax_over_training, pure_counts, purity_table,
                                  select_tau, trainer_eval_history)


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
    e = entropy_minmax_over_training(select_tau(df))
    assert e.min() == 0.0 and e.max() == 1.0


def test_entropy_names_say_what_they_compute():
    """Two entropies, two names: H / ln n (the scores.csv column) and its min–max over training."""
    assert not hasattr(posym.heads, "normalised_entropy")
    assert not hasattr(posym.heads.dynamics, "normalized_entropy")
    assert callable(posym.heads.attention_entropy)
    # a head whose H / ln n barely moves (0.985 … 0.995) still spans 0 … 1 after the rescaling
    df = pd.DataFrame({"step": [0, 1, 2], "layer": 0, "head": 0, "tau": 1e-4, "entropy": [0.995, 0.99, 0.985]})
    assert entropy_minmax_over_training(df).tolist() == pytest.approx([1.0, 0.5, 0.0])


def test_trainer_eval_history_keeps_eval_numbers_per_step():
    log = [{"step": 10, "loss": 4.0, "learning_rate": 1e-3},
           {"step": 10, "eval_loss": 3.5, "eval_accuracy": 0.25, "eval_runtime": 1.2, "epoch": 0.1},
           {"step": 20, "eval_loss": 2.0, "eval_accuracy": 0.5, "eval_samples_per_second": 9.0},
           {"step": 20, "posym/s_pos/layer_0": 0.9},
           {"train_runtime": 30.0}]
    h = trainer_eval_history(log)
    assert list(h.columns) == ["step", "eval_accuracy", "eval_loss"]
    assert h["step"].tolist() == [10, 20] and h["eval_loss"].tolist() == [3.5, 2.0]
    assert accuracy_keys(h) == ["eval_accuracy"]
    assert trainer_eval_history([{"step": 5, "loss": 1.0}]).empty
