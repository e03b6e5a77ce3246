"""Length generalization of trained GPT-J (SPEC §1.4, Fig. 5B): rotary rebuild, grid, tables."""

import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.model.gptj import rotary_table
from posym.model.gptj import extend_positions
from posym.lengthgen.trained import (PAPER_GRID, largest_length_above, lengthgen, parse_grid,
                                     summarize_lengthgen)
from posym.verbs.lengthgen import lengthgen as lengthgen_verb
from posym.model import build_model, last_token_logits, model_config, reference_last_token_logits, save_model
from posym.tasks import generate


def _tiny(vocab=137):
    return build_model(model_config("quick", vocab, n_layer=2, n_embd=32, n_inner=64, rotary_dim=32), seed=0).eval()


def test_paper_grid():
    assert PAPER_GRID[:3] == (0, 10, 20) and 100 in PAPER_GRID and 1000 in PAPER_GRID and PAPER_GRID[-1] == 5000
    assert len(PAPER_GRID) == 11 + 9 + 8
    assert parse_grid("0,200, 1000") == [0, 200, 1000]
    with pytest.raises(PosymError, match="bad grid"):
        parse_grid("0,a")


def test_rotary_rebuild_keeps_original_logits_and_matches_hf_at_long_length():
    m = _tiny()
    x = torch.as_tensor(generate("number", 4, 0).input_ids)
    with torch.no_grad():
        before_fast, before_hf = last_token_logits(m, x), reference_last_token_logits(m, x)
        extend_positions(m, 700)
        assert rotary_table(m).shape[0] == 700
        assert torch.equal(last_token_logits(m, x), before_fast)
        assert torch.equal(reference_last_token_logits(m, x), before_hf)
        long = torch.as_tensor(generate("letter", 3, 0, extra_tokens=600).input_ids)
        assert long.shape[1] == 617
        diff = (last_token_logits(m, long) - reference_last_token_logits(m, long)).abs().max().item()
    assert diff <= 1e-5


def test_lengthgen_table_and_summary(tmp_path):
    m = _tiny(129)
    t = lengthgen(m, "letter", [0, 30], n=16, seeds=2, progress=False)
    assert list(t["extra_tokens"]) == [0, 0, 30, 30] and list(t["seed"]) == [0, 1, 0, 1]
    assert ((t["acc"] >= 0) & (t["acc"] <= 1)).all() and {"acc_hop4", "seconds", "peak_rss_mb"} <= set(t.columns)
    s = summarize_lengthgen(t)
    assert list(s["n_seeds"]) == [2, 2] and "acc_sd" in s


def test_largest_length_above():
    s = pd.DataFrame({"extra_tokens": [0, 100, 500, 800, 1000], "acc_mean": [1.0, 0.95, 0.91, 0.85, 0.92]})
    assert largest_length_above(s, 0.9) == 500
    assert largest_length_above(s.assign(acc_mean=0.5), 0.9) is None


def test_lengthgen_verb_on_foreign_checkpoint(tmp_path):
    save_model(_tiny(), tmp_path / "hf")  # an HF GPT-J dir posym did not write: needs --task
    with pytest.raises(PosymError, match="task"):
        lengthgen_verb(tmp_path / "hf", grid="0", n=4, progress=False)
    t = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=8, progress=False).table
    assert (tmp_path / "hf/lengthgen.csv").is_file() and (tmp_path / "hf/lengthgen_summary.csv").is_file()
    assert (tmp_path / "hf/figures/lengthgen_fig5b.png").is_file()  # the same place posym reproduce uses
    assert set(t["task"]) == {"number"} and set(t["extra_rule"]) == {"window"}
    before = (tmp_path / "hf/lengthgen.csv").read_bytes()
    with pytest.raises(PosymError, match="exists"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, progress=False)
    assert (tmp_path / "hf/lengthgen.csv").read_bytes() == before
    again = lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, extra_rule="copies", force=True,
                           progress=False).table
    assert set(again["extra_rule"]) == {"copies"}


def _acc_columns(t):
    return t.drop(columns=["seconds", "peak_rss_mb"]).reset_index(drop=True)


def test_resume_reuses_points_and_equals_a_fresh_run(tmp_path, monkeypatch):
    save_model(_tiny(), tmp_path / "hf")
    fresh = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20,40", n=8, seeds=2, out=tmp_path / "fresh.csv",
                           progress=False).table
    part = tmp_path / "part.csv"
    lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=8, seeds=2, out=part, progress=False)
    import posym.lengthgen.trained as trained

    seen = []
    real = trained.evaluate_length
    monkeypatch.setattr(trained, "evaluate_length", lambda m, task, extra, *a, **k: seen.append(extra) or
                        real(m, task, extra, *a, **k))
    resumed = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20,40", n=8, seeds=2, out=part, resume=True,
                             progress=False).table
    assert seen == [40, 40]  # only the missing points are evaluated
    pd.testing.assert_frame_equal(_acc_columns(resumed), _acc_columns(fresh))
    pd.testing.assert_frame_equal(_acc_columns(pd.read_csv(part)), _acc_columns(pd.read_csv(tmp_path / "fresh.csv")))


def test_resume_saves_each_point_and_survives_an_interruption(tmp_path, monkeypatch):
    save_model(_tiny(), tmp_path / "hf")
    out = tmp_path / "lg.csv"
    import posym.lengthgen.trained as trained

    real = trained.evaluate_length

    def stop_at_40(m, task, extra, *a, **k):
        if extra == 40:
            raise KeyboardInterrupt
        return real(m, task, extra, *a, **k)

    monkeypatch.setattr(trained, "evaluate_length", stop_at_40)
    with pytest.raises(KeyboardInterrupt):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0,20,40", n=8, out=out, resume=True, progress=False)
    assert list(pd.read_csv(out)["extra_tokens"]) == [0, 20]  # the finished points are on disk
    monkeypatch.setattr(trained, "evaluate_length", real)
    t = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20,40", n=8, out=out, resume=True, progress=False).table
    fresh = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20,40", n=8, out=tmp_path / "f.csv",
                           progress=False).table
    pd.testing.assert_frame_equal(_acc_columns(t), _acc_columns(fresh))


def test_resume_refuses_points_measured_otherwise(tmp_path):
    save_model(_tiny(), tmp_path / "hf")
    out = tmp_path / "lg.csv"
    lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=8, out=out, progress=False)
    before = out.read_bytes()
    for kwargs, what in (({"n": 4}, "n 8"), ({"extra_rule": "copies"}, "rule window")):
        with pytest.raises(PosymError, match=f"measured otherwise.*{what}"):
            lengthgen_verb(tmp_path / "hf", task="number", grid="0,40", out=out, resume=True, progress=False,
                           **{"n": 8, **kwargs})
        assert out.read_bytes() == before
    t = lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, out=out, resume=True, force=True,
                       progress=False).table
    assert list(t["n"]) == [4]  # --force replaces the other measurement
    (tmp_path / "bad.csv").write_text("a,b\n1,2\n")
    with pytest.raises(PosymError, match="not a lengthgen table"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, out=tmp_path / "bad.csv", resume=True,
                       progress=False)


# one writer per table (reliability probe 4, A): two --resume into one table lost points ----------------
def _holder(path, pid):
    import json
    import os

    from posym.runs.lock import DirLock

    lock = DirLock.for_file(path, "length table")
    lock.directory.mkdir(parents=True, exist_ok=True)
    lock.path.write_text(json.dumps({"pid": pid, "host": os.uname().nodename, "started": 0}))
    return lock.path


@pytest.mark.parametrize("own_table", [False, True])
def test_a_second_writer_of_one_length_table_is_refused_before_it_writes(tmp_path, own_table):
    import subprocess
    import sys

    save_model(_tiny(), tmp_path / "hf")
    out = None if own_table else tmp_path / "lg.csv"  # the run's own lengthgen.csv is covered too
    table = tmp_path / "hf/lengthgen.csv" if own_table else out
    lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, out=out, progress=False)
    before = table.read_bytes()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = _holder(table, sleeper.pid)  # a live writer holds the table
        with pytest.raises(PosymError, match=f"length table .*{table.name} is in use by process {sleeper.pid}"):
            lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, resume=True, progress=False)
        assert table.read_bytes() == before and lock.is_file()
        (tmp_path / "x").mkdir()
        with pytest.raises(PosymError, match="in use by process"):  # the path spelled otherwise: the same lock
            lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=tmp_path / "x/.." / table.relative_to(tmp_path),
                           resume=True, progress=False)
        assert table.read_bytes() == before
    finally:
        sleeper.kill()
        sleeper.wait()
    # the holder is gone: its lock is stale and taken over; the lock is removed when the call ends
    t = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, resume=True, progress=False).table
    assert list(t["extra_tokens"]) == [0, 20] and not lock.exists()


def test_the_length_table_is_locked_while_it_is_measured(tmp_path, monkeypatch):
    import posym.lengthgen.trained as trained

    save_model(_tiny(), tmp_path / "hf")
    out = tmp_path / "new" / "lg.csv"
    real, held = trained.evaluate_length, []
    monkeypatch.setattr(trained, "evaluate_length", lambda *a, **k: held.append(
        (tmp_path / "new/.lg.csv.lock").is_file()) or real(*a, **k))
    lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, resume=True, progress=False)
    assert held == [True, True] and not (tmp_path / "new/.lg.csv.lock").exists()

    def refuse(*a, **k):
        raise PosymError("too long")

    monkeypatch.setattr(trained, "evaluate_length", refuse)  # a refused call leaves no empty folder behind
    with pytest.raises(PosymError, match="too long"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0", n=4, out=tmp_path / "a/b/lg.csv", progress=False)
    assert not (tmp_path / "a").exists()


# N2: a resumed row with an intervention string posym does not write -------------------------------------
@pytest.mark.parametrize("bad, why", [("bogus:x=1", "unknown intervention"), ("ntk:kappa=4.0", "writes it 'ntk:kappa=4'")])
def test_resume_refuses_an_unknown_intervention_string(tmp_path, bad, why):
    save_model(_tiny(), tmp_path / "hf")
    out = tmp_path / "lg.csv"
    lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, progress=False)
    t = pd.read_csv(out)
    t.loc[1, "intervention"] = bad
    t.to_csv(out, index=False)
    before = out.read_bytes()
    with pytest.raises(PosymError, match=f"lg.csv row 2: intervention = '{bad}' is not a canonical.*{why}"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, resume=True, progress=False)
    assert out.read_bytes() == before
    t = lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, resume=True, force=True,
                       progress=False).table
    assert set(t["intervention"]) == {"none"} and len(t) == 2


# W5: a call that saved its table but not its figure (a full disk) is finished by --resume ---------------
def test_resume_finishes_a_table_whose_figure_was_not_written(tmp_path, monkeypatch):
    import posym.lengthgen.trained as trained
    import posym.verbs as verbs

    save_model(_tiny(), tmp_path / "hf")
    out = tmp_path / "lg.csv"
    real_figure = verbs.Outputs.figure

    def disk_full(self, fig, stem):
        raise PosymError(f"cannot write {stem}.png: No space left on device")

    monkeypatch.setattr(verbs.Outputs, "figure", disk_full)
    with pytest.raises(PosymError, match="No space left.*lg.csv holds every measured point: rerun with --resume"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, progress=False)
    table = out.read_bytes()
    assert (tmp_path / "lg_summary.csv").is_file() and not (tmp_path / "figures/lg_fig5b.png").exists()
    monkeypatch.setattr(verbs.Outputs, "figure", real_figure)
    with pytest.raises(PosymError, match="lg_fig5b.png does not .*pass --resume to write the rest"):
        lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, progress=False)
    seen = []
    monkeypatch.setattr(trained, "evaluate_length", lambda *a, **k: seen.append(a))
    lengthgen_verb(tmp_path / "hf", task="number", grid="0,20", n=4, out=out, resume=True, progress=False)
    assert seen == [] and out.read_bytes() == table  # nothing measured again, the table unchanged
    assert (tmp_path / "figures/lg_fig5b.png").is_file() and (tmp_path / "figures/lg_fig5b.pdf").is_file()
