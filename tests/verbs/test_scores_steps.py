"""``posym scores --steps``: only steps a run has, only on a run (issue 34: ``scores --model CKPT
--steps 999`` ignored the steps and exited 0)."""

from __future__ import annotations

import pytest

from posym.errors import PosymError
from posym.verbs.scores import score_checkpoints

from tiny_runs import tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("steps") / "run", track_heads=False)


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
