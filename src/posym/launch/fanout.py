"""A fan-out study on Slurm: one job per unit of independent work, then one summary job
(``posym interventions | sensitivity | pe-study | head-types | lengthgen --launcher slurm``; docs/cluster.md).

A study plans its work as :class:`FanOut`: ``units`` (name -> the posym command line that does that
unit's work into the study's own per-unit files) and ``summary`` (the command line that writes the
tables, figures and page; it runs with ``--dependency=afterok:`` on every unit job). Every job runs
the hidden ``posym _unit OUT NAME -- ARGS…``: the posym command ``ARGS`` as a local run would, then,
on success, the marker ``OUT/stages/<verb>-<NAME>.done`` holding ``ARGS``
(:func:`posym.runs.layout.marker_path`). A re-run (after ``scancel``, a failed job, a cluster outage)
submits only the units whose marker is missing or was written for other arguments and that squeue
does not list, and the summary job again unless it is done for the same arguments with nothing
resubmitted. Submission goes through :func:`posym.launch.slurm.submit` (scripts, logs and
``jobs.json`` in ``OUT/slurm/``); the command returns once the jobs are queued.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence
import uuid

from posym.errors import PosymError
from posym.launch import slurm
from posym.runs import layout

#: The unit name of the summary job.
SUMMARY = "summary"


@dataclass(frozen=True)
class FanOut:
    """The plan of a fan-out study: ``verb`` (the prefix of every job name: the CLI verb, or the verb and
    what keeps one call's jobs apart from another's in the same folder, e.g. ``lengthgen-<table stem>``), ``units`` (unit
    name -> posym CLI arguments of that unit's job) and ``summary`` (the CLI arguments of the job that
    writes the study's tables after every unit; None when the single unit writes them itself)."""

    verb: str
    units: dict[str, tuple[str, ...]]
    summary: tuple[str, ...] | None = None

    def jobs(self) -> dict[str, tuple[str, ...]]:
        """Job name (``<verb>-<unit>``) -> CLI arguments, the summary job last."""
        out = {f"{self.verb}-{n}": tuple(a) for n, a in self.units.items()}
        if self.summary is not None:
            out[f"{self.verb}-{SUMMARY}"] = tuple(self.summary)
        return out


@dataclass
class Submitted:
    """What :func:`submit_fanout` did: job name -> id of the jobs submitted now, the jobs of an earlier
    submission still queued (waited for, not resubmitted), the units already done, and the text to print."""

    ids: dict[str, str]
    queued: dict[str, str] = field(default_factory=dict)
    done: list[str] = field(default_factory=list)
    text: str = ""


def unit_command(out: str | os.PathLike, name: str, args: Sequence[str]) -> tuple[str, ...]:
    """The command line of the job of unit ``name`` (job name): ``_unit OUT NAME -- ARGS…``."""
    return ("_unit", str(Path(out).absolute()), name, "--", *args)


def unit_done(out: str | os.PathLike, name: str, args: Sequence[str]) -> bool:
    """Whether job ``name`` finished with exactly these arguments (its marker)."""
    marker = layout.read_marker(out, name)
    return marker is not None and marker.get("args") == list(args)


def mark_done(out: str | os.PathLike, name: str, args: Sequence[str]) -> None:
    """The marker of a unit job that succeeded (``OUT/stages/NAME.done``, atomic)."""
    now = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    layout.write_json_atomic(layout.marker_path(out, name), {"args": list(args), "finished": now,
                                                             "job": os.environ.get("SLURM_JOB_ID")})


def variant_path(value: str | os.PathLike) -> str:
    """A study variant's value (a directory, or comma-separated ``.csv`` tables) with absolute paths, for a
    job's command line."""
    return ",".join(str(Path(x).absolute()) for x in str(value).split(",") if x)


def check_launcher(launcher: str, options: slurm.SlurmOptions | None) -> None:
    """PosymError (one line) for an unknown launcher or Slurm options without ``--launcher slurm``."""
    if launcher not in slurm.LAUNCHERS:
        raise PosymError(f"unknown launcher {launcher!r}; choose {' or '.join(slurm.LAUNCHERS)}")
    if launcher == "local" and options is not None:
        raise PosymError("--slurm-* options and --launcher-config need --launcher slurm")


def check_fanout(out: str | os.PathLike, plan: FanOut, options: slurm.SlurmOptions) -> None:
    """PosymError (one line, nothing written) unless the Slurm commands are on PATH and ``sbatch
    --test-only`` accepts a job of ``plan`` with ``options`` (partition, time, GPUs, extra options)."""
    name, args = next(iter(plan.jobs().items()))
    slurm.check_cluster(options, slurm.Job(name, unit_command(out, name, args)), out)


def submit_fanout(out: str | os.PathLike, plan: FanOut, options: slurm.SlurmOptions | None = None) -> Submitted:
    """Check the cluster (:func:`check_fanout`, before any write), then submit one job per unit not
    done and not queued, and the summary job after them (``afterok``); returns what was submitted."""
    options = options or slurm.SlurmOptions()
    check_fanout(out, plan, options)
    out = Path(out).absolute()
    every = plan.jobs()
    summary = f"{plan.verb}-{SUMMARY}" if plan.summary is not None else None
    live = {n: j for n, j in slurm.live_jobs(out).items() if n in every} if (out / layout.SLURM).is_dir() else {}
    done = [n for n, a in every.items() if n != summary and unit_done(out, n, a)]
    todo = [n for n in every if n != summary and n not in done and n not in live]
    jobs = [slurm.Job(n, unit_command(out, n, every[n])) for n in todo]
    if summary is not None:
        waits = (*todo, *[n for n in live if n != summary])
        if summary in live and todo:  # an older summary job would not wait for the new units
            slurm.cancel([live.pop(summary)])
        if summary not in live and (todo or waits or not unit_done(out, summary, every[summary])):
            layout.marker_path(out, summary).unlink(missing_ok=True)
            jobs.append(slurm.Job(summary, unit_command(out, summary, every[summary]), after_ok=waits))
    ids = slurm.submit(out, jobs, options, uuid.uuid4().hex[:12], live) if jobs else {}
    lines = [f"submit {n}: job {j}" for n, j in ids.items()]
    lines += [f"queued {n}: job {j} (an earlier submission; not resubmitted)" for n, j in live.items()]
    lines += [f"skip  {n} (done)" for n in done]
    follow = [*ids.values(), *live.values()]
    if follow:
        ids_text = ",".join(follow)
        lines += [f"{len(ids)} job(s) submitted; follow them with: squeue -j {ids_text}   (after they end: "
                  f"sacct -j {ids_text}, where accounting is on); logs in {out / layout.SLURM}",
                  "the study's tables are written by the last job; the same command resubmits what is not done"]
    else:
        lines.append(f"every job of this study is done; nothing submitted ({out})")
    return Submitted(ids, live, done, "\n".join(lines))


__all__ = ["FanOut", "SUMMARY", "Submitted", "check_fanout", "check_launcher", "mark_done", "submit_fanout",
           "unit_command", "unit_done", "variant_path"]
