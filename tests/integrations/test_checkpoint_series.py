"""posym scores --series on a real HF Trainer run (Paper A's pipeline) and posym dynamics on the result."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.integrations import PositionalSymbolicCallback
from posym.runs.layout import checkpoint_series
from posym.verbs.scores import score_checkpoints, score_series

from test_hf_callback import TASK, run_trainer


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    """A tiny Llama trained by HF Trainer for 30 steps with the callback; checkpoints at 10, 20, 30."""
    out = tmp_path_factory.mktemp("hf") / "run"
    run_trainer(out, [PositionalSymbolicCallback(TASK, n=32, out=out / "tracked")])
    return out


def test_series_equals_each_folder_alone_and_the_callback(hf_run, tmp_path):
    assert [s for s, _ in checkpoint_series([hf_run])] == [10, 20, 30]
    rc = main(["scores", "--series", str(hf_run), "--task", TASK, "--n", "32", "--out", str(tmp_path / "s.csv")])
    assert rc == 0
    series = pd.read_csv(tmp_path / "s.csv")
    assert sorted(series["step"].unique()) == [10, 20, 30] and len(series) == 3 * 2 * 2
    for step in (10, 20, 30):
        alone = score_checkpoints(hf_run / f"checkpoint-{step}", task=TASK, n_prompts=32, progress=False)
        block = series[series["step"] == step].drop(columns="step").reset_index(drop=True)
        pd.testing.assert_frame_equal(block, alone, check_dtype=False)
    # the callback's rows during training are the scores of the saved checkpoints
    tracked = pd.read_csv(hf_run / "tracked" / "scores.csv")
    tracked = tracked[tracked["step"] > 0].reset_index(drop=True)
    pd.testing.assert_frame_equal(tracked, series[tracked.columns], check_dtype=False, atol=1e-6, rtol=0)


def test_series_of_named_folders_and_dynamics(hf_run, tmp_path):
    folders = []
    for step in (30, 10, 20):  # any order: the steps come from the names
        dst = tmp_path / f"rev-step{step}"
        shutil.copytree(hf_run / f"checkpoint-{step}", dst)
        folders.append(dst)
    table = score_series(folders, task=TASK, n_prompts=16, progress=False)
    assert list(dict.fromkeys(table["step"])) == [10, 20, 30]
    series_dir = tmp_path / "series"
    series_dir.mkdir()
    table.to_csv(series_dir / "scores.csv", index=False)
    assert main(["dynamics", str(series_dir)]) == 0  # Fig. 2 curves and pure-head steps without metrics.csv
    assert (series_dir / "purity_gamma0.1.csv").is_file() and (series_dir / "figures" / "fig2_gamma0.1.png").is_file()


def test_series_errors(hf_run, tmp_path):
    with pytest.raises(PosymError, match="no checkpoint-N"):
        checkpoint_series([tmp_path])
    (tmp_path / "a1").mkdir()
    (tmp_path / "b1").mkdir()
    with pytest.raises(PosymError, match="not a model folder"):
        checkpoint_series([tmp_path / "a1", hf_run / "checkpoint-10"])
    with pytest.raises(PosymError, match="distinct numbers"):
        checkpoint_series([hf_run / "checkpoint-10", hf_run / "checkpoint-10"])
    assert main(["scores", "--series", str(hf_run / "checkpoint-10"), str(hf_run / "checkpoint-20"),
                 "--task", TASK]) == 2  # several folders need --out
