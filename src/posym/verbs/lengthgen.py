"""``posym lengthgen``: accuracy of a trained model vs added target-window tokens (Paper A Fig. 5B)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from posym.checks import check_int
from posym.errors import PosymError
from posym.launch.fanout import FanOut, check_launcher, submit_fanout, unit_done
from posym.launch.slurm import SlurmOptions
from posym.lengthgen.trained import largest_length_above, lengthgen as lengthgen_table, parse_grid, summarize_lengthgen
from posym.runs import layout
from posym.runs.digest import weights_digest
from posym.runs.lock import DirLock, in_progress_note
from posym.runs.resolve import StepChoice, resolve_model
from posym.runs.tables import INTERVENTION, NO_INTERVENTION, RUN_TABLES, check_rows
from posym.verbs import Outputs, VerbResult, figure_paths


def lengthgen(run: str | os.PathLike, *, task: str | None = None, grid: str | Sequence[int] | None = "paper",
              n: int = 200, seeds: int = 1, out: str | os.PathLike | None = None, extra_rule: str = "window",
              step: StepChoice = None, device: str = "cpu", force: bool = False, resume: bool = False,
              progress: bool = True, intervene: Sequence[str] | None = None,
              layers: Sequence[int] | None = None, launcher: str = "local",
              slurm_options: SlurmOptions | None = None, data_seed: int | None = None) -> VerbResult:
    """Evaluate the model a run stands for (or ``step``), or any HF GPT-J dir with ``task``, on the grid.

    Writes ``lengthgen.csv`` (one row per intervention, added length and data seed),
    ``lengthgen_summary.csv`` (mean, sd over data seeds) and the figure ``figures/lengthgen_fig5b``
    beside ``out`` (default: in the run directory). The letter data follow the run's own distractor
    rule (SPEC §1.2).

    ``intervene``: inference-time interventions (canonical strings, docs/interventions.md; ``layers``
    restricts temperature / freq-mask); each is measured in turn and its rows carry it in the
    ``intervention`` column (``none``: the untouched model, the default). All are checked against the
    model before any evaluation.

    ``resume``: keep the rows of an existing table measured the same way, evaluate only the missing
    (intervention, length, seed) points, and save the table after each point, so an interrupted or
    extended grid (e.g. to +5,000, or another intervention) loses nothing; rows of interventions not
    asked for now are kept as they are. "The same way" is the table's identity columns: the model
    (task, checkpoint step and a digest of its weights) and the data settings (extra rule, distractor
    rule, n). The table is checked against its schema first (``posym.runs.tables.check_rows``); a
    corrupt table, one of an older posym without the identity columns, or rows measured another way
    are refused unless ``force`` (then they are replaced). A table without the ``intervention`` column
    (older posym) holds untouched-model rows; a row whose ``intervention`` is not a canonical string
    (it must parse and describe back to itself) is refused likewise.

    **One writer per table**: the call holds the table's lock (``.NAME.lock`` beside it,
    ``posym.runs.lock.DirLock.for_file``) from before it reads the table to its last write, so a
    second ``lengthgen`` into the same table (the run's own ``lengthgen.csv`` included) is refused in
    one line before any work; a lock left by a killed call is stale and taken over.

    **A set cut short** (e.g. a full disk after the table was saved): the table is written first and
    the summary and figure are derived from it, so the failure says so and ``resume`` writes the
    missing files from the table without measuring again; a plain re-run says to pass ``--resume``
    (or ``--force`` to measure afresh).

    ``seeds``: data seeds 0..seeds-1; ``data_seed``: instead, that one data seed only (its rows are the
    ones a call with more seeds writes for it).

    ``launcher``: ``local`` or ``slurm`` (:mod:`posym.launch.fanout`, docs/cluster.md; scripts, logs and
    markers beside the table, ``slurm/``, ``stages/``); returns once the jobs are queued. One data seed:
    one job runs this call. Several: one job per data seed (``data_seed``, ``resume``) writes that seed's
    rows into its part table ``X_parts/seed<k>.csv`` beside ``X.csv`` (``layout.LENGTHGEN_PARTS``), then
    a summary job (``afterok``) runs this call, which takes the points of every part whose job finished
    with these settings (its marker) as measured and writes the table, summary and figure, the same rows
    in the same order as a local run: the one writer of the table.
    """
    from posym.interventions import check_interventions, intervened, plan_interventions
    from posym.report.figures import plot_lengthgen
    from posym.report.paper import LENGTHGEN

    check_launcher(launcher, slurm_options)
    if data_seed is not None:
        data_seed = check_int(data_seed, "data_seed")
        if seeds != 1:
            raise PosymError(f"give --seeds {seeds} (data seeds 0..{seeds - 1}) or --data-seed {data_seed} "
                             "(that one data seed), not both")
    seed_list = [data_seed] if data_seed is not None else list(range(check_int(seeds, "seeds", lo=1)))
    grid_values = parse_grid(grid)
    specs = plan_interventions(intervene, layers)
    table_path = Path(out) if out else Path(run) / layout.LENGTHGEN
    if table_path.suffix != ".csv":
        raise PosymError(f"--out must be a .csv file, got {table_path}")
    fig_stem = layout.figure(table_path.parent, layout.FIG_LENGTHGEN if out is None else table_path.stem + "_fig5b")
    derived = [layout.summary_path(table_path), *figure_paths(fig_stem)]
    unfinished = [p for p in derived if not p.exists()] if table_path.is_file() else []
    if unfinished and not (force or resume):  # an earlier call stopped after saving its table (a full disk)
        raise PosymError(f"{table_path} exists but {unfinished[0]} does not (an earlier call stopped after "
                         "saving the table); pass --resume to write the rest from the table without measuring "
                         "again, or --force to measure afresh")
    outputs = Outputs([table_path, *derived], force or resume).check()
    lock = DirLock.for_file(table_path, "length table").check_free()  # a second writer: refused before any work
    job = _JobArgs(run, task, grid_values, n, table_path, extra_rule, device, step, force, intervene, layers)
    if launcher == "slurm":
        args = job.args(data_seed, seeds, resume=resume)
        if len(seed_list) == 1:
            plan = FanOut("lengthgen", {"run": args})
        else:
            plan = FanOut(job.verb, {f"seed{k}": job.part_args(k) for k in seed_list}, args)
        return VerbResult(None, [], submit_fanout(table_path.parent, plan, slurm_options).text)
    resolved = resolve_model(run, task=task, step=step)
    model, task, ckpt_step = resolved
    names = check_interventions(model, specs)  # family, layers, frequency IDs: before any work
    stored = layout.read_meta(run).get("config") or {}
    distractors = stored.get("distractors", "uniform" if stored else "pool")
    key = {"task": task, "step": ckpt_step, "weights": weights_digest(resolved.path), "extra_rule": extra_rule,
           "distractors": distractors}
    # one writer per table (posym.runs.lock): a second lengthgen into it is refused before it reads the
    # table, so two --resume calls can never overwrite each other's saved points
    with lock:
        outputs.check()  # again under the lock: a writer that finished meanwhile may have written it
        old = _rows_to_keep(table_path, key, n, force) if resume and table_path.is_file() else None
        if len(seed_list) > 1:  # the part tables of a Slurm fan-out's finished jobs: measured points
            old = _with_parts(old, job, seed_list, key)
        note = in_progress_note(run, ckpt_step)

        def labelled(t: pd.DataFrame, name: str) -> pd.DataFrame:
            t = t.copy()
            for i, (col, value) in enumerate({**key, INTERVENTION: name}.items()):
                t.insert(i, col, value)
            return t

        # Every row the table holds, by intervention: the old rows first (other interventions' and this
        # call's not yet re-measured ones), replaced by each intervention's rows as they are measured, so an
        # interruption at any point leaves every earlier row in the file.
        rows: dict[str, pd.DataFrame] = {} if old is None else {
            name: labelled(g.drop(columns=INTERVENTION), name) for name, g in old.groupby(INTERVENTION, sort=False)}
        for spec, name in zip(specs, names):
            done = None
            if old is not None:
                mine = old[old[INTERVENTION] == name].drop(columns=INTERVENTION)
                done = mine if len(mine) else None

            def save(t: pd.DataFrame, name: str = name) -> None:
                rows[name] = labelled(t, name)
                outputs.csv(pd.concat(list(rows.values()), ignore_index=True), table_path)

            with intervened(model, spec):
                t = lengthgen_table(model, task, grid_values, n=n, seeds=seed_list, device=device, progress=progress,
                                    extra_rule=extra_rule, distractors=distractors, done=done,
                                    on_point=save if resume else None, label=None if name == NO_INTERVENTION else name)
            rows[name] = labelled(t, name)
        table = pd.concat(list(rows.values()), ignore_index=True)
        summary = summarize_lengthgen(table.drop(columns=list(key)))
        outputs.csv(table, table_path)  # the table first: everything else is derived from it
        try:
            outputs.csv(summary, layout.summary_path(table_path))
            curves = {task if name == NO_INTERVENTION else f"{task} · {name}": g.drop(columns=INTERVENTION)
                      for name, g in summary.groupby(INTERVENTION, sort=False)}
            outputs.figure(plot_lengthgen(curves, paper=LENGTHGEN), fig_stem)
        except PosymError as exc:  # e.g. a full disk: the measured points are safe in the table
            raise PosymError(f"{exc}; {table_path} holds every measured point: rerun with --resume to write the "
                             "summary and figure from it without measuring again") from None
        lines = []
        for name, g in summary.groupby(INTERVENTION, sort=False):
            if len(names) > 1 or name != NO_INTERVENTION:
                lines.append(f"== {name}")
            lines.append(_curve_text(g))
            lines.append(f"largest added length with accuracy >= 0.9: {largest_length_above(g)}")
        text = ("\n".join(lines) + "\n"
                f"time {table['seconds'].sum():.0f} s, peak RSS {table['peak_rss_mb'].max():.0f} MB; wrote {table_path}"
                + (f"\n{note}" if note else ""))
        return VerbResult(table, list(dict.fromkeys(outputs.written)), text,
                          {"summary": summary, "task": task, "step": ckpt_step})


class _JobArgs:
    """The posym arguments of the Slurm jobs of one ``lengthgen`` call (absolute paths: the same in the
    submitting process and in the summary job, which checks the units' markers against them)."""

    def __init__(self, run, task, grid, n, table, extra_rule, device, step, force, intervene, layers) -> None:
        intervene = [intervene] if isinstance(intervene, str) else list(intervene or ())
        self.table, self.n = Path(table).absolute(), n
        self.verb = f"lengthgen-{self.table.stem}"  # job names: one table's jobs apart from another's
        self.common = (str(Path(run).absolute()), *(["--task", task] if task else []),
                       "--grid", ",".join(map(str, grid)), "--n", str(n))
        self.rest = ("--extra-rule", extra_rule, "--device", device, *(["--step", str(step)] if step is not None else []),
                     *(["--force"] if force else []))
        self.tail = (*[x for i in intervene for x in ("--intervene", str(i))],
                     *(["--layers", ",".join(map(str, layers))] if layers else []))

    def args(self, data_seed: int | None, seeds: int, resume: bool, out: Path | None = None) -> tuple[str, ...]:
        """The arguments of this call (``data_seed`` or ``seeds``) into ``out`` (default: the table)."""
        which = ("--data-seed", str(data_seed)) if data_seed is not None else ("--seeds", str(seeds))
        return ("lengthgen", *self.common, *which, "--out", str(out or self.table), *self.rest,
                *(["--resume"] if resume else []), *self.tail)

    def part(self, k: int) -> Path:
        """``X_parts/seed<k>.csv``: the part table of data seed ``k``."""
        return self.table.parent / layout.LENGTHGEN_PARTS.format(stem=self.table.stem) / layout.LENGTHGEN_PART.format(seed=k)

    def part_args(self, k: int) -> tuple[str, ...]:
        """The arguments of data seed ``k``'s job: that seed into its part table, resumed point by point."""
        return self.args(k, 1, True, self.part(k))


def _with_parts(old: pd.DataFrame | None, job: _JobArgs, seed_list: Sequence[int], key: dict) -> pd.DataFrame | None:
    """``old`` (the rows kept by ``resume``) with the points of every part table whose Slurm job finished
    with the arguments this call gives it (:func:`posym.launch.fanout.unit_done`) and that was measured
    like this call (same model, rules and ``n``; else its points are measured here)."""
    parts = []
    for k in seed_list:
        part = job.part(k)
        if part.is_file() and unit_done(job.table.parent, f"{job.verb}-seed{k}", job.part_args(k)):
            try:
                rows = _rows_to_keep(part, key, job.n, False)
            except PosymError:
                continue
            if rows is not None:
                parts.append(rows[rows["seed"] == k])
    if not parts:  # no finished part: the rows kept, as they are
        return old
    every = pd.concat(([] if old is None else [old]) + parts, ignore_index=True)
    return every.drop_duplicates([INTERVENTION, "extra_tokens", "seed"], ignore_index=True)


def _curve_text(summary: pd.DataFrame) -> str:
    """One curve of a length summary (:func:`~posym.lengthgen.trained.summarize_lengthgen`, Paper A
    Fig. 5B) as printed: added length, mean accuracy, its sd over data seeds ("n/a" over one seed, as the
    report writes it: :func:`posym.report.format.fmt_ms`; the CSV keeps its number) and the per-hop means."""
    from posym.report.format import fmt_num

    cols = ["extra_tokens", "acc_mean", "acc_sd"] + [f"acc_hop{h}_mean" for h in range(1, 5)]
    shown = summary[cols].round(3)
    one = summary["n_seeds"].to_numpy() < 2 if "n_seeds" in summary else np.zeros(len(summary), bool)
    shown["acc_sd"] = ["n/a" if single else fmt_num(sd) for single, sd in zip(one, summary["acc_sd"])]
    return shown.to_string(index=False)


def _cell(value) -> str:
    """A table cell as text, so that 6750, 6750.0 and "6750" (and None / NaN / "") compare equal."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)


def _identity(values: dict) -> str:
    return ", ".join(f"{c} {_cell(v) or '?'}" for c, v in values.items())


def _rows_to_keep(path: Path, key: dict, n: int, force: bool) -> pd.DataFrame | None:
    """The rows of the table at ``path`` measured like this call (``key`` columns and ``n``), without
    the key columns but with ``intervention`` (``none`` where an older table lacks it); PosymError for
    a table that fails its schema or rows measured otherwise, unless ``force`` (then they are dropped)."""
    schema = RUN_TABLES["lengthgen"]
    try:
        head = pd.read_csv(path, nrows=0).columns
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        if force:
            return None
        raise PosymError(f"cannot resume from {path}: not a lengthgen table ({exc})") from None
    if not {"extra_tokens", "seed", "acc"} <= set(head):
        if force:
            return None
        raise PosymError(f"cannot resume from {path}: not a lengthgen table (missing "
                         f"{sorted({'extra_tokens', 'seed', 'acc'} - set(head))})")
    old_identity = [c for c in key if c not in head]
    if old_identity:
        if force:
            return None
        raise PosymError(f"cannot resume from {path}: it has no {', '.join(old_identity)} column (an older posym "
                         "wrote it), so its rows cannot be matched to this model; pass --force to measure afresh "
                         "(replacing them), or choose another --out")
    try:
        old = check_rows(path, schema, "pass --force to replace the table")
    except PosymError:
        if force:
            return None
        raise
    if INTERVENTION not in old.columns:
        old.insert(len(key), INTERVENTION, NO_INTERVENTION)
    else:  # rows of the log-n temperature written before its floor existed were measured unfloored
        old[INTERVENTION] = _legacy_strings(old[INTERVENTION])
    bad = _unknown_intervention(old, path)
    if bad is not None:
        if force:
            return None
        raise PosymError(bad)
    ident = {**key, "n": n}
    same = np.logical_and.reduce([old[c].map(_cell) == _cell(v) for c, v in ident.items()])
    if not same.all() and not force:
        r = old[~same].iloc[0]
        raise PosymError(f"{path} holds points measured otherwise ({_identity({c: r[c] for c in ident})}; now "
                         f"{_identity(ident)}); pass --force to replace them, or choose another --out")
    kept = old[same].drop(columns=list(key))
    return kept if len(kept) else None


def _legacy_strings(column: pd.Series) -> pd.Series:
    """A resumed table's ``intervention`` strings with those written before the temperature floor
    (``temperature:beta=1,n_train=17``, measured unfloored) renamed to today's canonical ``…,floor=0``
    (:func:`posym.interventions.spec.legacy_temperature`), so they are resumed as what they measured and
    never stand beside the same measurement under another name. Unparseable strings are left to
    :func:`_unknown_intervention`."""
    from posym.interventions.spec import legacy_temperature

    def rename(text):
        try:
            return legacy_temperature(text) if isinstance(text, str) else text
        except PosymError:
            return text
    return column.map(rename)


def _unknown_intervention(old: pd.DataFrame, path: Path) -> str | None:
    """The refusal for the first row of a resumed table whose ``intervention`` is not a canonical string
    (it must parse, and describing the parse must give it back, docs/interventions.md), else None: such
    a row could never be matched to a measurement and would stand beside it under another label."""
    from posym.interventions import describe, parse_intervention

    for text in dict.fromkeys(old[INTERVENTION].map(_cell)):
        try:
            canonical = describe(parse_intervention(text))
            why = None if canonical == text else f"posym writes it {canonical!r}"
        except PosymError as exc:
            why = str(exc)
        if why is not None:
            row = int((old[INTERVENTION].map(_cell) == text).to_numpy().nonzero()[0][0]) + 1
            return (f"{path} row {row}: intervention = {text!r} is not a canonical intervention string ({why}); "
                    "fix or remove the row, or pass --force to replace the table")
    return None


__all__ = ["lengthgen"]
