"""Shared fixture for the head-score tests: a briefly trained GPT-J (non-uniform attention)."""

from __future__ import annotations

import pytest
import torch

from posym.model import load_model


@pytest.fixture(scope="session")
def trained_number_model(tmp_path_factory):
    """A 3-layer quick-preset GPT-J trained 150 steps on the number task (non-uniform attention)."""
    from posym.train import make_config
    from posym.verbs.train import train

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("heads") / "run"
    cfg = make_config("number", "quick", steps=150, eval_every=150, n_val=64, n_test=64,
                      model_overrides=dict(n_layer=3))
    train(cfg, out, progress=False)
    return load_model(out / "checkpoints" / "step-000150")
