"""The fan-out studies on Slurm (``--launcher slurm``; posym.launch.fanout, docs/cluster.md).

Without Slurm: a fake ``sbatch`` / ``squeue`` on PATH records each verb's submission plan (job count,
``afterok`` dependencies, what a re-run resubmits) and the one-line refusals (no ``sbatch``, an unknown
partition) that leave nothing written. On the real single-node Slurm of tests/slurm_cluster.py: the
interventions study and head-types write the same tables as a local run, and an interventions study
whose jobs were cancelled with ``scancel`` after one model finished resumes with only the rest."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import slurm_cluster
from family_models import build_family
from posym.cli import main
from posym.errors import PosymError
from posym.launch import fanout
from posym.studies.head_types import head_types
from posym.studies.intervention_study import interventions
from posym.tasks.llm_prompts import ATTRIBUTES, ENTITIES
from posym.verbs.lengthgen import lengthgen
from tiny_tokenizer import start_token_tokenizer

TINY = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
        "--set", "n_inner=32", "--set", "rotary_dim=8", "--track-prompts", "4"]
#: The interventions study of the tests: a few points and a small head readout.
STUDY = ["--intervene", "ntk:kappa=4", "--grid", "0,20", "--n", "8", "--heads-lengths", "0,20", "--heads-n", "2",
         "--quiet"]
HEAD_TYPES = ["--prompts", "repeated,binding", "--n", "3", "--length", "6", "--n-boot", "20", "--n-null", "20",
              "--threads", "1", "--quiet"]
TIMING = {"time_s", "seconds", "peak_rss_mb"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for task in ("number", "letter"):
        assert main(["train", "--task", task, "--out", str(root / task), "--quiet", *TINY]) == 0
    return root


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    tok = start_token_tokenizer(["Each", "object", "has", "one", "colour", ".", "The", "is", "Input", "Output", ":",
                                 *ENTITIES[:10], *ATTRIBUTES[:8]], split_punctuation=True)
    d = tmp_path_factory.mktemp("models") / "tiny-llama"
    build_family("llama", vocab_size=len(tok)).save_pretrained(d)
    tok.save_pretrained(d)
    return d


# ---------------------------------------------------------------- a fake sbatch: the plans

FAKE_SBATCH = """#!/bin/bash
if [[ " $* " == *" --test-only "* ]]; then
  if grep -q -- "--partition=nope" -; then echo "sbatch: error: invalid partition specified: nope" >&2; exit 1; fi
  exit 0
fi
n=$(( $(wc -l < "{log}") + 100 )); echo "$*" >> "{log}"; echo "$n"
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Fake Slurm commands on PATH: ``sbatch`` logs each submission and answers ids 100, 101, …;
    ``squeue`` lists the lines of ``fake / "queue"`` (``id|STATE|reason|name``)."""
    d = tmp_path / "fakebin"
    d.mkdir()
    log, queue, cancelled = d / "sbatch.log", d / "queue", d / "scancel.log"
    log.touch()
    scripts = {"sbatch": FAKE_SBATCH.format(log=log), "squeue": f"#!/bin/bash\ncat '{queue}' 2>/dev/null\nexit 0\n",
               "scontrol": "#!/bin/bash\nexit 0\n", "scancel": f"#!/bin/bash\necho \"$*\" >> '{cancelled}'\n"}
    for name, text in scripts.items():
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
    return d


def _submitted(fake: Path) -> list[tuple[str, str, list[str]]]:
    """(id, job name, dependency ids) of every fake submission, in order."""
    out = []
    for i, line in enumerate((fake / "sbatch.log").read_text().splitlines()):
        args = line.split()
        dep = next((a.split("=", 1)[1] for a in args if a.startswith("--dependency=")), "")
        out.append((str(100 + i), Path(args[-1]).stem, dep.removeprefix("afterok:").split(":") if dep else []))
    return out


def _job_args(out: Path, name: str) -> list[str]:
    """The posym arguments the job script of ``name`` runs (after ``_unit OUT NAME --``)."""
    exec_line = (out / "slurm" / f"{name}.sbatch").read_text().splitlines()[-1]
    argv = shlex.split(exec_line)
    return argv[argv.index("--") + 1:]


@pytest.mark.integration
def test_interventions_plan_one_job_per_model_then_the_summary_and_resume(runs, tmp_path, fake, capsys):
    out = tmp_path / "study"
    argv = ["interventions", str(runs / "number"), str(runs / "letter"), "--out", str(out), *STUDY,
            "--launcher", "slurm"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    jobs = _submitted(fake)
    assert [(n, d) for _, n, d in jobs] == [("interventions-number-s0", []), ("interventions-letter-s0", []),
                                           ("interventions-summary", ["100", "101"])]
    assert "squeue -j 100,101,102" in printed and "sacct -j 100,101,102" in printed
    assert not (out / "number-s0").exists()  # nothing measured on the submitting machine
    unit = _job_args(out, "interventions-number-s0")
    assert unit[:4] == ["interventions", str(runs / "number"), "--out", str(out.absolute())]
    assert unit[-1] == "--measure-only" and "ntk:kappa=4" in unit
    assert _job_args(out, "interventions-summary")[:3] == ["interventions", str(runs / "number"), str(runs / "letter")]

    # number's job finished, letter's was cancelled: a re-run submits letter's and the summary again
    fanout.mark_done(out, "interventions-number-s0", unit)
    assert main(argv) == 0
    assert "skip  interventions-number-s0 (done)" in capsys.readouterr().out
    assert [(n, d) for _, n, d in _submitted(fake)[3:]] == [("interventions-letter-s0", []),
                                                           ("interventions-summary", ["103"])]
    # letter's job still queued: a re-run waits for it and resubmits only the summary
    (fake / "queue").write_text("103|PENDING|Priority|posym-interventions-letter-s0\n")
    assert main(argv) == 0
    assert [(n, d) for _, n, d in _submitted(fake)[5:]] == [("interventions-summary", ["103"])]
    # both still queued: nothing is submitted twice
    (fake / "queue").write_text("103|PENDING|Priority|x\n105|PENDING|Dependency|y\n")
    assert main(argv) == 0
    assert "queued interventions-summary: job 105" in capsys.readouterr().out and len(_submitted(fake)) == 6
    # every job done: nothing to submit
    (fake / "queue").write_text("")
    fanout.mark_done(out, "interventions-letter-s0", _job_args(out, "interventions-letter-s0"))
    fanout.mark_done(out, "interventions-summary", _job_args(out, "interventions-summary"))
    assert main(argv) == 0
    assert "nothing submitted" in capsys.readouterr().out and len(_submitted(fake)) == 6
    # other settings are other work: a unit done with other arguments is submitted again
    assert main([*argv[:-2], "--n", "4", "--launcher", "slurm"]) == 0
    assert len(_submitted(fake)) == 9


def test_head_types_plan_one_job_for_the_model(llama, tmp_path, fake, capsys):
    out = tmp_path / "ht"
    assert main(["head-types", "--model", str(llama), "--out", str(out), *HEAD_TYPES, "--launcher", "slurm",
                 "--slurm-cpus", "1"]) == 0
    assert [(n, d) for _, n, d in _submitted(fake)] == [("head-types-model", [])]
    args = _job_args(out, "head-types-model")
    assert args[:3] == ["head-types", "--model", str(llama)] and "--launcher" not in args
    assert "#SBATCH --cpus-per-task=1" in (out / "slurm" / "head-types-model.sbatch").read_text()
    assert not (out / "head_types.csv").exists()
    assert "squeue -j 100" in capsys.readouterr().out


@pytest.mark.integration
def test_lengthgen_plan_one_job_for_the_run(runs, tmp_path, fake):
    """One data seed: one job (several: one per data seed, tests/launch/test_study_slurm_split.py)."""
    table = tmp_path / "lg" / "lengthgen_wide.csv"
    res = lengthgen(runs / "number", grid=[0, 20], n=8, seeds=1, out=table, launcher="slurm")
    assert [(n, d) for _, n, d in _submitted(fake)] == [("lengthgen-run", [])]
    args = _job_args(table.parent, "lengthgen-run")
    assert args[:2] == ["lengthgen", str(runs / "number")] and args[args.index("--seeds") + 1] == "1"
    assert not table.exists() and "squeue -j 100" in res.summary


def test_sensitivity_and_pe_study_plans_one_job_each(tiny_repro, tmp_path, fake):
    from posym.studies.encodings import pe_study
    from posym.studies.sensitivity import sensitivity

    sensitivity({"a": tiny_repro}, tmp_path / "sens", predict=False, launcher="slurm")
    pe_study({"a": tiny_repro}, tmp_path / "pe", launcher="slurm")
    assert [(n, d) for _, n, d in _submitted(fake)] == [("sensitivity-summary", []), ("pe-study-summary", [])]
    assert _job_args(tmp_path / "sens", "sensitivity-summary")[:2] == ["sensitivity", f"a={tiny_repro}"]
    assert "--no-predict" in _job_args(tmp_path / "sens", "sensitivity-summary")
    assert not (tmp_path / "pe" / "pe_study.csv").exists()


def test_no_sbatch_or_an_unknown_partition_is_one_line_and_nothing_is_written(llama, tmp_path, fake, monkeypatch,
                                                                            capsys):
    out = tmp_path / "ht"
    base = ["head-types", "--model", str(llama), "--out", str(out), *HEAD_TYPES, "--launcher", "slurm"]
    assert main([*base, "--slurm-partition", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["posym: error: Slurm refuses these job options (--partition=nope): invalid partition specified: nope"]
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(base) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--launcher slurm needs sbatch, squeue, scontrol, scancel on PATH" in err[0]
    assert not out.exists() and _submitted(fake) == []
    with pytest.raises(PosymError, match="need --launcher slurm"):
        head_types(str(llama), out=out, slurm_options=fanout.slurm.SlurmOptions(partition="x"))
    with pytest.raises(PosymError, match="unknown launcher 'ssh'"):
        interventions([tmp_path], tmp_path / "iv", launcher="ssh")


# ---------------------------------------------------------------- the real single-node Slurm


@pytest.fixture(scope="module")
def cluster():
    c = slurm_cluster.start(cpus=2)
    try:
        yield c
    finally:
        c.stop()


def _posym(cluster, *args: str) -> subprocess.CompletedProcess:
    env = {**cluster.env, "OMP_NUM_THREADS": "1"}  # the jobs inherit it: one torch thread, as the local run
    return subprocess.run([sys.executable, "-m", "posym.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def _jobs(out: Path) -> dict[str, str]:
    return {n: e["job"] for n, e in json.loads((out / "slurm" / "jobs.json").read_text()).items()}


def _wait_gone(cluster, ids, timeout: float = 600) -> None:
    t0 = time.monotonic()
    while set(ids) & set(cluster.jobs()):
        assert time.monotonic() - t0 < timeout, f"jobs still queued after {timeout} s:\n{cluster.logs()}"
        time.sleep(0.5)


def _same_tables(local: Path, slurm: Path) -> None:
    """Every CSV of the local study equals the Slurm study's (timing columns aside)."""
    tables = lambda root: {str(p.relative_to(root)) for p in root.rglob("*.csv") if "slurm" not in p.parts}  # noqa: E731
    assert tables(local) == tables(slurm) and tables(local)
    for name in sorted(tables(local)):
        a, b = pd.read_csv(local / name), pd.read_csv(slurm / name)
        assert list(a.columns) == list(b.columns), name
        keep = [c for c in a.columns if c not in TIMING]
        pd.testing.assert_frame_equal(a[keep], b[keep], check_exact=True, obj=name)


def _local(fn, *args, **kw):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kw)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.integration
def test_on_slurm_the_studies_equal_a_local_run_and_resume_after_scancel(cluster, runs, llama, tmp_path):
    """interventions (held: one model's job released and finished, the rest cancelled with scancel, then
    the same command again) and head-types on the real Slurm write the tables of a local run."""
    iv, ht = tmp_path / "iv", tmp_path / "ht"
    argv = ["interventions", str(runs / "number"), str(runs / "letter"), "--out", str(iv), *STUDY,
            "--launcher", "slurm", "--slurm-cpus", "1"]
    subs = [_posym(cluster, *argv, "--slurm-opt", "hold"),  # every job held until released
            _posym(cluster, "head-types", "--model", str(llama), "--out", str(ht), *HEAD_TYPES, "--launcher", "slurm")]
    for sub in subs:
        assert sub.returncode == 0, sub.stderr + cluster.logs()
    first = _jobs(iv)
    assert set(first) == {"interventions-number-s0", "interventions-letter-s0", "interventions-summary"}
    assert set(_jobs(ht)) == {"head-types-model"}
    assert f"submit interventions-summary: job {first['interventions-summary']}" in subs[0].stdout
    assert f"squeue -j {','.join(first.values())}" in subs[0].stdout
    queue = cluster.run("squeue", "-h", "-o", "%i|%j|%r").stdout
    assert f"{first['interventions-summary']}|posym-interventions-summary|" in queue

    number = first["interventions-number-s0"]
    assert cluster.run("scontrol", "release", number).returncode == 0
    _wait_gone(cluster, [number, *_jobs(ht).values()])
    assert (iv / "stages" / "interventions-number-s0.done").is_file(), _logs(iv) + cluster.logs()
    assert (ht / "stages" / "head-types-model.done").is_file(), _logs(ht) + cluster.logs()
    assert cluster.run("scancel", first["interventions-letter-s0"], first["interventions-summary"]).returncode == 0
    _wait_gone(cluster, first.values())
    assert not (iv / "interventions.csv").exists() and not (iv / "letter-s0" / "lengthgen.csv").exists()

    again = _posym(cluster, *argv)  # the same command: only letter's job and the summary
    assert again.returncode == 0, again.stderr
    assert "skip  interventions-number-s0 (done)" in again.stdout
    second = _jobs(iv)
    assert second["interventions-number-s0"] == number
    assert second["interventions-letter-s0"] != first["interventions-letter-s0"]
    _wait_gone(cluster, second.values())
    assert (iv / "stages" / "interventions-summary.done").is_file(), _logs(iv) + cluster.logs()

    _local(main, ["interventions", str(runs / "number"), str(runs / "letter"), "--out", str(tmp_path / "iv_local"),
                  *STUDY])
    _local(main, ["head-types", "--model", str(llama), "--out", str(tmp_path / "ht_local"), *HEAD_TYPES])
    _same_tables(tmp_path / "iv_local", iv)
    _same_tables(tmp_path / "ht_local", ht)
    assert (iv / "interventions.html").is_file() and (ht / "figures" / "head_types_plane.png").is_file()


def _logs(root: Path) -> str:
    return "".join(p.read_text() for p in (root / "slurm").glob("*.log"))
