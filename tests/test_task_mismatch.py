"""A posym model knows its task: scored or evaluated on the other task's prompts it warns in one line
(API: PosymWarning; CLI: ``posym: warning: …``), issue 34 item 2 (the README's API example scored a
number model on letter prompts and read 0 pure positional heads, unsaid)."""

from __future__ import annotations

import json
import warnings

import pytest

from posym.checks import MODEL_TASK_ATTR, model_task, warn_other_task
from posym.errors import PosymWarning
from posym.heads import scores_fast
from posym.lengthgen.trained import lengthgen
from posym.model import load_model
from posym.tasks import make_split
from posym.train.evaluate import evaluate

from tiny_runs import tiny_run


@pytest.fixture(scope="module")
def number_ckpt(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("task") / "number", track_heads=False) / "checkpoints" / "step-000004"


def test_a_trained_checkpoint_names_its_task_in_config_json(number_ckpt):
    assert json.loads((number_ckpt / "config.json").read_text())[MODEL_TASK_ATTR] == "number"
    assert model_task(load_model(number_ckpt)) == "number"


def test_scores_on_the_other_tasks_prompts_warn_once_in_one_line(number_ckpt):
    model = load_model(number_ckpt)
    with pytest.warns(PosymWarning, match="trained on the number task but is scored on letter prompts") as rec:
        scores_fast(model, make_split("letter", "val", n=4))
    assert all("\n" not in str(w.message) for w in rec)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PosymWarning)  # the right task: no warning
        scores_fast(model, make_split("number", "val", n=4))
        evaluate(model, make_split("number", "val", n=4))


def test_evaluation_and_lengthgen_on_the_other_task_warn(number_ckpt):
    model = load_model(number_ckpt)
    with pytest.warns(PosymWarning, match="evaluated on letter prompts"):
        evaluate(model, make_split("letter", "val", n=4))
    with pytest.warns(PosymWarning, match="evaluated on letter prompts"):
        lengthgen(model, "letter", grid=[0], n=4, progress=False)


def test_a_model_of_unknown_task_never_warns():
    class Bare:
        config = object()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PosymWarning)
        assert warn_other_task(Bare(), "letter") is False
        assert warn_other_task(None, "letter") is False


def test_the_cli_prints_the_warning_as_one_line(capsys):
    from posym import cli

    @cli._posym_warnings()
    def run():
        warnings.warn(PosymWarning("this model was trained on the number task but is scored on letter prompts"))
        warnings.warn(PosymWarning("this model was trained on the number task but is scored on letter prompts"))
    run()
    err = capsys.readouterr().err
    assert err == "posym: warning: this model was trained on the number task but is scored on letter prompts\n"
