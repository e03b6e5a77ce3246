"""posym reproduce: stages, markers, resuming, failures, the LLM stage, the CLI."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest
from ctrl_c import default_sigint

import posym.verbs.reproduce as rp
from posym.cli import main
from posym.errors import PosymError
from posym.report.aggregate import paper_vs_posym
from posym.runs.layout import marker_path, read_marker
from posym.verbs.reproduce import plan_stages, preset_settings, reproduce, select_stages

ALL = [s.name for s in plan_stages(("number", "letter"), 2, llm=False)]


def _last_run(out: Path) -> dict:
    return json.loads((out / "stages" / "last_run.json").read_text())


def _again(out: Path, **kw) -> Path:
    kw = {"seeds": 2, "jobs": 1, "llm": False, "progress": False, **kw}
    return reproduce("tiny", out=out, **kw)


def test_every_stage_has_a_marker_and_outputs(tiny_repro):
    out = tiny_repro
    assert len(ALL) == 2 * 2 * 6 + 2  # train + 5 analyses per (task, seed), discrepancy, report
    for name in ALL:
        m = read_marker(out, name)
        assert m is not None and m["status"] == "done" and m["seconds"] >= 0, name
    assert sorted(_last_run(out)["executed"]) == sorted(ALL)
    assert not list((out / "stages").glob(".*.tmp"))  # atomic writes leave no temporaries
    for task in ("number", "letter"):
        for k in (0, 1):
            run = out / task / f"seed{k}"
            cfg = json.loads((run / "posym.json").read_text())["config"]
            assert (cfg["seed"], cfg["data_seed"], cfg["order_seed"]) == (k, k, k)
            assert cfg["track_heads"] and cfg["model_overrides"]["n_layer"] == 2
            for f in ("metrics.csv", "scores.csv", "results.json", "purity_gamma0.1.csv", "ablation.csv",
                      "freq_table.csv", "lengthgen_summary.csv", "flow.json", "figures/fig2_gamma0.1.png",
                      "figures/ablation.png", "figures/freq_use.png", "figures/lengthgen_fig5b.png"):
                assert (run / f).is_file(), (run, f)
    assert (out / "theory" / "discrepancy.csv").is_file()
    assert (out / "report.html").stat().st_size > 10_000
    agg = pd.read_csv(out / "aggregate" / "training.csv")
    assert set(agg.loc[agg["quantity"].str.startswith("test"), "n"]) == {2}  # both seeds aggregated
    meta = json.loads((out / "reproduce.json").read_text())
    assert meta["preset"] == "tiny" and meta["seeds"] == 2 and meta["settings"] == preset_settings("tiny")


def test_rerun_skips_every_stage(repro_copy, capsys):
    t0 = time.perf_counter()
    _again(repro_copy, jobs=2)
    assert time.perf_counter() - t0 < 20
    last = _last_run(repro_copy)
    assert last["executed"] == [] and not last["failed"]
    lines = [l for l in capsys.readouterr().out.splitlines() if l.startswith("[reproduce] ")]
    assert sum(" skip " in l for l in lines) == len(ALL)
    assert not any(" start " in l for l in lines)


def test_failed_stage_leaves_no_marker_and_rerun_redoes_only_it(repro_copy, monkeypatch):
    out = repro_copy
    victim = "freqs-number-s1"
    marker_path(out, victim).unlink()
    before = {n: marker_path(out, n).stat().st_mtime_ns for n in ALL if n not in (victim, "report")}

    def boom(*a, **k):
        raise RuntimeError("injected failure")

    monkeypatch.setattr("posym.verbs.freqs.freqs", boom)
    with pytest.raises(PosymError, match=victim):
        _again(out)
    assert read_marker(out, victim) is None
    assert read_marker(out, "report") is None  # the report was rewritten but is not up to date
    assert (out / "report.html").is_file()
    last = _last_run(out)
    assert last["executed"] == [victim, "report"] and "injected failure" in last["failed"][victim]
    assert {n: marker_path(out, n).stat().st_mtime_ns for n in before} == before

    monkeypatch.undo()
    _again(out)
    assert _last_run(out)["executed"] == [victim, "report"]
    assert read_marker(out, victim) is not None and read_marker(out, "report") is not None
    _again(out)
    assert _last_run(out)["executed"] == []


def test_failed_training_blocks_its_analyses(repro_copy, monkeypatch):
    out = repro_copy
    for name in ("train-letter-s0", "dynamics-letter-s0"):
        marker_path(out, name).unlink()

    def boom(*a, **k):
        raise PosymError("injected training failure")

    monkeypatch.setitem(rp.STAGE_FUNCS, "train", boom)
    with pytest.raises(PosymError, match="train-letter-s0"):
        _again(out)
    last = _last_run(out)
    assert last["blocked"] == ["dynamics-letter-s0"] and list(last["failed"]) == ["train-letter-s0"]
    assert read_marker(out, "dynamics-letter-s0") is None

    monkeypatch.undo()
    _again(out)
    assert _last_run(out)["executed"] == ["train-letter-s0", "dynamics-letter-s0", "report"]
    assert read_marker(out, "train-letter-s0")["info"]["note"] == "already trained"


def test_interrupted_training_resumes(repro_copy, monkeypatch):
    import posym.verbs.train as verbs_train

    out = repro_copy
    run = out / "number" / "seed0"
    final = pd.read_csv(run / "metrics.csv").query("split == 'test'").iloc[-1]
    shutil.rmtree(run)
    marker_path(out, "train-number-s0").unlink()
    real_train = verbs_train.train_loop

    def kill_at_step_20(step, model, run_dir):
        if step >= 20:
            raise RuntimeError("killed")

    monkeypatch.setattr(verbs_train, "train_loop",
                        lambda *a, callbacks=(), **k: real_train(*a, **k, callbacks=[*callbacks, kill_at_step_20]))
    with pytest.raises(PosymError, match="killed"):
        _again(out, stages=["train-number-s0"])
    assert read_marker(out, "train-number-s0") is None and not (run / "results.json").exists()

    monkeypatch.undo()
    _again(out, stages=["train-number-s0", "report"])
    assert read_marker(out, "train-number-s0")["info"]["resumed"] is True
    again = pd.read_csv(run / "metrics.csv")
    assert again[again["split"] == "test"].iloc[-1]["acc"] == pytest.approx(final["acc"])  # resume is exact
    assert _last_run(out)["executed"] == ["train-number-s0", "report"]


def test_other_settings_are_refused(tiny_repro):
    with pytest.raises(PosymError, match="made with preset 'tiny', not 'quick'"):
        reproduce("quick", out=tiny_repro, llm=False, progress=False)
    with pytest.raises(PosymError, match="made with ablation_n=32, not 33, and stage ablate-letter-s0 is done"):
        reproduce("tiny", out=tiny_repro, llm=False, progress=False, overrides={"ablation_n": 33})


def test_llm_skipped_with_a_note_when_the_extra_is_absent(repro_copy, monkeypatch):
    note = "the [llm] extra is not installed (test)"
    monkeypatch.setattr(rp, "llm_available", lambda model: (False, note))
    _again(repro_copy, llm=True)
    last = _last_run(repro_copy)
    assert "llm" in last["skipped"] and last["executed"] == ["report"]
    assert read_marker(repro_copy, "llm") is None
    assert note in json.loads((repro_copy / "llm" / "skipped.json").read_text())["reason"]
    assert note in (repro_copy / "report.html").read_text()
    _again(repro_copy, llm=True)  # same note: nothing to redo
    assert _last_run(repro_copy)["executed"] == []


def test_llm_stage_runs_the_protocol_and_reaches_the_report(repro_copy, monkeypatch):
    import importlib

    le = importlib.import_module("posym.lengthgen.llm_eval")  # the module (the package exports a function)

    calls = {}

    def fake_llm_eval(model=None, out=None, threads=None, progress=True, lengths=(), n=1, runs=1, **kw):
        calls.update(lengths=list(lengths), n=n, runs=runs)
        return le.run_protocol(lambda prompts: ["z"] * len(prompts), "fake-llm", out, lengths=[32, 100], runs=2,
                               n=2, progress=False)

    monkeypatch.setattr(rp, "llm_available", lambda model: (True, "fake.gguf"))
    monkeypatch.setattr(le, "llm_eval", fake_llm_eval)
    _again(repro_copy, llm=True)
    assert _last_run(repro_copy)["executed"] == ["llm", "report"]
    assert calls == {"lengths": [12], "n": 2, "runs": 1}  # the tiny preset's settings
    assert (repro_copy / "llm" / "figures" / "llm_lengthgen.png").is_file()
    page = (repro_copy / "report.html").read_text()
    assert "fake-llm" in page and "Table 3 not reproduced" not in page
    pv = pd.read_csv(repro_copy / "aggregate" / "paper_vs_posym.csv")
    t3 = pv[pv["section"].str.startswith("Table 3")]
    assert len(t3) == 4 and set(t3["paper_text"]) == {"< 0.5", "< 0.1", "> 0.88", "> 0.65"}


def test_choice_stage_writes_its_table_and_reaches_the_report(repro_copy, monkeypatch):
    """llm_choice=true adds the log-likelihood protocol (stage choice) beside the generate protocol."""
    import importlib

    le = importlib.import_module("posym.lengthgen.llm_eval")
    protocols = []

    def fake_llm_eval(model=None, out=None, threads=None, progress=True, lengths=(), n=1, runs=1, protocol="generate",
                      **kw):
        protocols.append(protocol)
        if protocol == "generate":
            return le.run_protocol(lambda prompts: ["z"] * len(prompts), "fake-llm", out, lengths=[32], runs=1, n=2,
                                   progress=False)
        return le.run_protocol(lambda prompts, cands: [[0.0] * len(c) for c in cands], "fake-llm", out, lengths=[32],
                               runs=1, n=2, progress=False, protocol="choice")

    monkeypatch.setattr(rp, "llm_available", lambda model: (True, "fake.gguf"))
    monkeypatch.setattr(le, "llm_eval", fake_llm_eval)
    _again(repro_copy, llm=True, overrides={"llm_choice": True})
    assert sorted(protocols) == ["choice", "generate"] and read_marker(repro_copy, "choice") is not None
    table = pd.read_csv(repro_copy / "llm" / "choice" / "llm_table.csv")
    assert set(table["protocol"]) == {"choice"} and (table["chance"] > 0).all()
    page = (repro_copy / "report.html").read_text()
    assert "Log-likelihood protocol" in page and "number chance" in page
    with pytest.raises(PosymError, match="llm_choice"):
        _again(repro_copy, llm=True, overrides={"llm_choice": "yes"})


def test_every_model_of_llm_models_gets_its_stages_folder_and_report_section(repro_copy, monkeypatch):
    """llm_models: the first model writes DIR/llm/, each other DIR/llm/models/<name>/ (stages llm-<name>,
    choice-<name>); a model that is not installed is skipped with its own note; the report shows every
    model, and the aggregate figure draws every model and protocol."""
    import importlib

    le = importlib.import_module("posym.lengthgen.llm_eval")
    asked = []

    def fake_llm_eval(model=None, out=None, threads=None, progress=True, lengths=(), n=1, runs=1,
                      protocol="generate", **kw):
        asked.append((model, protocol, Path(out).relative_to(repro_copy).as_posix()))
        acc = {"m-one": "z", "m-two": "y"}[model]
        if protocol == "generate":
            return le.run_protocol(lambda prompts: [acc] * len(prompts), f"label-{model}", out, lengths=[32], runs=1,
                                   n=2, progress=False)
        return le.run_protocol(lambda prompts, cands: [[0.0] * len(c) for c in cands], f"label-{model}", out,
                               lengths=[32], runs=1, n=2, progress=False, protocol="choice")

    available = {"m-one": (True, "one.gguf"), "m-two": (True, "two.gguf"), "runs/m-three/": (False, "not here")}
    monkeypatch.setattr(rp, "llm_available", lambda model: available[model])
    monkeypatch.setattr("posym.verbs.settings.check_llm_model_setting", lambda model: None)  # stand-in models
    monkeypatch.setattr(le, "llm_eval", fake_llm_eval)
    _again(repro_copy, llm=True, overrides={"llm_choice": True, "llm_models": ["m-one", "m-two", "runs/m-three/"]})
    assert sorted(asked) == [("m-one", "choice", "llm/choice"), ("m-one", "generate", "llm"),
                             ("m-two", "choice", "llm/models/m-two/choice"), ("m-two", "generate", "llm/models/m-two")]
    last = _last_run(repro_copy)
    assert sorted(last["executed"]) == ["choice", "choice-m-two", "llm", "llm-m-two", "report"]
    assert {"choice-m-three", "llm-m-three"} <= set(last["skipped"]) and read_marker(repro_copy, "llm-m-three") is None
    assert "not here" in json.loads((repro_copy / "llm/models/m-three/skipped.json").read_text())["reason"]
    page = (repro_copy / "report.html").read_text()
    assert "label-m-one" in page and "label-m-two" in page and "not here" in page
    both = pd.read_csv(repro_copy / "aggregate" / "llm_models.csv")
    assert sorted(set(zip(both["model"], both["protocol"]))) == [
        ("label-m-one", "choice"), ("label-m-one", "generate"), ("label-m-two", "choice"), ("label-m-two", "generate")]
    assert (repro_copy / "aggregate" / "figures" / "llm_models.png").is_file()
    with pytest.raises(PosymError, match="name the models in llm_models"):
        _again(repro_copy, llm=True, overrides={"llm": {"model": "m-two"}})
    with pytest.raises(PosymError, match="share the folder name 'm-two'"):
        _again(repro_copy, llm=True, overrides={"llm_models": ["m-two", "x/m-two"]})


def test_a_directory_made_before_llm_models_existed_stays_resumable(repro_copy, monkeypatch):
    """reproduce.json written before the llm_models setting means the one model of then (SmolLM2): a
    re-run is not refused, while naming other models contradicts the finished llm stage."""
    import importlib

    le = importlib.import_module("posym.lengthgen.llm_eval")
    monkeypatch.setattr(rp, "llm_available", lambda model: (True, "fake.gguf"))

    def fake_llm_eval(model=None, out=None, threads=None, progress=True, lengths=(), n=1, runs=1, **kw):
        return le.run_protocol(lambda prompts: ["z"] * len(prompts), "fake-llm", out, lengths=[32], runs=1, n=2,
                               progress=False)

    monkeypatch.setattr(le, "llm_eval", fake_llm_eval)
    _again(repro_copy, llm=True)
    meta_path = repro_copy / "reproduce.json"
    meta = json.loads(meta_path.read_text())
    del meta["settings"]["llm_models"]
    meta_path.write_text(json.dumps(meta))
    _again(repro_copy, llm=True)
    assert _last_run(repro_copy)["executed"] == []
    with pytest.raises(PosymError, match="made with llm_models=.*stage llm is done"):
        _again(repro_copy, llm=True, overrides={"llm_models": ["gemma3-270m"]})


def test_stage_selection():
    stages = plan_stages(("number", "letter"), 2)
    assert [s.name for s in select_stages(stages, ["freqs"])] == [
        "freqs-number-s0", "freqs-number-s1", "freqs-letter-s0", "freqs-letter-s1"]
    assert [s.name for s in select_stages(stages, ["train-letter", "llm"])] == [
        "train-letter-s0", "train-letter-s1", "llm"]
    assert [s.name for s in select_stages(stages, ["ablate-number-s1"])] == ["ablate-number-s1"]
    with pytest.raises(PosymError, match="unknown stage"):
        select_stages(stages, ["nope"])
    report = stages[-1]
    assert report.name == "report" and set(report.deps) == {s.name for s in stages[:-1]}
    with pytest.raises(PosymError, match="unknown preset"):
        preset_settings("huge")
    with pytest.raises(PosymError, match="unknown reproduction setting"):
        preset_settings("quick", {"ablation": 3})
    assert preset_settings("quick", {"llm": {"n": 3}})["llm"] == {"lengths": [12, 32, 100], "n": 3, "runs": 2}


def test_unselected_missing_dependency_blocks(tmp_path):
    with pytest.raises(PosymError, match="dynamics-number-s0"):
        reproduce("tiny", out=tmp_path / "r", tasks=("number",), stages=["dynamics-number-s0"], llm=False,
                  progress=False)
    assert _last_run(tmp_path / "r")["blocked"] == ["dynamics-number-s0"]
    assert read_marker(tmp_path / "r", "dynamics-number-s0") is None


def test_cli_reproduce_and_report(repro_copy, capsys):
    argv = ["reproduce", "--preset", "tiny", "--out", str(repro_copy), "--seeds", "2", "--no-llm", "--quiet",
            "--jobs", "1"]
    assert main(argv) == 0
    assert _last_run(repro_copy)["executed"] == []
    assert f"report: {repro_copy / 'report.html'}" in capsys.readouterr().out
    before = (repro_copy / "report.html").stat().st_mtime_ns
    assert main(["report", str(repro_copy)]) == 2  # the overwrite rule: an existing report needs --force
    assert (repro_copy / "report.html").stat().st_mtime_ns == before
    assert main(["report", str(repro_copy), "--force"]) == 0
    assert (repro_copy / "report.html").stat().st_mtime_ns > before
    assert main(["reproduce", "--preset", "huge", "--out", str(repro_copy / "x")]) == 2
    assert "argument --preset: invalid choice: 'huge'" in capsys.readouterr().err
    assert main(["reproduce", "--out", str(repro_copy), "--tasks", "words"]) == 2
    assert main(["report", str(repro_copy / "missing")]) == 2
    capsys.readouterr()
    assert main(["report", str(repro_copy), "--markdown"]) == 0
    md = capsys.readouterr().out.splitlines()
    pv = paper_vs_posym(repro_copy)
    table = [line for line in md if line.startswith("| ")]
    assert table[0].startswith("| section | task | quantity | paper |") and len(table) == len(pv) + 1
    assert all(line.count(" | ") == 8 for line in table)  # 9 columns (verdict too), no stray "|" inside a cell
    assert "number | test acc | 1 | " in md[2] and " ± " in md[2]  # 2 seeds: mean ± sd
    assert main(argv + ["--set", "ablation_n=16"]) == 2  # other settings than the directory was made with
    assert "made with ablation_n=32, not 16" in capsys.readouterr().err


def test_cli_reproduce_settings_overrides(tmp_path):
    out = tmp_path / "r"
    argv = ["reproduce", "--preset", "tiny", "--out", str(out), "--no-llm", "--quiet", "--jobs", "1",
            "--stages", "discrepancy", "--set", "discrepancy.n_max=12", "--set", "lengthgen_grid=0,5"]
    assert main(argv) == 0
    settings = json.loads((out / "reproduce.json").read_text())["settings"]
    assert settings["discrepancy"] == {**rp.PRESETS["tiny"]["discrepancy"], "n_max": 12}
    assert settings["lengthgen_grid"] == "0,5"
    n = pd.read_csv(out / "theory" / "discrepancy.csv")["n"]
    assert n.max() == 12
    assert main(argv[:-2] + ["--set", "no_such_setting=1"]) == 2
    assert main(argv[:-4] + ["--set", "llm=3", "--set", "llm.n=2"]) == 2  # a value, then a key inside it


@pytest.mark.parametrize("overrides, needle", [
    ({"llm_models": ["NOPE"]}, "no such model folder"),
    ({"llm_models": ["smollm2", "NOPE.gguf"]}, "not found"),
    ({"llm": {"max_new_tokens": 0}}, "llm.max_new_tokens"),
    ({"llm": {"device": "foo"}}, "llm.device"),
    ({"llm": {"dtype": "bogus"}}, "llm.dtype"),
    ({"llm": {"protocol": "choice"}}, "llm.protocol"),
])
def test_llm_settings_and_models_are_checked_before_any_stage(tmp_path, overrides, needle):
    """A bad llm.* value or an llm_models entry that does not exist is refused before anything is created
    (it used to fail at its stage, or be skipped with a note and rc 0)."""
    overrides = json.loads(json.dumps(overrides).replace("NOPE", str(tmp_path / "nope")))
    with pytest.raises(PosymError, match=needle):
        reproduce("tiny", out=tmp_path / "r", llm=True, progress=False, overrides=overrides)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def _reproduce_process(out: Path, *extra: str):
    """``posym reproduce --preset tiny --jobs 2`` training only, in its own process group, stderr and stdout
    to one pipe (a log file, not a terminal)."""
    import os
    import subprocess
    import sys

    code = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from posym.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.Popen([sys.executable, "-c", code, "reproduce", "--preset", "tiny", "--jobs", "2",
                             "--stages", "train", "--no-llm", "--out", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONWARNINGS": "default"},
                            preexec_fn=default_sigint)


@pytest.mark.integration
def test_parallel_training_log_is_plain_lines_one_per_stage(tmp_path):
    """stderr not a terminal: the two trainings' progress comes as whole lines (no carriage return), and
    no stage line is glued to a bar."""
    proc = _reproduce_process(tmp_path / "r")
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, log
    assert "\r" not in log
    lines = log.splitlines()
    for task in ("number", "letter"):
        assert f"[reproduce] start train-{task}-s0" in lines
        assert any(line.startswith(f"[reproduce] done  train-{task}-s0 in ") for line in lines)
        assert any(line.startswith(f"train {task}/quick: 100%") for line in lines), lines
    assert all(line.startswith(("[reproduce] ", "train ", "report: ")) for line in lines), lines


@pytest.mark.integration
def test_ctrl_c_leaves_no_leaked_semaphore_warning(tmp_path):
    """Ctrl-C (SIGINT to the process group) during parallel training: the message, and no
    resource_tracker warning about leaked semaphores (the workers' progress-bar locks)."""
    import os
    import signal
    import time

    proc = _reproduce_process(tmp_path / "r", "--set", "train.steps=100000")
    deadline = time.monotonic() + 300
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        seen.append(line)
        if "start train-letter-s0" in line:
            break
    time.sleep(15)  # both workers are training, with a progress bar each
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=120)
    log = "".join(seen) + rest
    assert proc.returncode == 130, log
    assert "posym: interrupted" in log
    assert "leaked semaphore" not in log and "resource_tracker" not in log, log


def test_header_names_one_seed_plainly(tmp_path, capsys):
    with pytest.raises(PosymError):
        reproduce("tiny", out=tmp_path / "r", tasks=("number",), stages=["dynamics-number-s0"], llm=False,
                  progress=False)
    header = capsys.readouterr().out.splitlines()[0]
    assert "tasks number, seed 0, device cpu" in header and "0..0" not in header
