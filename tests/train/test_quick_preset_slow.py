"""The quick preset reaches >= 0.95 test accuracy on both tasks. Minutes each: slow."""

import pytest

from posym.train import make_config
from posym.verbs.train import train


@pytest.mark.slow
@pytest.mark.parametrize("task", ["number", "letter"])
def test_quick_preset_learns(task, tmp_path):
    result = train(make_config(task, "quick"), tmp_path / task, progress=False)
    assert result.test["acc"] >= 0.95
    assert min(result.test[f"acc_hop{h}"] for h in range(1, 5)) >= 0.9
