"""One command reproduces Paper A: ``posym reproduce --preset quick --out DIR``.

:func:`reproduce` runs a list of named **stages**, each writing into ``DIR`` and, on success only,
an atomic marker ``DIR/stages/<name>.done`` (JSON: timing, outputs). A re-run skips every stage whose
marker exists, so an interrupted reproduction continues where it stopped (training itself resumes
from its newest checkpoint through ``train(..., resume=True)``).

Stages (``{task}`` ∈ number, letter; ``{k}`` = seed 0..K-1, the init, data and order seed of a run):

==========================  =====================================================================
``train-{task}-s{k}``       GPT-J on the task with head tracking -> ``DIR/{task}/seed{k}/`` (run dir)
``dynamics-{task}-s{k}``    purity tables and Fig. 2 (γ = 0.1 and 0.05)
``flow-{task}-s{k}``        attention flow (Fig. 3 left) of the first test prompt of each hop count
``ablate-{task}-s{k}``      zero/mean ablation of every head (Fig. 3 right)
``freqs-{task}-s{k}``       RoPE frequency use, Table 1, Fig. 8, Fig. 4B
``lengthgen-{task}-s{k}``   accuracy vs added target-window tokens (Fig. 5B)
``discrepancy``             Δ(n) of the RoPE constructions (Fig. 5A) -> ``DIR/theory/``
``llm``                     1-hop prompts on the first of ``llm_models`` (SmolLM2-135M), offline
                            (Table 3) -> ``DIR/llm/``
``choice``                  the same prompts by log-likelihood, with chance levels -> ``DIR/llm/choice/``
``llm-{m}``/``choice-{m}``  the same for each further model ``m`` of ``llm_models`` -> ``DIR/llm/models/{m}/``
``report``                  multi-seed aggregation (``DIR/aggregate/``) and ``DIR/report.html``
==========================  =====================================================================

Stages run in a pool of ``jobs`` worker processes (``spawn``; torch threads = #cpus // jobs, i.e. 1
on a 2-core machine, where two 1-thread trainings side by side beat one 2-thread training), as
soon as the stages they depend on are done; ``jobs=1`` runs everything in this process. On a CUDA device
the ``ablate``/``freqs``/``lengthgen`` stages of all runs go to one more worker, one after another
(:func:`~posym.verbs.reproduce_stages.analyses_in_one_process`). The
``report`` stage runs last, in this process, whenever any other stage ran or failed (and is not
marked done while a stage has failed). A failed stage leaves no marker; the stages that need it are
not started; the others go on, and :func:`reproduce` raises :class:`PosymError` at the end.

With ``launcher="slurm"`` every stage is one Slurm job instead (:mod:`posym.launch.slurm`,
docs/cluster.md): the job runs :func:`run_stage` (``posym _stage DIR NAME``), which runs the same
stage function and writes the same marker; dependencies are Slurm's (``afterok``; the report job
``afterany``, marked done only when every stage of its submission is). A re-run submits only the
stages that are neither done nor queued; the directory's lock names the jobs, so a second
submission is refused while they run, even after the submitting command has returned (``detach``).

The settings of each preset are the ``reproduce`` sections of :data:`posym.presets.PRESETS` (one documented
dict each); ``DIR/reproduce.json`` records the settings a directory was made with, and a re-run with
different settings is refused.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from posym.constants import TASKS
from posym.errors import PosymError
from posym.progress import is_terminal, line_progress
from posym.runs import layout
from posym.runs.lock import DirLock, read_lock
from posym.runs.provenance import versions
from posym.launch import slurm
from posym.launch.pool import Inline, call_stage, terminate_workers, worker_init
from posym.verbs.settings import (IMPLIED_SETTINGS, PRESETS, STAGE_SETTINGS, check_train_batched,  # noqa: F401
                                  overrides_from_pairs, preset_settings, train_batched, train_config,
                                  validate_settings)
from posym.verbs.reproduce_stages import (ANALYSIS_KINDS, STAGE_FUNCS, Context, analyses_in_one_process,  # noqa: F401
                                          llm_available, stage_ablate,
                                          stage_choice, stage_discrepancy, stage_dynamics, stage_flow, stage_freqs,
                                          stage_lengthgen, stage_llm, stage_train)

STAGE_KINDS = ("train", "dynamics", "flow", "ablate", "freqs", "lengthgen", "discrepancy", "llm", "choice", "report")
RUN_STAGES = ("dynamics", "flow", "ablate", "freqs", "lengthgen")  # per (task, seed), after training
_PRIORITY = {"train": 0, "llm": 1, "choice": 1, "lengthgen": 2, "freqs": 3, "ablate": 3, "dynamics": 4, "flow": 4,
             "discrepancy": 5, "report": 9}


# ------------------------------------------------------------------------------------------------
# planning
# ------------------------------------------------------------------------------------------------
@dataclass
class Stage:
    name: str
    kind: str
    task: str | None = None
    seed: int | None = None
    model: int | None = None  # llm / choice: index into the llm_models setting
    deps: tuple[str, ...] = ()
    skip_note: str | None = None  # set: the stage is skipped with this note (no marker)

    @property
    def args(self) -> tuple:
        if self.task is not None:
            return (self.task, self.seed)
        return (self.model,) if self.model is not None else ()

    @property
    def priority(self) -> int:
        return _PRIORITY[self.kind]


def plan_stages(tasks: Sequence[str], seeds: int, llm: bool = True, choice: bool = True,
                llm_models: Sequence[str] = ("smollm2",), batched: bool = False) -> list[Stage]:
    """Every stage of a reproduction, in a valid order (dependencies first); ``choice``: with ``llm``,
    also the log-likelihood protocol (stage ``choice``). The first of ``llm_models`` has the stages
    ``llm`` / ``choice``, each other one ``llm-<name>`` / ``choice-<name>``. ``batched`` (setting
    ``train_batched``): ``train-{task}-s0`` trains every seed of the task, the other seeds' train stages
    come after it."""
    stages: list[Stage] = []
    for task in tasks:
        for k in range(seeds):
            deps = (f"train-{task}-s0",) if batched and k else ()
            stages.append(Stage(f"train-{task}-s{k}", "train", task, k, deps=deps))
    for task in tasks:
        for k in range(seeds):
            for kind in RUN_STAGES:
                stages.append(Stage(f"{kind}-{task}-s{k}", kind, task, k, deps=(f"train-{task}-s{k}",)))
    stages.append(Stage("discrepancy", "discrepancy"))
    if llm:
        for i, m in enumerate(llm_models):
            suffix = f"-{layout.llm_model_slug(m)}" if i else ""
            stages.append(Stage(f"llm{suffix}", "llm", model=i))
            if choice:
                stages.append(Stage(f"choice{suffix}", "choice", model=i))
    stages.append(Stage("report", "report", deps=tuple(s.name for s in stages)))
    return stages


def select_stages(stages: list[Stage], selectors: Sequence[str] | None) -> list[Stage]:
    """Stages matching any selector: a full name (``freqs-number-s0``), a kind (``freqs``) or a
    name prefix (``freqs-number``)."""
    if not selectors:
        return list(stages)
    chosen = []
    unknown = []
    for sel in selectors:
        sel = sel.strip()
        hit = [s for s in stages if s.name == sel or s.kind == sel or s.name.startswith(sel + "-")]
        if not hit:
            unknown.append(sel)
        chosen.extend(hit)
    if unknown:
        raise PosymError(f"unknown stage(s) {', '.join(unknown)}; stages: {', '.join(s.name for s in stages)}")
    names = {s.name for s in chosen}
    return [s for s in stages if s.name in names]


# ------------------------------------------------------------------------------------------------
# markers
# ------------------------------------------------------------------------------------------------
def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


def _check_settings(out: Path, preset: str, settings: dict) -> None:
    """Refuse settings that contradict a finished stage of ``out``; a setting that only unfinished
    stages read may change (so a failed stage can be re-run with a corrected value)."""
    path = out / layout.REPRODUCE_JSON
    if not path.is_file():
        return
    try:
        old = json.loads(path.read_text())
    except (json.JSONDecodeError, OSError):
        return
    if old.get("preset") != preset:
        raise PosymError(f"{out} was made with preset {old.get('preset')!r}, not {preset!r}; "
                         "use another --out directory (or delete it) to reproduce with these")
    new = json.loads(json.dumps(settings))
    before = {**IMPLIED_SETTINGS, **(old.get("settings") or {})}
    for key in sorted(set(new) | set(before)):
        if new.get(key) == before.get(key):
            continue
        kinds = [k for k, keys in STAGE_SETTINGS.items() if key in keys]
        if "train" in kinds:
            kinds = list(STAGE_SETTINGS)  # every analysis reads the trained models
        sdir = out / layout.STAGES
        done = sorted(p.stem for p in sdir.glob("*.done") if p.stem.split("-")[0] in kinds) if sdir.is_dir() else []
        if done:
            raise PosymError(
                f"{out} was made with {key}={json.dumps(before.get(key))}, not {json.dumps(new.get(key))}, and "
                f"stage {done[0]} is done with it; use another --out directory, or delete "
                f"{sdir}/{done[0].split('-')[0]}*.done to redo the stages that read it")


# ------------------------------------------------------------------------------------------------
# the driver
# ------------------------------------------------------------------------------------------------
def _say(msg: str) -> None:
    # on a terminal, first clear the line: a worker's progress bar may be drawn on it
    clear = "\r\x1b[K" if is_terminal(sys.stdout) else ""
    print(f"{clear}[reproduce] {msg}", flush=True)


def reproduce(preset: str = "quick", out: str | os.PathLike = "runs/reproduce", seeds: int = 1,
              device: str = "cpu", tasks: Sequence[str] = TASKS, stages: Sequence[str] | None = None,
              llm: bool = True, progress: bool = True, jobs: int | None = None,
              overrides: dict[str, Any] | None = None, launcher: str = "local",
              slurm_options: slurm.SlurmOptions | None = None, detach: bool = False) -> Path:
    """Reproduce Paper A into ``out`` (see the module docstring); returns the path of ``report.html``.

    ``seeds`` K: runs with seeds 0..K-1 per task, aggregated as mean ± sd. ``tasks``: subset of
    number, letter. ``stages``: only these stages (names, kinds or name prefixes; see
    :func:`select_stages`); the others are neither run nor required unless a selected stage needs
    one that is not done. ``llm=False`` leaves out the LLM evaluations (``llm_models``); without the ``[llm]``
    extra it is skipped with a note (in the report too). ``jobs``: worker processes (default
    ``min(#cpus, #runs)``; 1 = everything in this process). ``overrides``: settings merged into
    the preset's :data:`PRESETS` dict (e.g. ``{"lengthgen_n": 100}``).
    ``launcher``: ``local`` (this machine) or ``slurm`` (one job per stage, submitted with
    ``slurm_options``; :func:`posym.launch.slurm.slurm_options`); ``detach``: return once the jobs are
    submitted instead of waiting for them (``posym status DIR`` follows them).
    Raises PosymError if a stage failed (after running every stage that does not need it).
    """
    t_start = time.perf_counter()
    tasks = tuple(tasks)
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise PosymError(f"unknown task(s) {bad or list(tasks)}; choose from {', '.join(TASKS)}")
    if isinstance(seeds, bool) or int(seeds) < 1:
        raise PosymError(f"seeds must be >= 1, got {seeds!r}")
    seeds = int(seeds)
    settings = preset_settings(preset, overrides)
    validate_settings(settings, tasks)
    if device.startswith("cuda") and launcher == "local":  # (a Slurm job checks on its GPU node)
        import torch

        if not torch.cuda.is_available():
            raise PosymError("--device cuda requested but CUDA is not available")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PosymError(f"{out} exists and is not a directory")
    check_train_batched(settings, tasks, seeds, device)
    all_stages = plan_stages(tasks, seeds, llm=llm, choice=bool(settings["llm_choice"]),
                             llm_models=settings["llm_models"], batched=train_batched(settings))
    chosen = select_stages(all_stages, stages)
    if launcher not in slurm.LAUNCHERS:
        raise PosymError(f"unknown launcher {launcher!r}; choose {' or '.join(slurm.LAUNCHERS)}")
    if launcher == "local" and (slurm_options is not None or detach):
        raise PosymError("--slurm-* options, --launcher-config and --detach need --launcher slurm")
    if launcher == "slurm":
        if jobs is not None:
            raise PosymError("--jobs sets the local worker processes; with --launcher slurm every stage is a job")
        slurm_options = slurm_options or slurm.SlurmOptions()
        slurm.check_cluster(slurm_options, _stage_job(out, chosen[0], "check"), out)  # before any write
    with DirLock(out, "reproduction") as lock:  # one reproduction per directory at a time
        _check_settings(out, preset, settings)
        try:
            (out / layout.STAGES).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise PosymError(f"cannot write to {out}: {exc.strerror or exc}") from exc
        with line_progress():  # progress as plain lines when stderr is not a terminal (a log file)
            if launcher == "slurm":
                return _reproduce_on_slurm(out, preset, settings, tasks, seeds, device, chosen, llm, lock,
                                           slurm_options, detach, t_start)
            return _reproduce(out, preset, settings, tasks, seeds, device, chosen, llm, progress, jobs, t_start)


def _write_marker(out: Path, name: str, res: dict, started: float) -> None:
    """The marker of a stage that succeeded (:func:`posym.runs.layout.marker_path`)."""
    layout.write_json_atomic(layout.marker_path(out, name), {
        "stage": name, "status": "done", "seconds": round(res["seconds"], 2),
        "started": datetime.fromtimestamp(started, timezone.utc).astimezone().isoformat(timespec="seconds"),
        "finished": _now(), "info": res.get("info", {})})


def _skip_notes(out: Path, chosen: list[Stage], llm: bool, models: Sequence[str]) -> str | None:
    """Set the skip note of each LLM stage that cannot run here; returns the report's LLM note."""
    llm_note = None if llm else "not run: --no-llm"
    available: dict[int, tuple[bool, str]] = {}
    for llm_stage in (s for s in chosen if s.kind in ("llm", "choice")):
        if layout.read_marker(out, llm_stage.name) is None:
            i = int(llm_stage.model or 0)
            ok, why = available[i] if i in available else available.setdefault(i, llm_available(models[i]))
            if not ok:
                llm_stage.skip_note = f"{models[i]} evaluation skipped: {why}"
                llm_note = llm_note or llm_stage.skip_note
    return llm_note


def _write_meta(out: Path, preset: str, settings: dict, tasks: tuple[str, ...], seeds: int, device: str,
                llm: bool, llm_note: str | None, **extra: Any) -> None:
    meta_path = out / layout.REPRODUCE_JSON
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {"created": _now()}
    meta.update(preset=preset, settings=settings, device=device, tasks=list(tasks), seeds=seeds, llm=llm,
                llm_note=llm_note, updated=_now(), versions=versions(),
                command=" ".join(sys.argv) if sys.argv and "posym" in Path(sys.argv[0]).name else None, **extra)
    layout.write_json_atomic(meta_path, meta)


def _sort_out(out: Path, chosen: list[Stage], models: Sequence[str]) -> tuple[dict[str, str], list[Stage], bool]:
    """Stages done (marker) or skipped (a note) -> ``state``; the others -> ``todo``; and whether a
    skip note is new (the report does not show it yet)."""
    state: dict[str, str] = {}
    todo: list[Stage] = []
    new_notes = False
    for st in chosen:
        m = layout.read_marker(out, st.name)
        if m is not None and st.kind != "report":
            state[st.name] = "done"
            _say(f"skip  {st.name} (done, {m.get('seconds', 0):.1f} s)")
        elif st.skip_note:
            state[st.name] = "skipped"
            note_path = layout.llm_dir(out, models, int(st.model or 0)) / layout.SKIPPED_JSON
            old_note = json.loads(note_path.read_text()).get("reason") if note_path.is_file() else None
            if old_note != st.skip_note:
                new_notes = True
                layout.write_json_atomic(note_path, {"reason": st.skip_note, "time": _now()})
            _say(f"skip  {st.name} — {st.skip_note}")
        else:
            todo.append(st)
    return state, todo, new_notes


def _reproduce(out: Path, preset: str, settings: dict, tasks: tuple[str, ...], seeds: int, device: str,
               chosen: list[Stage], llm: bool, progress: bool, jobs: int | None, t_start: float) -> Path:
    models = settings["llm_models"]
    llm_note = _skip_notes(out, chosen, llm, models)

    n_runs = len(tasks) * seeds
    cpus = os.cpu_count() or 1
    jobs = int(jobs) if jobs else max(1, min(cpus, n_runs))
    if jobs < 1:
        raise PosymError(f"jobs must be >= 1, got {jobs}")

    _write_meta(out, preset, settings, tasks, seeds, device, llm, llm_note, jobs=jobs, launcher="local", slurm=None)
    _say(f"preset {preset}, tasks {', '.join(tasks)}, {'seed 0' if seeds == 1 else f'seeds 0..{seeds - 1}'}, "
         f"device {device}, {jobs} job{'s' if jobs > 1 else ''}; output {out}")

    threads = max(1, cpus // jobs) if jobs > 1 else None
    ctx = Context(out=str(out), settings=settings, device=device, progress=progress, threads=threads, seeds=seeds)
    names = {s.name for s in chosen}
    executed: list[str] = []
    failed: dict[str, str] = {}
    state, todo, new_notes = _sort_out(out, chosen, models)  # state: name -> done | skipped | failed | blocked

    def deps_state(st: Stage) -> str:
        """ready | wait | blocked(reason)"""
        for d in st.deps:
            if d in names:
                s = state.get(d)
                if s is None:
                    return "wait"
                if s in ("failed", "blocked"):
                    return f"blocked: {d} {s}"
            elif layout.read_marker(out, d) is None:
                return f"blocked: needs stage {d}, which is not done (add it to --stages)"
        return "ready"

    report = next((s for s in todo if s.kind == "report"), None)
    work = [s for s in todo if s.kind != "report"]
    tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
    apool = None  # on CUDA: the one process that runs every ablate/freqs/lengthgen stage, one after another
    if jobs > 1 and work:
        import multiprocessing as mp

        mpc = mp.get_context("spawn")
        counter = mpc.Value("i", 0)
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(work)), mp_context=mpc,
                                   initializer=worker_init, initargs=(counter, tty, os.getpid()))
        if analyses_in_one_process(device, jobs) and any(s.kind in ANALYSIS_KINDS for s in work):
            apool = ProcessPoolExecutor(max_workers=1, mp_context=mpc, initializer=worker_init,
                                        initargs=(counter, tty, os.getpid()))
        run_ctx = ctx
    else:
        pool = Inline()
        run_ctx = Context(out=ctx.out, settings=settings, device=device, progress=progress, threads=None, seeds=seeds)

    def pool_of(st: Stage) -> Any:
        return apool if apool is not None and st.kind in ANALYSIS_KINDS else pool

    running: dict[Future, tuple[Stage, float]] = {}
    pending = list(work)
    try:
        while pending or running:
            progressed = False
            for st in sorted(pending, key=lambda s: s.priority):
                target = pool_of(st)
                if sum(pool_of(r) is target for r, _ in running.values()) >= (1 if target is apool else jobs):
                    continue  # that pool is full
                ds = deps_state(st)
                if ds == "wait":
                    continue
                pending.remove(st)
                progressed = True
                if ds.startswith("blocked"):
                    state[st.name] = "blocked"
                    _say(f"skip  {st.name} ({ds})")
                    continue
                _say(f"start {st.name}")
                running[target.submit(call_stage, STAGE_FUNCS[st.kind], run_ctx, st.args)] = (st, time.time())
            if not running:
                if pending and not progressed:  # cannot happen with a valid plan; be safe
                    for st in pending:
                        state[st.name] = "blocked"
                        _say(f"skip  {st.name} (dependencies not satisfiable)")
                    pending.clear()
                continue
            finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
            for fut in finished:
                st, started = running.pop(fut)
                try:
                    res = fut.result()
                except Exception as exc:  # noqa: BLE001 - a crashed worker (e.g. killed for memory)
                    res = {"ok": False, "error": f"worker failed: {type(exc).__name__}: {exc}",
                           "traceback": "", "seconds": time.time() - started}
                executed.append(st.name)
                if res["ok"]:
                    state[st.name] = "done"
                    _write_marker(out, st.name, res, started)
                    _say(f"done  {st.name} in {res['seconds']:.1f} s")
                else:
                    state[st.name] = "failed"
                    failed[st.name] = res["error"]
                    _say(f"FAIL  {st.name} after {res['seconds']:.1f} s: {res['error']}")
                    if res.get("traceback"):
                        print(res["traceback"], file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        # Ctrl-C (or a SIGINT to this process alone): stop the workers now instead of waiting for the
        # stages they run; their runs resume from the newest checkpoint on the next reproduce
        for p in (pool, apool) if apool is not None else (pool,):
            terminate_workers(p)  # first: shutdown() forgets the worker processes
            p.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    if apool is not None:
        apool.shutdown(wait=True)

    report_path = out / layout.REPORT_HTML
    if report is not None:
        if failed:  # the report cannot be up to date: let the next run write it again
            layout.marker_path(out, "report").unlink(missing_ok=True)
        if layout.read_marker(out, "report") is None or executed or failed or new_notes:
            _say("start report")
            t0 = time.perf_counter()
            res = _run_report(out)
            executed.append("report")
            if res["ok"] and not failed:
                layout.write_json_atomic(layout.marker_path(out, "report"), {
                    "stage": "report", "status": "done", "seconds": round(res["seconds"], 2), "finished": _now(),
                    "info": res.get("info", {})})
            if res["ok"]:
                _say(f"done  report in {time.perf_counter() - t0:.1f} s -> {report_path}")
            else:
                failed["report"] = res["error"]
                _say(f"FAIL  report: {res['error']}")
                print(res.get("traceback", ""), file=sys.stderr, flush=True)
        else:
            _say("skip  report (done, nothing changed)")
    total = time.perf_counter() - t_start
    layout.write_json_atomic(out / layout.STAGES / layout.LAST_RUN, {
        "finished": _now(), "seconds": round(total, 2), "executed": executed,
        "skipped": [n for n, s in state.items() if s in ("done", "skipped") and n not in executed],
        "blocked": [n for n, s in state.items() if s == "blocked"], "failed": failed})
    blocked = [n for n, s in state.items() if s == "blocked"]
    _say(f"finished in {total:.1f} s" + (f"; {len(failed)} stage(s) failed" if failed else "")
         + (f"; {len(blocked)} not run (blocked)" if blocked else ""))
    if failed:
        raise PosymError(f"{len(failed)} stage(s) failed ({', '.join(failed)})"
                         + (f" and {len(blocked)} could not run" if blocked else "")
                         + "; the others are done. Run the same command again to retry them "
                         f"(first error: {next(iter(failed.values()))})")
    if blocked:
        raise PosymError(f"{len(blocked)} stage(s) not run ({', '.join(blocked)}): a stage they need is not done; "
                         "include it in --stages")
    return report_path


# ------------------------------------------------------------------------------------------------
# the Slurm launcher: one job per stage (posym.launch.slurm), each running run_stage
# ------------------------------------------------------------------------------------------------
def _stage_job(out: Path, st: Stage, submission: str, **deps: tuple[str, ...]) -> slurm.Job:
    return slurm.Job(st.name, ("_stage", str(Path(out).absolute()), st.name, "--submission", submission), **deps)


def _reproduce_on_slurm(out: Path, preset: str, settings: dict, tasks: tuple[str, ...], seeds: int, device: str,
                        chosen: list[Stage], llm: bool, lock: DirLock, options: slurm.SlurmOptions, detach: bool,
                        t_start: float) -> Path:
    import uuid

    models = settings["llm_models"]
    llm_note = _skip_notes(out, chosen, llm, models)
    _write_meta(out, preset, settings, tasks, seeds, device, llm, llm_note, jobs=None, launcher="slurm",
                slurm=options.directives())
    _say(f"preset {preset}, tasks {', '.join(tasks)}, {'seed 0' if seeds == 1 else f'seeds 0..{seeds - 1}'}, "
         f"device {device}, one Slurm job per stage ({' '.join(options.directives()) or 'cluster defaults'}); "
         f"output {out}")
    state, todo, new_notes = _sort_out(out, chosen, models)
    queued = slurm.live_jobs(out)  # stage -> job of an earlier submission still queued or running
    submission = uuid.uuid4().hex[:12]
    jobs: list[slurm.Job] = []
    blocked: list[str] = []
    for st in todo:
        if st.kind == "report":
            continue
        if st.name in queued:
            _say(f"queued {st.name} (job {queued[st.name]})")
            continue
        why = next((f"{d} blocked" if d in blocked else f"needs stage {d}, which is not done (add it to --stages)"
                    for d in st.deps if layout.read_marker(out, d) is None and d not in queued
                    and not any(j.name == d for j in jobs)), None)
        if why is not None:
            blocked.append(st.name)
            _say(f"skip  {st.name} (blocked: {why})")
            continue
        jobs.append(_stage_job(out, st, submission, after_ok=st.deps))
    report = next((s for s in todo if s.kind == "report"), None)
    if report is not None:
        if jobs or queued or new_notes or layout.read_marker(out, "report") is None:
            layout.marker_path(out, "report").unlink(missing_ok=True)  # the report job marks it again
            jobs.append(_stage_job(out, report, submission, after_any=(*[j.name for j in jobs], *queued)))
        else:
            _say("skip  report (done, nothing changed)")
    report_path = out / layout.REPORT_HTML
    ids = slurm.submit(out, jobs, options, submission, queued) if jobs else {}
    every = {**queued, **ids}
    if every:  # the lock names every job, and every submission whose jobs may write (run_stage checks it)
        earlier = {str(e.get("submission")) for n, e in slurm.recorded_jobs(out).items() if n in queued}
        lock.hold_for_jobs(list(every.values()), submission=submission, submissions=sorted(earlier | {submission}))
    for name, job in ids.items():
        _say(f"submit {name}: job {job}")
    if detach and every:
        _say(f"{len(ids)} job(s) submitted; they run without this command: posym status {out} follows them, "
             f"the last one writes {report_path}")
        return report_path
    final = slurm.wait(every, _say) if every else {}
    failed = {n: f"job {j} {final.get(n, 'ENDED')} (log {layout.slurm_log(out, n, j)})" for n, j in every.items()
              if layout.read_marker(out, n) is None and (n != "report" or final.get(n) != "COMPLETED")}
    total = time.perf_counter() - t_start
    layout.write_json_atomic(out / layout.STAGES / layout.LAST_RUN, {
        "finished": _now(), "seconds": round(total, 2), "launcher": "slurm", "jobs": every,
        "executed": [n for n in every if n not in failed],
        "skipped": [n for n, s in state.items() if s in ("done", "skipped")], "blocked": blocked, "failed": failed})
    _say(f"finished in {total:.1f} s" + (f"; {len(failed)} stage(s) failed" if failed else "")
         + (f"; {len(blocked)} not run (blocked)" if blocked else ""))
    if failed:
        raise PosymError(f"{len(failed)} stage(s) failed ({', '.join(failed)}); the others are done. Run the same "
                         f"command again to resubmit them (first: {next(iter(failed.values()))})")
    if blocked:
        raise PosymError(f"{len(blocked)} stage(s) not run ({', '.join(blocked)}): a stage they need is not done; "
                         "include it in --stages")
    return report_path


def run_stage(out: str | os.PathLike, name: str, submission: str | None = None, progress: bool = True) -> dict:
    """Run stage ``name`` of the reproduction in ``out`` in this process, with the settings its
    ``reproduce.json`` records, and write its marker on success: what one Slurm job does (``posym
    _stage``). With ``submission``, refuse (PosymError) unless the directory's lock belongs to that
    submission. SIGTERM (``scancel``, pre-emption) stops it like Ctrl-C: locks released, the run resumes
    from its newest checkpoint next time. ``report``: marked done only if every stage of its
    submission is. Returns the marker (or ``{"note": ...}`` for a stage already done)."""
    import signal

    out = Path(out)
    meta = layout.read_json(out / layout.REPRODUCE_JSON)
    if not meta.get("settings"):
        raise PosymError(f"{out} has no {layout.REPRODUCE_JSON}: not a reproduction directory")
    holder = read_lock(out)
    if submission is not None and (not holder or submission not in (holder.get("submission"),
                                                                     *holder.get("submissions", ()))):
        raise PosymError(f"{out} is no longer held by submission {submission}; this job does nothing "
                         "(posym reproduce submits what is not done)")
    settings = meta["settings"]
    plan = plan_stages(tuple(meta["tasks"]), int(meta["seeds"]), llm=bool(meta.get("llm", True)),
                       choice=bool(settings.get("llm_choice")), llm_models=settings.get("llm_models", ("smollm2",)),
                       batched=train_batched(settings))
    st = next((s for s in plan if s.name == name), None)
    if st is None:
        raise PosymError(f"unknown stage {name!r} of {out}; stages: {', '.join(s.name for s in plan)}")
    if st.kind != "report" and layout.read_marker(out, name) is not None:
        return {"note": f"{name} is done"}
    cpus = os.environ.get("SLURM_CPUS_PER_TASK") or os.environ.get("SLURM_CPUS_ON_NODE")  # the job's CPUs
    ctx = Context(out=str(out), settings=settings, device=meta.get("device", "cpu"), progress=progress,
                  threads=int(cpus) if cpus and cpus.isdigit() else None, seeds=int(meta["seeds"]))

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    started = time.time()
    try:
        res = _run_report(out) if st.kind == "report" else call_stage(STAGE_FUNCS[st.kind], ctx, st.args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not res["ok"]:
        if res.get("traceback"):
            print(res["traceback"], file=sys.stderr, flush=True)
        raise PosymError(f"stage {name} failed: {res['error']}")
    if st.kind == "report":
        mine = [n for n, e in slurm.recorded_jobs(out).items()
                if n != "report" and isinstance(e, dict) and e.get("submission") == submission]
        missing = [n for n in mine if layout.read_marker(out, n) is None]
        if missing:
            _say(f"report written; not marked done: {len(missing)} stage(s) not done ({', '.join(missing)})")
            return {"note": "report written, stages missing", "missing": missing}
    _write_marker(out, name, res, started)
    _say(f"done  {name} in {res['seconds']:.1f} s")
    return layout.read_marker(out, name) or {}


def _run_report(out: Path) -> dict:
    t0 = time.perf_counter()
    try:
        from posym.report.html import write_report
        from posym.report.render import find_chromium, screenshot

        path = write_report(out)
        info: dict[str, Any] = {"report": str(path), "bytes": path.stat().st_size}
        if find_chromium():
            try:
                info["screenshot"] = str(screenshot(path, out / layout.REPORT_PNG))
            except PosymError as exc:  # best effort: the report itself is written
                info["screenshot_error"] = str(exc)
        return {"ok": True, "info": info, "seconds": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
                "seconds": time.perf_counter() - t0}


__all__ = ["PRESETS", "STAGE_FUNCS", "STAGE_KINDS", "STAGE_SETTINGS", "Stage", "llm_available", "overrides_from_pairs",
           "plan_stages", "preset_settings", "reproduce", "run_stage", "select_stages", "validate_settings"]
