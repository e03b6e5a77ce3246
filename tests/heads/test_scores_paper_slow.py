"""Fast == reference on trained *paper-preset* GPT-J checkpoints of both tasks.

Trains the paper preset (12 layers, dropout 0.1, SPEC §2 optimiser) for a few hundred steps per
task — minutes on a CPU, hence slow. The full-length runs are compared in benchmarks/score_speed.py.
"""

import numpy as np
import pytest

from posym.heads import scores_fast, scores_reference
from posym.model import load_model
from posym.tasks import make_split
from posym.train import make_config
from posym.verbs.train import train


@pytest.mark.slow
@pytest.mark.parametrize("task", ["number", "letter"])
def test_fast_equals_reference_on_trained_paper_preset(task, tmp_path):
    cfg = make_config(task, "paper", steps=400, eval_every=400, n_val=64, n_test=64, track_heads=False)
    train(cfg, tmp_path / task, progress=False)
    model = load_model(tmp_path / task / "checkpoints" / "step-000400")
    ids = make_split(task, "test", n=8).input_ids
    fast = scores_fast(model, ids, taus=(1e-4, 1e-2))
    ref = scores_reference(model, ids, taus=(1e-4, 1e-2))
    assert np.abs(fast.s_pos - ref.s_pos).max() <= 1e-5
    assert np.abs(fast.s_sym - ref.s_sym).max() <= 1e-5
    assert np.abs(fast.entropy - ref.entropy).max() <= 1e-5
