"""``posym interventions``: the interventions study (docs/interventions.md) — every trained model of
both tasks under each inference-time intervention: Fig. 5B (accuracy vs added tokens), the heads on
lengthened inputs, one table intervention × task with the theory's prediction beside it, an HTML page.

Each model gets a folder ``OUT/<task>-s<seed>/`` with its ``lengthgen.csv`` (resumed point by point)
and ``intervention_heads.csv`` (resumed per intervention and length), so the same command continues
an interrupted study, adds interventions or models, and two processes may measure different models
into one ``OUT`` at once; the study table, figures and page are rebuilt from every model folder in
``OUT`` at the end of each call.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Sequence

import pandas as pd

from posym.constants import TASKS
from posym.errors import PosymError
from posym.heads.tracking import lengthened_score_table
from posym.interventions import check_interventions, describe, intervened, parse_intervention
from posym.interventions.registry import per_layer_names
from posym.launch.fanout import FanOut, check_launcher, submit_fanout
from posym.launch.slurm import SlurmOptions
from posym.lengthgen.trained import parse_grid
from posym.model.adapters import get_adapter
from posym.report.paper import LENGTHGEN
from posym.runs import layout
from posym.runs.lock import DirLock, refuse_live_outputs
from posym.runs.resolve import check_model_folder, model_architecture, resolve_model, show_architecture
from posym.runs.tables import INTERVENTION, NO_INTERVENTION, RUN_TABLES, TableSchema, check_rows, read_table
from posym.studies._page import write_page
from posym.studies.intervention_study import tables
from posym.studies.intervention_study.figures import plot_head_readout, plot_intervention_curves
from posym.studies.intervention_study.study import HEAD_LENGTHS, INDEX_LAYERS, SEARCH_GRID
from posym.studies.intervention_study.study import prediction_applies
from posym.studies.intervention_study.tables import best_settings, for_model, study_grid, study_settings, study_summary, \
    summary_markdown
from posym.verbs import Outputs, VerbResult, figure_paths
from posym.verbs.lengthgen import lengthgen

#: ``intervention_heads.csv`` of a model folder: one row per (intervention, added length, head); read
#: back (resumed, collected) only after these checks.
HEADS_SCHEMA = TableSchema(layout.INTERVENTION_HEADS, "intervention, added length and head of one model", {
    INTERVENTION: "canonical intervention string", "extra_tokens": "added target-window tokens",
    "layer": "layer index", "head": "head index", "s_pos": "s_POS in [-1, 1]", "s_sym": "s_SYM in [-1, 1]",
    "n_prompts": "prompts averaged"}, "posym interventions", (INTERVENTION, "extra_tokens", "layer", "head"),
    kinds={INTERVENTION: "intervention", "extra_tokens": "count", "layer": "count", "head": "count",
           "n_prompts": "positive"})
#: The columns ``--best-of`` reads from an earlier study's ``interventions.csv``.
BEST_OF_COLUMNS: tuple[str, ...] = ("task", "intervention", "family", "acc_0_mean", "reach_mean", "acc_grid_mean")
_NO_FORCE = "(posym interventions has no --force)"


def _read_heads(path: Path) -> pd.DataFrame:
    """A model folder's head readout, checked (schema, kinds, no point twice, scores in [-1, 1])."""
    remedy = f"remove {path} to measure the head readout afresh {_NO_FORCE}"
    t = check_rows(path, HEADS_SCHEMA, remedy)
    for col in ("s_pos", "s_sym"):
        bad = pd.to_numeric(t[col], errors="coerce")
        bad = t.index[~(bad.abs() <= 1)]  # NaN, text and |s| > 1 fail
        if len(bad):
            raise PosymError(f"{path} row {bad[0] + 1}: {col} = {t.loc[bad[0], col]!r} is not a score in [-1, 1]; "
                             f"fix or remove the row, or {remedy}")
    return t


def _read_lengthgen(path: Path) -> pd.DataFrame:
    """A model folder's length table, checked (:data:`~posym.runs.tables.RUN_TABLES` ``lengthgen``)."""
    t = check_rows(path, RUN_TABLES["lengthgen"], f"remove {path.parent} to measure that model afresh {_NO_FORCE}")
    if INTERVENTION not in t.columns:
        t.insert(0, INTERVENTION, NO_INTERVENTION)
    if t.empty:
        raise PosymError(f"{path} holds no rows; remove {path.parent} to measure that model afresh {_NO_FORCE}")
    return t


def _label(run: Path, task: str | None = None) -> tuple[str, str, tuple]:
    """``(task, label, architecture)`` of one model of the study, checked before any model loads
    (:func:`posym.runs.resolve.check_model_folder`): a posym run is ``{task}-s{seed}``, any other
    model folder (an HF Trainer output_dir, a ``checkpoint-N/``, a model folder) ``{task}-{folder name}``."""
    ckpt, task = check_model_folder(run, task)
    cfg = layout.read_meta(run).get("config")
    if layout.is_run_dir(run) and isinstance(cfg, dict):
        label = f"{task}-s{cfg.get('seed', 0)}"
    else:
        label = f"{task}-{layout.safe_name(Path(run).resolve().name)}"
    return task, label, model_architecture(ckpt)


def _check_one_architecture(out: Path, archs: dict[str, tuple]) -> None:
    """One study, one architecture: the models given now and those an earlier call measured into
    ``out`` (its record, ``interventions.json``) must share ``(model_type, layers, heads, width)``, since
    the study table averages models over seeds; a one-line PosymError otherwise."""
    seen: dict[tuple, str] = {}
    path = out / layout.INTERVENTIONS_JSON
    if path.is_file():
        for call in _record(out, {})["calls"][:-1]:
            for label, arch in (call.get("architectures") or {}).items() if isinstance(call, dict) else ():
                seen.setdefault(tuple(arch), f"{label} (measured into {out} before)")
    for label, arch in archs.items():
        seen.setdefault(arch, label)
    if len(seen) > 1:
        (a, who_a), (b, who_b) = list(seen.items())[:2]
        raise PosymError(f"one interventions study averages one architecture: {who_a} is {show_architecture(a)} but "
                         f"{who_b} is {show_architecture(b)}; give each architecture its own --out")


def _grid(grid: str | Sequence[int]) -> list[int]:
    return list(SEARCH_GRID) if grid == "search" else parse_grid(grid)


def _head_rows(model, task: str, interv: str, extra: int, n: int, seed: int) -> pd.DataFrame:
    """Scores of every head (mean over ``n`` lengthened test-layout prompts,
    :func:`posym.heads.tracking.lengthened_score_table`) under ``interv``."""
    with intervened(model, interv):
        t = lengthened_score_table(model, task, n, extra, seed)
    t.insert(0, "extra_tokens", extra)
    t.insert(0, "intervention", interv)
    t["n_prompts"] = n
    return t


def _measure_heads(model, task: str, folder: Path, interventions: Sequence[str], lengths: Sequence[int],
                   n: int, progress: bool, label: str) -> pd.DataFrame:
    """The model's head readout, resumed: (intervention, length) blocks already in the table with the
    same ``n`` are kept, the others measured and the table saved after each block."""
    from tqdm.auto import tqdm

    path = folder / layout.INTERVENTION_HEADS
    out = Outputs([path], True)
    old = _read_heads(path) if path.is_file() else None
    if old is not None and len(old) and set(old["n_prompts"].unique()) != {n}:
        counts = ", ".join(str(int(c)) for c in sorted(old["n_prompts"].unique()))
        raise PosymError(f"{path} holds head scores of {counts} prompts, not {n}; "
                         "give the same --heads-n, or another --out")
    have = set() if old is None else set(zip(old["intervention"], old["extra_tokens"].astype(int)))
    frames = [] if old is None else [old]
    todo = [(i, e) for i in interventions for e in lengths if (i, e) not in have]
    bar = tqdm(todo, desc=f"heads {label}", disable=not progress, unit="block")
    for interv, extra in bar:
        bar.set_postfix_str(f"{interv} +{extra}")
        frames.append(_head_rows(model, task, interv, extra, n, 0))
        out.csv(pd.concat(frames, ignore_index=True), path)
    bar.close()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _collect(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every model folder's lengthgen rows and head rows, with ``model`` (the folder name) and ``task``."""
    lg, hd = [], []
    for folder in sorted(p for p in out.iterdir() if p.is_dir() and (p / layout.LENGTHGEN).is_file()):
        t = _read_lengthgen(folder / layout.LENGTHGEN)
        t.insert(0, "model", folder.name)
        lg.append(t)
        if (folder / layout.INTERVENTION_HEADS).is_file():
            h = _read_heads(folder / layout.INTERVENTION_HEADS)
            h.insert(0, "task", t["task"].iloc[0])
            h.insert(0, "model", folder.name)
            hd.append(h)
    return (pd.concat(lg, ignore_index=True) if lg else pd.DataFrame(),
            pd.concat(hd, ignore_index=True) if hd else pd.DataFrame())


def _best_of(search: Path) -> dict[str, list[str]]:
    path = search / layout.INTERVENTIONS
    if not path.is_file():
        raise PosymError(f"--best-of {search}: no {layout.INTERVENTIONS} there; run the search first "
                         "(posym interventions RUN... --grid search --out DIR)")
    table = read_table(path)
    missing = [c for c in BEST_OF_COLUMNS if c not in table.columns]
    if missing or table.empty:
        what = f"lacks the column(s) {', '.join(missing)}" if missing else "holds no rows"
        raise PosymError(f"--best-of {search}: {path} {what}, so it is not a study table; "
                         "give the folder of a finished posym interventions study")
    for c in BEST_OF_COLUMNS[3:]:
        if pd.to_numeric(table[c], errors="coerce").isna().all():
            raise PosymError(f"--best-of {search}: {path} column {c} holds no numbers; "
                             "give the folder of a finished posym interventions study")
    best = best_settings(table)
    picked: dict[str, list[str]] = {}
    for (task, _), interv in best.items():
        picked.setdefault(task, ["none"]).append(interv)
    return picked


def _settings(intervene: Sequence[str]) -> list[str]:
    """The canonical strings of ``intervene``, checked; ``layers=index`` (a mask or temperature in each
    model's own Index layers, :data:`~posym.studies.intervention_study.study.INDEX_LAYERS`) is taken out before the
    rest is parsed and written back after it (``layers`` is the last key of a canonical string), so
    no layer number stands in for it: an explicit layer list (``layers=1000000`` too) stays a layer
    list, checked against each model before any work."""
    out: dict[str, str] = {}
    for text in intervene:
        name, colon, rest = str(text).partition(":")
        items = [i.strip() for i in rest.split(",") if i.strip()]
        index = [i for i in items if re.fullmatch(rf"layers\s*=\s*{INDEX_LAYERS}", i)]
        spec = parse_intervention(f"{name}{colon}{','.join(i for i in items if i not in index)}" if index else text)
        canon = describe(spec)
        if index:
            if spec is None or not spec.per_layer:
                raise PosymError(f"{text!r}: layers={INDEX_LAYERS} applies to {per_layer_names()} only")
            if spec.layers is not None:
                raise PosymError(f"{text!r}: layers given twice; write layers={INDEX_LAYERS} or a layer list, not both")
            canon += f",layers={INDEX_LAYERS}"
        if canon in out:
            raise PosymError(f"--intervene {text!r} repeats {out[canon]!r} (both are {canon}); give each once")
        out[canon] = text
    return list(out)


def _checkable(setting: str) -> str:
    """``setting`` with ``layers=index`` dropped (every layer): what can be checked against a model
    before its Index layers are known."""
    name, colon, rest = setting.partition(":")
    return f"{name}{colon}{','.join(i for i in rest.split(',') if i != f'layers={INDEX_LAYERS}')}" if colon else setting


def _record(out: Path, call: dict) -> dict:
    """The study's record (``interventions.json``) with ``call`` appended: every call's settings, in
    order (a record of an older posym, one call's settings, becomes the first call)."""
    path = out / layout.INTERVENTIONS_JSON
    calls: list = []
    if path.is_file():
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            raise PosymError(f"{path} is not a study record (not JSON); remove it (the tables in the model "
                             "folders stay) or choose another --out") from None
        calls = list(old.get("calls", [])) if isinstance(old, dict) and "calls" in old else [old]
    return {"calls": [*calls, call]}


def _measured(folder: Path) -> bool:
    """Whether a model folder holds anything but the lock (a refused call leaves no empty folder)."""
    return folder.is_dir() and any(p.name != layout.LOCK for p in folder.iterdir())


def _no_force(exc: PosymError, folder: Path) -> PosymError:
    """A refusal of the length sweep that says "pass --force", said for this verb (it has no --force)."""
    text = re.sub(r"pass --force[^;,)]*", f"remove {folder} to measure this model afresh {_NO_FORCE}", str(exc))
    return PosymError(text)


def _job_options(task: str | None, intervene: Sequence[str] | None, best_of: str | os.PathLike | None,
                 grid: Sequence[int], n: int, seeds: int, lengths: Sequence[int], heads_n: int, device: str,
                 progress: bool) -> list[str]:
    """The CLI options of a Slurm job of this study: the same settings as this call."""
    args = [*(["--task", task] if task else []), *[x for i in intervene or () for x in ("--intervene", str(i))],
            *(["--best-of", str(Path(best_of).absolute())] if best_of else []),
            "--grid", ",".join(map(str, grid)), "--n", str(n), "--seeds", str(seeds), "--device", device]
    args += ["--heads-lengths", ",".join(map(str, lengths)), "--heads-n", str(heads_n)] if lengths else ["--no-heads"]
    return args + ([] if progress else ["--quiet"])


def interventions(runs: Sequence[str | os.PathLike], out: str | os.PathLike, *, task: str | None = None,
                  intervene: Sequence[str] | None = None, best_of: str | os.PathLike | None = None,
                  grid: str | Sequence[int] = "search", n: int = 200, seeds: int = 1,
                  heads_lengths: Sequence[int] | None = None, heads_n: int = 16, device: str = "cpu",
                  progress: bool = True, launcher: str = "local", slurm_options: SlurmOptions | None = None,
                  measure_only: bool = False) -> VerbResult:
    """Run (or continue) the interventions study of ``runs`` into ``out`` (module docstring).

    ``runs``: posym runs, HF ``Trainer`` output_dirs, ``checkpoint-N/`` or model folders of any RoPE
    family posym reads, all of one architecture (the study averages them); ``task`` for folders that
    do not say theirs.

    ``intervene``: the interventions (canonical strings; default: the study grid of
    :func:`posym.studies.intervention_study.tables.study_grid` for each model, its frequency masks sized to the
    model's rotary dim and the Index layers found on the untouched model; ``layers=index`` in a string
    means each model's own Index layers, and the study tables write a model's Index layers so, one
    setting over seeds); ``best_of``: instead, each
    family's best setting per task in an earlier study directory (the rule of
    :func:`~posym.studies.intervention_study.tables.best_settings`). ``grid``: ``"search"`` (the cheap grid,
    :data:`~posym.studies.intervention_study.study.SEARCH_GRID`), ``"paper"`` or added lengths; ``n`` samples per
    point and data seed; ``heads_lengths`` / ``heads_n``: the head readout (default +0, +100, +1,000 on
    16 prompts; ``[]`` for none).

    ``launcher``: ``local`` (this process) or ``slurm``: one job per model (its folder's tables), then a
    summary job (``afterok``) that writes the study's tables, figures and page as a local run does
    (:mod:`posym.launch.fanout`, docs/cluster.md); returns once the jobs are queued. ``measure_only``:
    measure the models into their folders and write no study table (what one model's job does)."""
    check_launcher(launcher, slurm_options)
    if not runs:
        raise PosymError("give at least one run directory")
    if intervene and best_of:
        raise PosymError("give --intervene or --best-of, not both")
    out = Path(out)
    grid_values = _grid(grid)
    lengths = list(HEAD_LENGTHS if heads_lengths is None else heads_lengths)
    if lengths and (isinstance(heads_n, bool) or not isinstance(heads_n, int) or heads_n < 1):
        raise PosymError(f"heads_n={heads_n!r}: the head readout needs an integer >= 1 of prompts "
                         "(--heads-n 16); give heads_lengths=[] (--no-heads) for no head readout")
    if isinstance(intervene, str):  # one setting, not its characters
        intervene = [intervene]
    given = _settings(intervene) if intervene else None
    picked = _best_of(Path(best_of)) if best_of else None
    labels: dict[str, Path] = {}
    tasks, archs = {}, {}
    for r in runs:
        r = Path(r)
        if not r.is_dir():
            raise PosymError(f"no such run directory: {r}")
        run_task, label, arch = _label(r, task)
        if label in labels:
            raise PosymError(f"{labels[label]} and {r} are both {label}; give each model once")
        labels[label], tasks[label], archs[label] = r, run_task, arch
    call = {"runs": {k: str(v) for k, v in labels.items()}, "grid": grid_values, "n": n, "seeds": seeds,
            "heads_lengths": lengths, "heads_n": heads_n, "best_of": str(best_of) if best_of else None,
            "intervene": given, "architectures": {k: list(v) for k, v in archs.items()}}
    _record(out, call)  # an unreadable record is refused before any work
    _check_one_architecture(out, archs)
    beside = (out.is_dir() and not (out / layout.INTERVENTIONS_JSON).is_file()
              and any(p.name not in (*labels, layout.SLURM, layout.STAGES)
                      for p in out.iterdir()))  # a folder of other files (not a Slurm fan-out's): written beside them
    if out.is_dir():
        _collect(out)  # every model folder's tables readable (checked) before this call measures anything
    refuse_live_outputs([out / label / layout.LENGTHGEN for label in labels] + [out / layout.INTERVENTIONS])
    if launcher == "slurm":
        args = _job_options(task, intervene, best_of, grid_values, n, seeds, lengths, heads_n, device, progress)
        plan = FanOut("interventions", {label: ("interventions", str(r.absolute()), "--out", str(out.absolute()),
                                                *args, "--measure-only") for label, r in labels.items()},
                      ("interventions", *[str(r.absolute()) for r in labels.values()], "--out", str(out.absolute()),
                       *args))
        return VerbResult(None, [], submit_fanout(out, plan, slurm_options).text)
    done_lines = []
    for label, run in labels.items():
        folder = out / label
        existed = folder.exists()
        model, task, _ = resolve_model(run, task=tasks[label])
        if given is not None:
            plan = given if "none" in given else ["none", *given]
        elif picked is not None:
            plan = picked.get(task, ["none"])
        else:
            plan = None
        if plan is not None:  # every setting applies to this model (layers, families), before any file
            check_interventions(model, [_checkable(p) for p in plan])
        try:
            with DirLock(folder, "interventions model folder"):
                found: list[int] = []
                if plan is None or any(f"layers={INDEX_LAYERS}" in p for p in plan):  # the model's Index layers
                    base = _measure_heads(model, task, folder, ["none"], [0], heads_n, progress, label)
                    at_zero = base[(base["intervention"] == "none") & (base["extra_tokens"] == 0)]
                    found = tables.index_layers(at_zero)  # tables.index_layers: looked up at call time
                if plan is None:
                    plan = study_grid(get_adapter(model).rotary_dim // 2, found if task == "number" else [])
                resolved = [for_model(p, found) for p in plan]
                skipped = [p for p, r in zip(plan, resolved) if r is None]
                plan = [r for r in resolved if r is not None]
                check_interventions(model, plan)  # every intervention applies to this model, before the long work
                try:
                    res = lengthgen(run, task=task, grid=grid_values, n=n, seeds=seeds, out=folder / layout.LENGTHGEN,
                                    device=device, resume=True, progress=progress, intervene=plan)
                except PosymError as exc:
                    raise _no_force(exc, folder) from None
                if lengths:
                    _measure_heads(model, task, folder, plan, lengths, heads_n, progress, label)
        except BaseException:
            if not existed and folder.is_dir() and not _measured(folder):
                try:
                    folder.rmdir()  # a refused or interrupted call leaves no empty model folder
                except OSError:
                    pass
            raise
        done_lines.append(f"{label}: {len(plan)} interventions, {len(res.table)} lengthgen rows"
                          + (f"; no Index layers, not measured: {', '.join(skipped)}" if skipped else ""))
    if measure_only:
        return VerbResult(None, [], "\n".join(done_lines))
    lg, hd = study_settings(*_collect(out))
    summary = study_summary(lg, hd if len(hd) else None, predicted=prediction_applies(_record(out, call)))
    task_list = [t for t in TASKS if t in set(lg["task"])]
    files = [out / layout.INTERVENTIONS, out / layout.INTERVENTIONS_MD, out / layout.INTERVENTIONS_HTML,
             out / layout.INTERVENTIONS_JSON, out / layout.INTERVENTIONS_LENGTHGEN]
    for t in task_list:
        files += figure_paths(out / layout.FIG_INTERVENTIONS.format(task=t))
        if len(hd):
            files += figure_paths(out / layout.FIG_INTERVENTION_HEADS.format(task=t))
    outputs = Outputs(files, True).check()  # derived from the model folders: rebuilt on every call
    outputs.csv(summary, out / layout.INTERVENTIONS)
    outputs.csv(lg, out / layout.INTERVENTIONS_LENGTHGEN)
    md = summary_markdown(summary)
    outputs.text(md + "\n", out / layout.INTERVENTIONS_MD)
    for t in task_list:
        outputs.figure(plot_intervention_curves(lg, t, LENGTHGEN.get(t)), out / layout.FIG_INTERVENTIONS.format(task=t))
        if len(hd):
            outputs.figure(plot_head_readout(hd, t), out / layout.FIG_INTERVENTION_HEADS.format(task=t))
    outputs.json(_record(out, call), out / layout.INTERVENTIONS_JSON)  # this call appended to the earlier ones
    write_page(out, outputs)
    note = ([f"note: {out} held other files and no study; the study was written beside them (nothing replaced)"]
            if beside else [])
    text = "\n".join([*done_lines, md, f"wrote {out / layout.INTERVENTIONS_HTML}", *note])
    return VerbResult(summary, outputs.written, text, {"lengthgen": lg, "heads": hd})


__all__ = ["BEST_OF_COLUMNS", "HEADS_SCHEMA", "interventions"]
