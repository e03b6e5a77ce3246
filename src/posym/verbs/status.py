"""``posym status DIR``: the state of every stage of a reproduction, from its markers and, for stages
submitted with ``--launcher slurm``, from ``squeue`` / ``scontrol`` (docs/cluster.md)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pandas as pd

from posym.errors import PosymError
from posym.runs import layout
from posym.runs.lock import live_holder
from posym.verbs import VerbResult
from posym.verbs.reproduce import plan_stages
from posym.launch.slurm import job_states, recorded_jobs


def _holder_line(out: Path) -> str:
    holder = live_holder(out)
    if holder is None:
        return "no writer holds it"
    if holder.get("slurm_jobs") and holder.get("submission"):
        return f"held by {len(holder['slurm_jobs'])} Slurm job(s) of submission {holder['submission']}"
    since = holder.get("started")
    when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
    return f"held by process {holder.get('pid', '?')} on {holder.get('host', '?')}{when}"


def status(out: str | os.PathLike) -> VerbResult:
    """One row per stage of the reproduction in ``out`` (stage, state, seconds, job, log): ``done`` (a
    marker), the Slurm state of its newest job (``PENDING (Dependency)``, ``RUNNING``, or how it ended
    without a marker: ``FAILED``, ``CANCELLED``, ``TIMEOUT``, ...) or ``not done``. Reads only."""
    out = Path(out)
    meta = layout.read_json(out / layout.REPRODUCE_JSON)
    if not meta.get("settings") and (out / layout.REPRODUCE_JSON).is_file():
        raise PosymError(f"{out / layout.REPRODUCE_JSON} is corrupt (not the JSON record posym reproduce writes); "
                         "restore it, or re-run the same posym reproduce command to rewrite it")
    if not meta.get("settings"):
        raise PosymError(f"{out} is not a reproduction directory (no {layout.REPRODUCE_JSON}); "
                         "posym status reads one made by posym reproduce")
    s = meta["settings"]
    plan = plan_stages(tuple(meta["tasks"]), int(meta["seeds"]), llm=bool(meta.get("llm", True)),
                       choice=bool(s.get("llm_choice")), llm_models=s.get("llm_models", ("smollm2",)))
    rec = recorded_jobs(out)
    jobs = {n: str(e["job"]) for n, e in rec.items() if isinstance(e, dict) and e.get("job")}
    pending = {n: j for n, j in jobs.items() if layout.read_marker(out, n) is None}
    states = job_states(pending) if pending else {}
    rows = []
    for st in plan:
        marker = layout.read_marker(out, st.name)
        job = jobs.get(st.name, "")
        if st.name in pending:
            state = states.get(st.name, "?") if states is not None else "squeue does not answer"
        else:
            state = "done" if marker is not None else "not done"
        rows.append({"stage": st.name, "state": state, "seconds": marker.get("seconds") if marker else None,
                     "job": job, "log": str(layout.slurm_log(out, st.name, job)) if job else ""})
    table = pd.DataFrame(rows, columns=["stage", "state", "seconds", "job", "log"])
    done = int((table["state"] == "done").sum())
    lines = [f"{out}: {done} of {len(table)} stages done; {_holder_line(out)}"]
    width = max(len(r["stage"]) for r in rows)
    for r in rows:
        extra = f"  job {r['job']}" if r["job"] else ""
        extra += f"  log {r['log']}" if r["job"] and r["state"].split()[0] not in ("done", "PENDING", "RUNNING") \
            else ""
        lines.append(f"  {r['stage']:<{width}}  {r['state']}{extra}")
    return VerbResult(table=table, summary="\n".join(lines), data={"done": done})


__all__ = ["status"]
