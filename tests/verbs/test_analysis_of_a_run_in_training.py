"""Analyses never write into a run that a live writer holds, say so when they analyse one, and every
analysis table records the checkpoint step it measured (docs/reliability.md)."""

import json
import os

import pandas as pd
import pytest

from posym.errors import PosymError
from posym.model import build_model, model_config
from posym.runs.layout import LOCK, write_meta
from posym.train.checkpoints import save_checkpoint
from posym.verbs.ablate import ablate
from posym.verbs.flow import flow
from posym.verbs.freqs import freqs
from posym.verbs.lengthgen import lengthgen
from posym.verbs.scores import scores

CONFIG = {"task": "number", "preset": "quick", "config": {"task": "number", "distractors": "pool"}}


@pytest.fixture
def run(tmp_path):
    """A run with one checkpoint (step 5), as a training run has it while it trains."""
    d = tmp_path / "run"
    model = build_model(model_config("quick", 137, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32), seed=0)
    save_checkpoint(d, 5, model, CONFIG)
    write_meta(d, CONFIG)
    return d


@pytest.fixture
def training(run):
    """``run`` held by a live writer, as ``posym train`` holds it: another live process (our parent)."""
    (run / LOCK).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "started": 0}))
    return os.getppid()


ANALYSES = {
    "ablate": lambda path, **kw: ablate(path, n=8, progress=False, **kw),
    "lengthgen": lambda path, out=None: lengthgen(path, grid="0", n=4, progress=False,
                                                  out=None if out is None else out / "lengthgen.csv"),
    "freqs": lambda path, **kw: freqs(path, n=4, geometry_prompts=2, scores=False, progress=False, **kw),
    "flow": lambda path, **kw: flow(path, examples=[0], **kw),
    "scores": lambda path, out=None: scores(path, n_prompts=4, progress=False,
                                            out=None if out is None else out / "scores.csv"),
}


@pytest.mark.parametrize("verb", ANALYSES)
def test_an_analysis_refuses_to_write_into_a_run_in_training(run, training, verb):
    before = sorted(p.name for p in run.rglob("*"))
    with pytest.raises(PosymError, match=f"run .*run is still training \\(process {training}\\); analyse a finished "
                                         "run, or pass --out elsewhere"):
        ANALYSES[verb](run)
    assert sorted(p.name for p in run.rglob("*")) == before


@pytest.mark.parametrize("verb", ANALYSES)
def test_an_analysis_elsewhere_says_the_run_is_unfinished(run, training, verb, tmp_path):
    res = ANALYSES[verb](run, out=tmp_path / "elsewhere")
    assert f"still training (process {training}); this analysed step 5, not the finished run" in res.summary


def test_a_stale_lock_is_no_training(run, tmp_path):
    (run / LOCK).write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": os.uname().nodename, "started": 0}))
    res = ANALYSES["ablate"](run)
    assert "still training" not in res.summary and (run / "ablation.csv").is_file()


def test_analysis_tables_record_the_step(run, tmp_path):
    ANALYSES["ablate"](run)
    ANALYSES["freqs"](run)
    ANALYSES["flow"](run)
    for name in ("ablation.csv", "freq_use.csv", "freq_table.csv", "figures/flow-number-test-0.csv"):
        t = pd.read_csv(run / name)
        assert t.columns[0] == "step" and set(t["step"]) == {5}, name
    assert set(pd.read_csv(next(run.glob("qk_geometry_L*.csv")))["step"]) == {5}
