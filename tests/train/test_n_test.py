"""``posym train --n-test N`` (issue 38): the size of the final test evaluation, default in one place
(``TrainConfig.n_test``, SPEC §1.3's 45,600); a bad count is one line, exit 2, before any work."""

from __future__ import annotations

import argparse
import json

import pytest

from posym.cli import build_parser, main
from posym.errors import PosymError
from posym.train.config import TrainConfig, make_config

TINY = ["--steps", "2", "--eval-every", "2", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_inner=16",
        "--set", "rotary_dim=16", "--no-track-heads", "--quiet"]


def test_n_test_sizes_the_final_test_evaluation(tmp_path, monkeypatch, capsys):
    import posym.train.loop as loop

    seen: list[int] = []
    real = loop.evaluate

    def counting(model, batch, *args, **kwargs):
        seen.append(len(batch.input_ids))
        return real(model, batch, *args, **kwargs)

    monkeypatch.setattr(loop, "evaluate", counting)
    run = tmp_path / "run"
    assert main(["train", "--task", "number", "--out", str(run), "--n-test", "64", *TINY]) == 0
    assert seen[-1] == 64  # the final evaluation: the test split's first 64 sequences
    assert json.loads((run / "posym.json").read_text())["config"]["n_test"] == 64
    import pandas as pd

    test = pd.read_csv(run / "metrics.csv").query("split == 'test'")
    assert len(test) == 1
    assert float(test["acc"].iloc[0] * 64) == pytest.approx(round(test["acc"].iloc[0] * 64))  # k / 64


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", "many"])
def test_bad_n_test_is_one_line_before_any_work(tmp_path, capsys, bad):
    run = tmp_path / "run"
    assert main(["train", "--task", "number", "--out", str(run), "--n-test", bad, *TINY]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("posym: error: train: argument --n-test") and bad in err[0]
    assert not run.exists()


def test_default_lives_in_the_config_and_the_python_api_checks_it():
    option = next(a for a in build_parser()._subparsers._group_actions[0].choices["train"]._actions
                  if a.dest == "n_test")
    assert option.default == argparse.SUPPRESS
    assert make_config("number", "quick").n_test == TrainConfig.n_test == 45600
    assert make_config("number", "quick", n_test=300).n_test == 300
    for bad in (0, -3, 2.5, True):
        with pytest.raises(PosymError, match="n_test must be an integer >= 1"):
            make_config("number", "quick", n_test=bad)


def test_help_shows_the_config_default(capsys):
    assert main(["train", "--help"]) == 0
    assert "45,600" in " ".join(capsys.readouterr().out.split())
