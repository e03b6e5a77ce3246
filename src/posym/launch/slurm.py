"""Run a graph of stages as Slurm jobs (``posym reproduce --launcher slurm``; docs/cluster.md).

Each stage becomes one ``sbatch`` job whose script runs a posym command line (for a reproduction,
the hidden ``posym _stage DIR NAME``: the same stage function as the local pool). A job waits for the
jobs of the stages it needs with ``--dependency=afterok:`` (a last job, the report, with ``afterany``:
it runs whatever happened) and ``--kill-on-invalid-dep=yes`` (a job whose dependency failed is
cancelled, not left pending forever). Scripts and logs live in ``DIR/slurm/`` and
``DIR/slurm/jobs.json`` records the newest job of each stage (names in :mod:`posym.runs.layout`).
Plain ``sbatch`` / ``squeue`` / ``scontrol`` / ``scancel`` through :mod:`subprocess`; no accounting
database (``sacct``) is needed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from posym.checks import check_int
from posym.errors import PosymError
from posym.files import write_text_atomic
from posym.runs import layout
from posym.runs.jobs import queued

#: The launchers of a fan-out verb: ``local`` (the process pool, posym.launch.pool) or ``slurm``.
LAUNCHERS = ("local", "slurm")
#: Prefix of every job name (``posym-<stage>``), as squeue shows it.
JOB_PREFIX = "posym-"
#: Seconds between two squeue polls while waiting.
POLL = 2.0
#: The Slurm commands the launcher calls.
COMMANDS = ("sbatch", "squeue", "scontrol", "scancel")
#: Options the launcher sets itself (a job's name, log, dependencies): not allowed in ``opts``.
MANAGED = {"job-name": None, "output": None, "error": None, "dependency": None, "kill-on-invalid-dep": None,
           "parsable": None, "wrap": None, "array": None, "test-only": None, "partition": "--slurm-partition",
           "time": "--slurm-time", "gres": "--slurm-gpus", "gpus": "--slurm-gpus",
           "cpus-per-task": "--slurm-cpus"}
CONFIG_KEYS = ("partition", "time", "gpus", "cpus", "opts", "setup", "python")
_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|infinite|unlimited", re.IGNORECASE)
_PARTITION = re.compile(r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*")
_OPT_KEY = re.compile(r"[a-z][a-z0-9-]*")
_DIGITS = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class SlurmOptions:
    """How each job is submitted: partition, time limit (Slurm's formats, e.g. ``2:00:00``), GPUs and
    CPUs per job, further ``sbatch`` options (``opts``: long option name -> value, ``""`` for a flag),
    shell lines run before the stage (``setup``: ``module load ...``, ``source venv/bin/activate``)
    and the Python interpreter of the job (default: this one)."""

    partition: str | None = None
    time: str | None = None
    gpus: int | None = None
    cpus: int | None = None
    opts: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    python: str = field(default_factory=lambda: sys.executable)

    def directives(self) -> list[str]:
        """The ``sbatch`` options of these settings, one ``--key=value`` each."""
        out = []
        if self.partition:
            out.append(f"--partition={self.partition}")
        if self.time:
            out.append(f"--time={self.time}")
        if self.cpus:
            out.append(f"--cpus-per-task={self.cpus}")
        if self.gpus:
            out.append(f"--gres=gpu:{self.gpus}")
        out += [f"--{k}={v}" if v != "" else f"--{k}" for k, v in self.opts]
        return out


def _one_line(what: str, value: str) -> str:
    if "\n" in value or "\r" in value:
        raise PosymError(f"{what} must be one line, got {value!r}")
    return value


def _count(what: str, value: Any, low: int) -> int | None:
    """``value`` as an int >= ``low`` (:func:`posym.checks.check_int`), also given as its decimal digits
    (the Python API, a config file); None stays None."""
    if value is None:
        return None
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()) and int(value) >= low:
        value = int(value)
    return check_int(value, what, lo=low)


def _opt_pairs(opts: Mapping[str, Any] | Sequence[str]) -> list[tuple[str, str]]:
    pairs = []
    items = opts.items() if isinstance(opts, Mapping) else [
        (o.split("=", 1)[0], o.split("=", 1)[1] if "=" in o else "") for o in opts]
    for key, value in items:
        key = str(key).strip().lstrip("-")
        if not _OPT_KEY.fullmatch(key):
            raise PosymError(f"--slurm-opt {key!r}: give a long sbatch option name as KEY=VALUE, e.g. account=lab "
                             "or qos=normal")
        if key in MANAGED:
            hint = f"use {MANAGED[key]}" if MANAGED[key] else "posym sets it for each job"
            raise PosymError(f"--slurm-opt {key}: {hint}")
        if value is True:
            value = ""
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise PosymError(f"--slurm-opt {key}: the value must be a string or a number, got {value!r}")
        pairs.append((key, _one_line(f"--slurm-opt {key}", str(value))))
    return pairs


def read_launcher_config(path: str | os.PathLike) -> dict[str, Any]:
    """A launcher configuration file (TOML or JSON, by its suffix): the keys of :data:`CONFIG_KEYS`."""
    p = Path(path)
    if not p.is_file():
        raise PosymError(f"--launcher-config {p}: no such file")
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(p.read_text())
        elif p.suffix.lower() == ".toml":
            import tomllib

            data = tomllib.loads(p.read_text())
        else:
            raise PosymError(f"--launcher-config {p}: give a .toml or .json file")
    except (ValueError, OSError) as exc:
        raise PosymError(f"--launcher-config {p}: {str(exc).splitlines()[0]}") from exc
    if not isinstance(data, dict):
        raise PosymError(f"--launcher-config {p}: expected a table of settings")
    data = dict(data.get("slurm", data)) if isinstance(data.get("slurm"), dict) else data
    unknown = sorted(set(data) - set(CONFIG_KEYS))
    if unknown:
        raise PosymError(f"--launcher-config {p}: unknown key(s) {', '.join(unknown)}; known: {', '.join(CONFIG_KEYS)}")
    return data


def slurm_options(partition: str | None = None, time: str | None = None, gpus: int | str | None = None,
                  cpus: int | str | None = None, opts: Mapping[str, Any] | Sequence[str] = (),
                  config: str | os.PathLike | None = None) -> SlurmOptions:
    """Checked :class:`SlurmOptions` from the ``--slurm-*`` options and/or a ``--launcher-config`` file
    (an option given on the command line wins over the file; ``opts`` are merged). PosymError (one
    line) for any bad value; nothing is submitted."""
    conf = read_launcher_config(config) if config is not None else {}
    partition = partition if partition is not None else conf.get("partition")
    time_ = time if time is not None else conf.get("time")
    if partition is not None and not (isinstance(partition, str) and _PARTITION.fullmatch(partition)):
        raise PosymError(f"--slurm-partition must be a partition name (or a comma-separated list), got {partition!r}")
    if time_ is not None:
        time_ = str(time_).strip()
        if not _TIME.fullmatch(time_):
            raise PosymError(f"--slurm-time {time_!r}: use Slurm's formats MINUTES, HH:MM:SS or D-HH:MM:SS")
    merged = dict(_opt_pairs(conf.get("opts", {}) or {}))
    merged.update(_opt_pairs(opts))
    setup = conf.get("setup", [])
    if isinstance(setup, str) or not all(isinstance(s, str) for s in setup):
        raise PosymError("launcher config 'setup' must be a list of shell lines")
    python = conf.get("python", sys.executable)
    if not isinstance(python, str) or not python.strip():
        raise PosymError(f"launcher config 'python' must be the path of a Python interpreter, got {python!r}")
    return SlurmOptions(partition=partition, time=time_, gpus=_count("--slurm-gpus", gpus if gpus is not None
                                                                     else conf.get("gpus"), 0),
                        cpus=_count("--slurm-cpus", cpus if cpus is not None else conf.get("cpus"), 1),
                        opts=tuple(merged.items()), setup=tuple(_one_line("a setup line", s) for s in setup),
                        python=_one_line("python", python))


@dataclass(frozen=True)
class Job:
    """One stage as a job: ``command`` (posym CLI arguments) after every job named in ``after_ok``
    succeeded and every job named in ``after_any`` ended."""

    name: str
    command: tuple[str, ...]
    after_ok: tuple[str, ...] = ()
    after_any: tuple[str, ...] = ()


def job_script(out: str | os.PathLike, job: Job, options: SlurmOptions) -> str:
    """The batch script of ``job``: its ``#SBATCH`` lines, the setup lines, then the posym command."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={JOB_PREFIX}{job.name}",
             f"#SBATCH --output={layout.slurm_log(Path(out).absolute(), job.name)}"]
    lines += [f"#SBATCH {d}" for d in options.directives()]
    lines += list(options.setup)
    lines.append("exec " + shlex.join([options.python, "-m", "posym.cli", *job.command]))
    return "\n".join(lines) + "\n"


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, input=stdin, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise PosymError(f"{args[0]} failed: {exc}") from exc


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[0] if lines else "no message"


#: sbatch's words when no controller answers (not a refusal of the job's options): no configured or
#: resolvable controller host, a refused or timed-out connection.
_NO_CONTROLLER = re.compile(r"resolve_ctls_from_dns_srv|Unable to contact slurm controller|Unknown host|"
                            r"Connection refused|Zero Bytes were transmitted|Could not establish a configuration "
                            r"source|Socket timed out|slurm_load_ctl_conf", re.IGNORECASE)


def check_cluster(options: SlurmOptions, probe: Job, out: str | os.PathLike) -> None:
    """PosymError (one line, nothing submitted) unless the Slurm commands are on PATH and ``sbatch
    --test-only`` accepts the script of ``probe`` (partition, time limit, GPUs, extra options)."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise PosymError(f"--launcher slurm needs {', '.join(COMMANDS)} on PATH (run it on a Slurm login node); "
                         f"missing: {', '.join(missing)}")
    proc = _run(["sbatch", "--test-only"], stdin=job_script(out, probe, options))
    if proc.returncode != 0 and _NO_CONTROLLER.search(proc.stderr or ""):
        raise PosymError("no Slurm controller answers (sbatch: "
                         f"{_first_line(proc.stderr).removeprefix('sbatch: error: ')}); run this on a node of a "
                         "working cluster (`sinfo` should list its partitions), or check that slurmctld runs")
    if proc.returncode != 0:
        raise PosymError(f"Slurm refuses these job options ({' '.join(options.directives()) or 'defaults'}): "
                         f"{_first_line(proc.stderr).removeprefix('sbatch: error: ')}")


def recorded_jobs(out: str | os.PathLike) -> dict[str, dict]:
    """``DIR/slurm/jobs.json``: stage -> ``{"job", "submission", "submitted"}`` of its newest job."""
    return layout.read_json(Path(out) / layout.SLURM / layout.SLURM_JOBS)


def live_jobs(out: str | os.PathLike) -> dict[str, str]:
    """Stage -> job id for each recorded job that squeue still lists (queued or running)."""
    rec = recorded_jobs(out)
    ids = {str(e.get("job")): name for name, e in rec.items() if isinstance(e, dict) and e.get("job")}
    live = queued(list(ids)) or {}
    return {ids[j]: j for j in live}


def cancel(ids: Sequence[str]) -> None:
    """``scancel`` these jobs (the ones already ended are ignored)."""
    if ids:
        _run(["scancel", *[str(i) for i in ids]])


def submit(out: str | os.PathLike, jobs: Sequence[Job], options: SlurmOptions, submission: str,
           queued_ids: Mapping[str, str] | None = None) -> dict[str, str]:
    """Submit ``jobs`` (dependencies first) and return name -> job id. A dependency on a name in
    ``queued_ids`` (already queued or running) waits for that job; on any other name not submitted
    here it is dropped (that stage is done). If one ``sbatch`` fails, the jobs submitted so far are
    cancelled and PosymError names the stage. Records the jobs in ``DIR/slurm/jobs.json``."""
    out = Path(out).absolute()
    ids: dict[str, str] = dict(queued_ids or {})
    new: dict[str, str] = {}
    (out / layout.SLURM).mkdir(parents=True, exist_ok=True)
    try:
        for job in jobs:
            script = layout.slurm_script(out, job.name)
            write_text_atomic(script, job_script(out, job, options))
            dep = [f"{kind}:{':'.join(ids[d] for d in names if d in ids)}"
                   for kind, names in (("afterok", job.after_ok), ("afterany", job.after_any))
                   if any(d in ids for d in names)]
            args = ["sbatch", "--parsable", "--kill-on-invalid-dep=yes"]
            args += [f"--dependency={','.join(dep)}"] if dep else []
            proc = _run([*args, str(script)])
            if proc.returncode != 0:
                raise PosymError(f"sbatch refused stage {job.name}: {_first_line(proc.stderr)}")
            ids[job.name] = new[job.name] = proc.stdout.strip().split(";")[0]
    except BaseException:
        cancel(list(new.values()))
        raise
    now = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    rec = recorded_jobs(out)
    rec.update({n: {"job": j, "submission": submission, "submitted": now} for n, j in new.items()})
    layout.write_json_atomic(out / layout.SLURM / layout.SLURM_JOBS, rec)
    return new


def ended_state(job: str) -> str:
    """The final state of a job squeue no longer lists, from ``scontrol`` (COMPLETED, FAILED,
    CANCELLED, TIMEOUT, ...); ``ENDED`` once the controller has forgotten it."""
    proc = _run(["scontrol", "-o", "show", "job", str(job)])
    m = re.search(r"\bJobState=(\S+)", proc.stdout) if proc.returncode == 0 else None
    return m.group(1) if m else "ENDED"


def _state(job: str, live: Mapping[str, Mapping[str, str]]) -> str:
    """``PENDING (Dependency)``, ``RUNNING``, ... for a job squeue lists, else its final state."""
    if job not in live:
        return ended_state(job)
    state, reason = live[job]["state"], live[job].get("reason", "")
    return f"{state} ({reason})" if state == "PENDING" and reason not in ("", "None", "(null)") else state


def job_states(jobs: Mapping[str, str]) -> dict[str, str] | None:
    """Name -> state of each job (:func:`_state`: ``PENDING (Dependency)``, ``RUNNING``, or how it ended:
    ``COMPLETED``, ``FAILED``, ``CANCELLED``, ...); None when squeue does not answer."""
    live = queued(list(jobs.values()))
    if live is None:
        return None
    return {n: _state(j, live) for n, j in jobs.items()}


def wait(jobs: Mapping[str, str], say: Callable[[str], None], poll: float = POLL) -> dict[str, str]:
    """Wait until every job has ended, printing a line for each change of a job's state and a progress
    bar of the ended jobs (plain lines in a log file, :mod:`posym.progress`); returns name -> final
    state. Ctrl-C asks whether to cancel the jobs still queued or running (:func:`ask_cancel`)."""
    from tqdm import tqdm

    last: dict[str, str] = {}
    live: set[str] = set(jobs)
    bar = tqdm(total=len(jobs), desc="slurm jobs", unit="job", dynamic_ncols=True)
    silent = False
    try:
        while live:
            q = queued([jobs[n] for n in live])
            if q is None:
                if not silent:
                    say("squeue does not answer; still waiting")
                silent = True
                time.sleep(poll)
                continue
            silent = False
            for name in sorted(live, key=lambda n: int(jobs[n]) if jobs[n].isdigit() else 0):
                j = jobs[name]
                state = _state(j, q)
                if state != last.get(name):
                    last[name] = state
                    say(f"job {j} {name}: {state}")
                if j not in q:
                    live.discard(name)
                    bar.update(1)
            counts: dict[str, int] = {}
            for name in live:
                key = last[name].split()[0].lower()
                counts[key] = counts.get(key, 0) + 1
            bar.set_postfix_str(", ".join(f"{v} {k}" for k, v in sorted(counts.items())), refresh=True)
            if live:
                time.sleep(poll)
    except KeyboardInterrupt:
        bar.close()
        ask_cancel([jobs[n] for n in live], say)
        raise
    bar.close()
    return {n: last[n].split()[0] for n in jobs}


def _ask_terminal(prompt: str) -> str:
    if not sys.stdin or not sys.stdin.isatty():
        raise EOFError("no terminal to ask on")
    return input(prompt)


def ask_cancel(ids: Sequence[str], say: Callable[[str], None], ask: Callable[[str], str] = _ask_terminal) -> bool:
    """After Ctrl-C: ask whether to ``scancel`` ``ids``; an answer other than y/yes (or no terminal to
    answer on) leaves them running. Returns whether they were cancelled."""
    if not ids:
        return False
    try:
        answer = ask(f"\ncancel the {len(ids)} Slurm job(s) still queued or running ({', '.join(ids)})? [y/N] ")
    except (EOFError, KeyboardInterrupt, OSError):
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        cancel(ids)
        say(f"cancelled {len(ids)} job(s); the same command resubmits what is not done")
        return True
    say("the jobs keep running (and hold the directory); posym status DIR shows them")
    return False


__all__ = ["COMMANDS", "JOB_PREFIX", "Job", "LAUNCHERS", "SlurmOptions", "ask_cancel", "cancel", "check_cluster",
           "ended_state", "job_script", "job_states", "live_jobs", "read_launcher_config", "recorded_jobs",
           "slurm_options", "submit", "wait"]
