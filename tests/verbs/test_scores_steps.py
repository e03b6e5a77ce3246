"""``posym scores --steps``: only steps a run has, only on a run (issue 34: ``scores --model CKPT
--steps 999`` ignored the steps and exited 0)."""

from __future__ import annotations

import pytest

from posym.errors import PosymError
from posym.train import make_config
from posym.verbs.scores import score_checkpoints
from posym.verbs.train import train

TINY = dict(steps=4, eval_every=2, n_val=16, n_test=16, checkpoint_every=2, eval_batch_size=16, track_heads=False,
            model_overrides=dict(n_layer=1, n_embd=32, n_inner=64, rotary_dim=32))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("steps") / "run"
    train(make_config("number", "quick", **TINY), out, progress=False)
    return out


def test_steps_of_a_run_select_its_checkpoints(run):
    df = score_checkpoints(run, steps=[2, 4], n_prompts=4, progress=False)
    assert sorted(df["step"].unique()) == [2, 4]


@pytest.mark.parametrize("steps, msg", [([999], "step 999 has no checkpoint"),
                                        ([2, 998, 999], "steps 998, 999 have no checkpoint")])
def test_a_step_without_a_checkpoint_is_refused(run, steps, msg):
    with pytest.raises(PosymError, match=msg):
        score_checkpoints(run, steps=steps, n_prompts=4, progress=False)


def test_steps_on_one_model_folder_are_refused(run):
    with pytest.raises(PosymError, match="one model folder, not a run with checkpoints"):
        score_checkpoints(run / "checkpoints" / "step-000004", steps=[999], n_prompts=4, progress=False)
