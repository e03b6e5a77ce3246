"""``posym reproduce`` on a CUDA device runs the ablate/freqs/lengthgen stages of all runs in one worker
process (issue 39 point 3), the other stages in the pool; the stage functions' names stay importable from
``posym.verbs.reproduce``. No GPU here: the routing is switched on for the CPU by patching the one predicate."""

from __future__ import annotations

import os

import pytest

import posym.verbs.reproduce as rp
from posym.runs.layout import read_marker
from posym.verbs import reproduce_stages

KINDS = ("train", "dynamics", "flow", "ablate", "freqs", "lengthgen")


def where_am_i(ctx, *args) -> dict:
    """A stand-in stage (module level: pickled by name into spawned workers): the process it ran in."""
    return {"pid": os.getpid()}


def test_stage_names_still_importable_from_reproduce():
    for name in reproduce_stages.__all__:
        assert getattr(rp, name) is getattr(reproduce_stages, name), name
    assert rp.STAGE_FUNCS["ablate"] is reproduce_stages.stage_ablate


def test_predicate():
    assert rp.analyses_in_one_process("cuda", 2) and rp.analyses_in_one_process("cuda:1", 4)
    assert not rp.analyses_in_one_process("cpu", 2) and not rp.analyses_in_one_process("cuda", 1)


@pytest.mark.integration  # spawns three worker processes
def test_analyses_of_all_runs_in_one_process(tmp_path, monkeypatch):
    for kind in KINDS:
        monkeypatch.setitem(rp.STAGE_FUNCS, kind, where_am_i)
    monkeypatch.setattr(rp, "analyses_in_one_process", lambda device, jobs: jobs > 1)
    out = tmp_path / "repro"
    rp.reproduce("tiny", out=out, seeds=2, jobs=2, llm=False, progress=False, stages=list(KINDS))
    pid = {k: {read_marker(out, f"{k}-{t}-s{s}")["info"]["pid"] for t in ("number", "letter") for s in (0, 1)}
           for k in KINDS}
    analyses = pid["ablate"] | pid["freqs"] | pid["lengthgen"]
    assert len(analyses) == 1  # 12 stages, one process
    others = pid["train"] | pid["dynamics"] | pid["flow"]
    assert not analyses & others and os.getpid() not in analyses | others
