"""``posym reproduce --launcher slurm`` against a real single-node Slurm (tests/slurm_cluster.py): the
jobs in squeue while they run, the same tables as a local run, the lock across jobs, and a training
job cancelled with scancel that the same command resumes to the tables of an uninterrupted run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import slurm_cluster

pytestmark = pytest.mark.integration

ARGS = ["reproduce", "--preset", "tiny", "--tasks", "number", "--no-llm", "--quiet", "--launcher", "slurm",
        "--slurm-cpus", "1"]
#: Columns that measure time or memory, not results (the only ones allowed to differ between two runs).
TIMING = {"time_s", "seconds", "peak_rss_mb"}
PAUSE_HOOK = Path(__file__).resolve().parents[1] / "slurm_pause"


@pytest.fixture(scope="module")
def cluster():
    c = slurm_cluster.start(cpus=2)
    try:
        yield c
    finally:
        c.stop()


def _posym(cluster, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "posym.cli", *args], capture_output=True, text=True,
                          env={**cluster.env, **(env or {})}, timeout=timeout)


def _jobs(out: Path) -> dict[str, str]:
    return {n: e["job"] for n, e in json.loads((out / "slurm" / "jobs.json").read_text()).items()}


def _wait_gone(cluster, ids, timeout: float = 600) -> None:
    t0 = time.monotonic()
    while set(ids) & set(cluster.jobs()):
        assert time.monotonic() - t0 < timeout, f"jobs still queued after {timeout} s:\n{cluster.logs()}"
        time.sleep(1)


def _tables(root: Path) -> dict[str, Path]:
    return {str(p.relative_to(root)): p for p in sorted(root.rglob("*.csv")) if "slurm" not in p.parts}


def _differences(a: Path, b: Path) -> dict[str, float]:
    """Every table of ``a`` compared with ``b``'s: {} when byte-identical, else the max |Δ| over the
    non-timing columns of each table that differs (0.0: only timing columns differ)."""
    ta, tb = _tables(a), _tables(b)
    assert set(ta) == set(tb), set(ta) ^ set(tb)
    out = {}
    for name, pa in ta.items():
        if pa.read_bytes() == tb[name].read_bytes():
            continue
        x, y = pd.read_csv(pa), pd.read_csv(tb[name])
        assert list(x.columns) == list(y.columns) and len(x) == len(y), name
        keep = [c for c in x.columns if c not in TIMING]
        pd.testing.assert_frame_equal(x[keep], y[keep], check_exact=True, obj=name)
        num = x[keep].select_dtypes("number").columns
        out[name] = float((x[num] - y[num]).abs().max().max()) if len(num) else 0.0
    return out


@pytest.fixture(scope="module")
def submitted(cluster, tmp_path_factory):
    """A detached submission of the tiny reproduction (one task, one seed), what squeue, a second
    submission and posym status said while it ran, and the directory once every job has ended."""
    out = tmp_path_factory.mktemp("slurm") / "repro"
    t0 = time.monotonic()
    sub = _posym(cluster, *ARGS, "--out", str(out), "--detach")
    assert sub.returncode == 0, sub.stderr + cluster.logs()
    jobs = _jobs(out)
    seen = {"submit": sub, "squeue": cluster.run("squeue", "-h", "-o", "%i|%j|%T|%r").stdout,
            "again": _posym(cluster, *ARGS, "--out", str(out)),
            "local": _posym(cluster, "reproduce", "--preset", "tiny", "--tasks", "number", "--no-llm", "--out",
                            str(out)),
            "status": _posym(cluster, "status", str(out))}
    _wait_gone(cluster, jobs.values())
    seen["seconds"] = time.monotonic() - t0
    seen["status_after"] = _posym(cluster, "status", str(out))
    return out, jobs, seen


def test_every_stage_is_a_job_visible_to_squeue_with_the_stage_graph(submitted):
    out, jobs, seen = submitted
    assert set(jobs) == {"train-number-s0", "dynamics-number-s0", "flow-number-s0", "ablate-number-s0",
                         "freqs-number-s0", "lengthgen-number-s0", "discrepancy", "report"}
    rows = {r.split("|")[0]: r.split("|") for r in seen["squeue"].splitlines()}
    assert set(rows) == set(jobs.values())  # every job queued or running right after the submission
    assert {rows[j][1] for j in jobs.values()} == {f"posym-{n}" for n in jobs}
    assert rows[jobs["dynamics-number-s0"]][2:] == ["PENDING", "Dependency"]  # waits for its training
    assert f"submit train-number-s0: job {jobs['train-number-s0']}" in seen["submit"].stdout
    for name, job in jobs.items():
        log = out / "slurm" / f"{name}-{job}.log"
        assert log.is_file() and f"done  {name}" in log.read_text(), (name, log.read_text()[-2000:])
        assert (out / "stages" / f"{name}.done").is_file()
    print(f"slurm reproduction: {seen['seconds']:.1f} s")


def test_a_second_submission_is_refused_while_the_jobs_run(submitted):
    out, jobs, seen = submitted
    for key in ("again", "local"):  # the submitting command has returned (--detach): the jobs hold the lock
        proc = seen[key]
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("posym: error: reproduction directory") and "in use by Slurm jobs" in lines[0]
    status = seen["status"].stdout
    assert seen["status"].returncode == 0 and f"held by {len(jobs)} Slurm job(s)" in status
    assert f"job {jobs['report']}" in status and ("PENDING" in status or "RUNNING" in status)
    after = seen["status_after"].stdout
    assert after.startswith(f"{out}: 8 of 8 stages done; no writer holds it"), after


def test_slurm_tables_equal_a_local_run(submitted, tmp_path):
    """The tables of the Slurm reproduction equal a local one's: byte for byte, except the timing
    columns of metrics.csv and lengthgen.csv (both runs with one torch thread)."""
    import torch

    from posym.verbs.reproduce import reproduce

    out, _, _ = submitted
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reproduce("tiny", out=tmp_path / "local", tasks=("number",), seeds=1, jobs=1, llm=False, progress=False)
    finally:
        torch.set_num_threads(threads)
    diff = _differences(tmp_path / "local", out)
    assert set(diff) <= {"number/seed0/metrics.csv", "number/seed0/lengthgen.csv"}, diff
    assert all(v == 0.0 for v in diff.values()), diff


def test_scancel_of_a_training_job_then_the_same_command_resumes_exactly(cluster, submitted, tmp_path):
    from posym.train.checkpoints import latest_resumable

    reference, _, _ = submitted
    out = tmp_path / "repro"
    flag = tmp_path / "paused"
    pause = {"PYTHONPATH": os.pathsep.join([str(PAUSE_HOOK), os.environ.get("PYTHONPATH", "")]),
             "POSYM_TEST_PAUSE_AT": "20", "POSYM_TEST_PAUSE_FILE": str(flag)}
    sub = _posym(cluster, *ARGS, "--out", str(out), "--detach", env=pause)
    assert sub.returncode == 0, sub.stderr
    jobs = _jobs(out)
    t0 = time.monotonic()
    while not flag.exists():  # the training job is at step 20, after its step-10 checkpoint
        assert time.monotonic() - t0 < 120, cluster.logs()
        time.sleep(0.2)
    train = jobs["train-number-s0"]
    assert cluster.run("squeue", "-h", "-j", train, "-o", "%T").stdout.strip() == "RUNNING"
    assert cluster.run("scancel", train).returncode == 0
    _wait_gone(cluster, jobs.values())

    run = out / "number" / "seed0"
    assert not (out / "stages" / "train-number-s0.done").exists()
    assert not (run / ".posym.lock").exists()  # the job stopped on SIGTERM like on Ctrl-C: lock released
    assert not list(out.rglob("*.tmp"))  # no half-written file
    for name, table in _tables(out).items():  # every table that exists is whole
        if table.read_text().strip() or not name.startswith("aggregate/"):  # (the report of no run: empty)
            pd.read_csv(table)
    step, _ = latest_resumable(run)
    assert 10 <= step < 20  # the newest checkpoint with a trainer state is before the pause
    status = _posym(cluster, "status", str(out)).stdout
    assert "train-number-s0      CANCELLED" in status and "dynamics-number-s0   CANCELLED" in status, status
    assert status.startswith(f"{out}: 1 of 8 stages done; no writer holds it"), status  # discrepancy ran

    again = _posym(cluster, *ARGS, "--out", str(out))  # the same command, waiting this time
    assert again.returncode == 0, again.stderr + again.stdout
    assert "skip  discrepancy (done" in again.stdout
    new = _jobs(out)
    assert new["train-number-s0"] != train and new["discrepancy"] == jobs["discrepancy"]  # not resubmitted
    assert f"job {new['train-number-s0']} train-number-s0: RUNNING" in again.stdout  # one line per job state
    marker = json.loads((out / "stages" / "train-number-s0.done").read_text())
    assert marker["info"]["resumed"] is True
    diff = _differences(reference, out)  # metrics, scores, every analysis: max |Δ| = 0
    assert set(diff) <= {"number/seed0/metrics.csv", "number/seed0/lengthgen.csv"}, diff
    assert all(v == 0.0 for v in diff.values()), diff
