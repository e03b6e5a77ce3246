"""The Slurm launcher without a cluster: option checks before anything is submitted, the job script,
the lock held by Slurm jobs, the job entry point (``posym _stage``) and ``posym status``. The real
cluster is in test_slurm_cluster.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import posym.runs.lock as lock_mod
from posym.cli import build_parser
from posym.errors import PosymError
from posym.runs.lock import DirLock, read_lock
from posym.launch import slurm
from posym.verbs.reproduce import preset_settings, reproduce, run_stage
from posym.verbs.status import status


@pytest.mark.parametrize("kw, needle", [
    ({"time": "soon"}, "--slurm-time 'soon'"),
    ({"time": "1:2:3:4"}, "--slurm-time"),
    ({"partition": "gpu queue"}, "partition name"),
    ({"gpus": -1}, "--slurm-gpus must be an integer >= 0"),
    ({"cpus": "two"}, "--slurm-cpus must be an integer >= 1"),
    ({"cpus": 0}, "--slurm-cpus must be an integer >= 1"),
    ({"opts": ["job-name=x"]}, "posym sets it for each job"),
    ({"opts": ["dependency=afterok:1"]}, "posym sets it for each job"),
    ({"opts": ["partition=gpu"]}, "use --slurm-partition"),
    ({"opts": ["cpus-per-task=4"]}, "use --slurm-cpus"),
    ({"opts": ["Bad Key=1"]}, "long sbatch option name"),
    ({"opts": ["comment=a\nb"]}, "must be one line"),
])
def test_bad_options_are_one_line_errors(kw, needle):
    with pytest.raises(PosymError) as err:
        slurm.slurm_options(**kw)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_config_file_and_command_line_merge(tmp_path):
    conf = tmp_path / "cluster.toml"
    conf.write_text('partition = "gpu"\ntime = "2:00:00"\ngpus = 1\ncpus = 8\nsetup = ["module load cuda"]\n'
                    '[opts]\naccount = "lab"\nqos = "normal"\n')
    o = slurm.slurm_options(time="30", opts=["qos=long", "exclusive"], config=conf)
    assert (o.partition, o.time, o.gpus, o.cpus) == ("gpu", "30", 1, 8)  # the command line wins
    assert o.directives() == ["--partition=gpu", "--time=30", "--cpus-per-task=8", "--gres=gpu:1",
                              "--account=lab", "--qos=long", "--exclusive"]
    js = tmp_path / "cluster.json"
    js.write_text(json.dumps({"slurm": {"partition": "cpu", "python": "/opt/venv/bin/python"}}))
    assert slurm.slurm_options(config=js).python == "/opt/venv/bin/python"
    bad = tmp_path / "bad.toml"
    bad.write_text('partitions = "gpu"\n')
    with pytest.raises(PosymError, match="unknown key.*partitions; known: partition"):
        slurm.slurm_options(config=bad)
    bad.write_text('partition = \n')
    with pytest.raises(PosymError, match="--launcher-config .*bad.toml: "):
        slurm.slurm_options(config=bad)
    (tmp_path / "x.yaml").write_text("partition: gpu\n")
    with pytest.raises(PosymError, match="give a .toml or .json file"):
        slurm.slurm_options(config=tmp_path / "x.yaml")
    with pytest.raises(PosymError, match="nope.toml: no such file"):
        slurm.slurm_options(config=tmp_path / "nope.toml")


def test_job_script_runs_the_stage_command_after_the_setup(tmp_path):
    o = slurm.slurm_options(partition="gpu", gpus=1, config=None)
    o = slurm.SlurmOptions(**{**o.__dict__, "setup": ("source /opt/venv/bin/activate",)})
    text = slurm.job_script(tmp_path, slurm.Job("train-number-s0", ("_stage", str(tmp_path), "train-number-s0")), o)
    lines = text.splitlines()
    assert lines[:3] == ["#!/bin/bash", "#SBATCH --job-name=posym-train-number-s0",
                         f"#SBATCH --output={tmp_path}/slurm/train-number-s0-%j.log"]
    assert "#SBATCH --partition=gpu" in lines and "#SBATCH --gres=gpu:1" in lines
    assert lines[-2] == "source /opt/venv/bin/activate"
    assert lines[-1] == f"exec {o.python} -m posym.cli _stage {tmp_path} train-number-s0"


def test_without_slurm_commands_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "repro"
    needle = "--launcher slurm needs sbatch, squeue, scontrol, scancel on PATH .*missing: sbatch"
    with pytest.raises(PosymError, match=needle):
        reproduce("tiny", out=out, tasks=("number",), llm=False, launcher="slurm")
    # a login node without a GPU submits GPU jobs: CUDA is the compute node's business
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(PosymError, match=needle):
        reproduce("tiny", out=out, tasks=("number",), llm=False, launcher="slurm", device="cuda")
    assert not out.exists()


@pytest.mark.parametrize("kw, needle", [
    ({"detach": True}, "need --launcher slurm"),
    ({"slurm_options": slurm.SlurmOptions(partition="gpu")}, "need --launcher slurm"),
    ({"launcher": "slurm", "jobs": 2}, "--jobs sets the local worker processes"),
    ({"launcher": "pbs"}, "unknown launcher 'pbs'"),
])
def test_launcher_arguments_are_checked_first(tmp_path, kw, needle):
    out = tmp_path / "repro"
    with pytest.raises(PosymError) as err:
        reproduce("tiny", out=out, tasks=("number",), llm=False, **kw)
    assert needle in str(err.value)
    assert not out.exists()


def test_stage_command_is_hidden_from_help():
    text = build_parser().format_help()
    assert "status" in text and "_stage" not in text


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _write_lock(d: Path, **fields) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / ".posym.lock").write_text(json.dumps({"pid": _dead_pid(), "host": socket.gethostname(), "started": 0,
                                               **fields}))


def test_a_submissions_lock_lives_while_squeue_lists_its_jobs(tmp_path, monkeypatch):
    """The submitting process is gone (--detach): its jobs hold the directory while squeue lists one."""
    d = tmp_path / "repro"
    _write_lock(d, submission="s1", slurm_jobs=["41", "42"])
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {"42": {"state": "PENDING"}})
    with pytest.raises(PosymError, match=r"in use by Slurm jobs 41,42 \(submitted by process"):
        DirLock(d, "reproduction").acquire()
    monkeypatch.setattr(lock_mod, "queued", lambda ids: None)  # squeue does not answer: cannot tell
    with pytest.raises(PosymError, match="in use by Slurm jobs"):
        DirLock(d, "reproduction").acquire()
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {})  # every job ended: stale, taken over
    with DirLock(d, "reproduction"):
        assert read_lock(d)["pid"] == os.getpid()
    assert read_lock(d) is None


def test_a_lock_taken_in_a_job_is_stale_once_its_process_is_gone_here(tmp_path, monkeypatch):
    """Same host, dead process, job still running (an interactive allocation): stale. Another host:
    live while squeue lists the job, stale once it does not (its node died)."""
    d = tmp_path / "run"
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {"7": {"state": "RUNNING"}})
    _write_lock(d, slurm_jobs=["7"])
    with DirLock(d):
        pass
    _write_lock(d, slurm_jobs=["7"], host="node-that-died")
    with pytest.raises(PosymError, match="in use by process"):
        DirLock(d).acquire()
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {})
    with DirLock(d):
        pass


def test_hold_for_jobs_keeps_the_lock_after_release_while_the_jobs_run(tmp_path, monkeypatch):
    d = tmp_path / "repro"
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {"5": {"state": "RUNNING"}})
    with DirLock(d, "reproduction") as lk:
        lk.hold_for_jobs(["5", "6"], submission="abc")
    held = read_lock(d)
    assert held["slurm_jobs"] == ["5", "6"] and held["submission"] == "abc" and held["pid"] == os.getpid()
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {})
    with DirLock(d, "reproduction") as lk:  # the jobs ended: stale; a lock without jobs goes on release
        pass
    assert read_lock(d) is None


def test_inside_a_job_the_lock_records_the_job(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    monkeypatch.setattr(lock_mod, "queued", lambda ids: {"99": {"state": "RUNNING"}})
    with DirLock(tmp_path / "run"):
        assert read_lock(tmp_path / "run")["slurm_jobs"] == ["99"]
    assert read_lock(tmp_path / "run") is None  # its own job does not keep it


def _reproduction(tmp_path: Path, submission: str) -> Path:
    out = tmp_path / "repro"
    out.mkdir()
    (out / "reproduce.json").write_text(json.dumps({"preset": "tiny", "settings": preset_settings("tiny"),
                                                    "tasks": ["number"], "seeds": 1, "llm": False,
                                                    "device": "cpu"}))
    (out / ".posym.lock").write_text(json.dumps({"pid": _dead_pid(), "host": "elsewhere", "started": 0,
                                                 "submission": submission, "slurm_jobs": ["1"]}))
    return out


def test_a_job_runs_its_stage_only_for_its_own_submission(tmp_path, capsys):
    out = _reproduction(tmp_path, "mine")
    with pytest.raises(PosymError, match="no longer held by submission other; this job does nothing"):
        run_stage(out, "discrepancy", submission="other")
    assert not (out / "stages" / "discrepancy.done").exists()
    marker = run_stage(out, "discrepancy", submission="mine", progress=False)  # its own lock does not refuse it
    assert marker["status"] == "done" and (out / "theory" / "discrepancy.csv").is_file()
    assert run_stage(out, "discrepancy", submission="mine") == {"note": "discrepancy is done"}
    with pytest.raises(PosymError, match="unknown stage 'freqs-letter-s0'"):
        run_stage(out, "freqs-letter-s0", submission="mine")
    res = status(out)
    assert dict(zip(res.table["stage"], res.table["state"]))["discrepancy"] == "done"
    assert res.summary.splitlines()[0].endswith("1 of 8 stages done; held by 1 Slurm job(s) of submission mine")
    assert "train-number-s0      not done" in res.summary


def test_status_of_a_directory_that_is_no_reproduction(tmp_path):
    with pytest.raises(PosymError, match="is not a reproduction directory"):
        status(tmp_path)


def test_status_of_a_corrupt_record_says_corrupt(tmp_path):
    """Issue 34: a corrupt reproduce.json was reported as "(no reproduce.json)"."""
    (tmp_path / "reproduce.json").write_text("garbage")
    with pytest.raises(PosymError, match="reproduce.json is corrupt"):
        status(tmp_path)


def test_ctrl_c_asks_before_cancelling(monkeypatch):
    cancelled: list = []
    said: list = []
    monkeypatch.setattr(slurm, "cancel", lambda ids: cancelled.append(list(ids)))
    assert slurm.ask_cancel(["3", "4"], said.append, ask=lambda prompt: "n") is False
    assert cancelled == [] and "keep running" in said[-1]
    assert slurm.ask_cancel(["3", "4"], said.append, ask=lambda prompt: "y") is True
    assert cancelled == [["3", "4"]] and said[-1].startswith("cancelled 2 job(s)")

    def no_terminal(prompt):
        raise EOFError

    assert slurm.ask_cancel(["3"], said.append, ask=no_terminal) is False and cancelled == [["3", "4"]]


@pytest.mark.parametrize("stderr, msg", [
    ("sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\nsbatch: error: fetch_config: DNS SRV "
     "lookup failed\n", "no Slurm controller answers"),
    ("sbatch: error: invalid partition specified: gpu\n", "Slurm refuses these job options"),
])
def test_no_controller_is_not_blamed_on_the_options(monkeypatch, tmp_path, stderr, msg):
    """Issue 34: with sbatch on PATH but no controller, the message blamed the job options."""
    monkeypatch.setattr(slurm.shutil, "which", lambda c: f"/usr/bin/{c}")
    monkeypatch.setattr(slurm, "_run", lambda args, stdin=None: subprocess.CompletedProcess(args, 1, "", stderr))
    probe = slurm.Job("train-number-s0", ("_stage", str(tmp_path), "train-number-s0"))
    with pytest.raises(PosymError, match=msg):
        slurm.check_cluster(slurm.SlurmOptions(), probe, tmp_path)
