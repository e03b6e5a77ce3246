"""Every file of a run or reproduction directory: its name here, nowhere else (docs/architecture.md "runs/", docs/runs.md).

A **run directory** (``posym train --out RUN``)::

    RUN/posym.json            resolved TrainConfig, task, preset, versions          POSYM_JSON
    RUN/metrics.csv           split, step, train_loss, lr, loss, acc, acc_hop1..4   METRICS
    RUN/scores.csv            step, layer, head, tau, s_pos, s_sym, entropy, ...    SCORES
    RUN/results.json          final test metrics, selected model, timing            RESULTS
    RUN/checkpoints/step-NNNNNN/   HF model.safetensors + config.json + posym.json  step_dir()
    RUN/checkpoints/best/     first checkpoint with the best validation accuracy    best_dir()
    RUN/purity_gamma{γ}.csv, pure_counts_gamma{γ}.csv                              purity(), pure_counts_csv()
    RUN/flow.json, RUN/figures/flow-<task>-<split>-<i>.csv                         FLOW_JSON, flow_name()
    RUN/ablation.csv, freq_use.csv, freq_table.csv, freq_scores.csv, qk_geometry_L{l}.csv
    RUN/lengthgen.csv, lengthgen_summary.csv                                       LENGTHGEN, summary_path()
    RUN/figures/<stem>.png|pdf   fig2_gamma{γ}, ablation, freq_use, qk_geometry_L{l}, lengthgen_fig5b
    RUN/tensorboard/          TensorBoard event files (posym train --log tensorboard) TENSORBOARD
    RUN/.posym.lock           the writer holding the directory (posym.runs.lock)   LOCK
    .RUN.posym-new/           beside RUN: the run train --force builds to replace it staging_dir()

A **tracker folder** (``ScoreTracker(prompts, OUT)``; the HF callback writes into ``output_dir``)::

    OUT/scores.csv            the schema of a run's scores.csv                      SCORES
    OUT/scores.json           kind "tracker", prompt digest, taus, task, model      SCORES_JSON
    OUT/scores.previous.csv   the table of the previous (fresh) HF training        SCORES_PREVIOUS
    OUT/checkpoint_scores.csv posym scores --series OUT (checkpoint-N/ folders)    CHECKPOINT_SCORES

A **reproduction directory** (``posym reproduce --out DIR``) holds run directories
``DIR/<task>/seed<k>/`` (:func:`run_dir`) plus ``reproduce.json``, ``stages/<name>.done`` markers
(:func:`marker_path`), ``stages/last_run.json``, ``theory/``, ``llm/`` (the first model of the
``llm_models`` setting; ``llm/models/<name>/`` the others, :func:`llm_dir`), ``aggregate/`` and
``report.html``; with ``--launcher slurm`` also ``slurm/`` (:func:`slurm_script`, :func:`slurm_log`,
``slurm/jobs.json`` the job of each stage, SLURM_JOBS).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Sequence

from posym.constants import TASKS
from posym.errors import PosymError
from posym.files import write_text_atomic
from posym.model.gptj import HF_CONFIG, HF_WEIGHTS

# ---- a run directory ------------------------------------------------------------------------------
POSYM_JSON = "posym.json"  # also beside every checkpoint (task, preset, step)
METRICS = "metrics.csv"
SCORES = "scores.csv"
SCORES_JSON = "scores.json"  # what a tracker/callback table measured (kind "tracker", prompt digest, taus, model)
SCORES_PREVIOUS = "scores.previous.csv"  # the table of the previous training, moved aside by a fresh HF run
CHECKPOINT_SCORES = "checkpoint_scores.csv"  # posym scores --series of an HF output_dir (beside the callback's)
HF_TRAINER_STATE = "trainer_state.json"  # the HF Trainer's state, in output_dir/checkpoint-N/ and output_dir/
SCORES_HOME = "runs/scores"  # posym scores --model DIR: ./runs/scores/<model name>/scores.csv
RESULTS = "results.json"
CHECKPOINTS = "checkpoints"
FIGURES = "figures"
LOCK = ".posym.lock"
CONFIG_JSON = HF_CONFIG  # HF checkpoint files (named by the HF format, posym.model.gptj)
WEIGHTS = HF_WEIGHTS
TRAINER_STATE = "trainer_state.pt"
BEST = "best"
ABLATION = "ablation.csv"
FLOW_JSON = "flow.json"
FREQ_USE = "freq_use.csv"
FREQ_TABLE = "freq_table.csv"
FREQ_SCORES = "freq_scores.csv"
LENGTHGEN = "lengthgen.csv"
LENGTHGEN_PARTS = "{stem}_parts"  # beside a lengthgen table x.csv: x_parts/, the tables of its --launcher slurm jobs
LENGTHGEN_PART = "seed{seed}.csv"  # x_parts/seed<k>.csv: the rows of data seed k (one Slurm job)
TENSORBOARD = "tensorboard"  # TensorBoard event files of a run trained with --log tensorboard
# figure stems (saved as .png and .pdf under FIGURES)
FIG_ABLATION = "ablation"
FIG_FREQ_USE = "freq_use"
FIG_LENGTHGEN = "lengthgen_fig5b"

# ---- a reproduction directory ---------------------------------------------------------------------
REPRODUCE_JSON = "reproduce.json"
STAGES = "stages"
LAST_RUN = "last_run.json"
REPORT_HTML = "report.html"
REPORT_PNG = "report_screenshot.png"
AGGREGATE = "aggregate"
THEORY = "theory"
LLM = "llm"
SKIPPED_JSON = "skipped.json"
SLURM = "slurm"  # DIR/slurm/: job scripts, job logs and jobs.json of a --launcher slurm reproduction
SLURM_JOBS = "jobs.json"  # DIR/slurm/jobs.json: stage -> its newest Slurm job (id, submission, time)

# ---- theory, LLM and study outputs (inside their own output directories) -------------------------
DISCREPANCY = "discrepancy"  # .csv + .png|pdf
DISCREPANCY_INTERVENTIONS = "discrepancy_interventions"  # Δ(n) under inference-time interventions
TRAINED_DISCREPANCY = "trained_discrepancy"
RESTRICTED = "restricted"
LLM_ANSWERS = "answers.jsonl"
LLM_CHOICE = "choice"  # DIR/llm/choice/: the log-likelihood protocol of a reproduction
LLM_MODELS = "models"  # DIR/llm/models/<name>/: the further models of a reproduction (setting llm_models)
FIG_LLM_MODELS = "llm_models"  # DIR/aggregate/figures/: every model and protocol of a reproduction
LLM_EVAL_JSON = "llm_eval.json"
LLM_RUNS = "llm_runs.csv"
LLM_TABLE = "llm_table.csv"
LLM_TABLE_MD = "llm_table.md"
LLM_INTERVENTIONS = "llm_interventions.csv"  # choice protocol, several interventions: paired vs none
LLM_INTERVENTIONS_MD = "llm_interventions.md"
FIG_LLM = "llm_lengthgen"
LLM_HEADS = "llm_heads.csv"
LLM_HEADS_FREQ_USE = "llm_heads_freq_use.csv"
LLM_HEADS_LAYERS = "llm_heads_layers.csv"
LLM_HEADS_SUMMARY = "llm_heads_summary.csv"
LLM_HEADS_GROUPS = "llm_heads_groups.csv"
LLM_HEADS_JSON = "llm_heads.json"
FIG_LLM_HEADS = "llm_heads_plane"
FIG_LLM_HEADS_LAYERS = "llm_heads_layers"
HEAD_TYPES = "head_types.csv"  # posym head-types: the join of scores, readings and detectors per head
HEAD_TYPES_CORRELATIONS = "head_types_correlations.csv"
HEAD_TYPES_CONTINGENCY = "head_types_contingency.csv"
HEAD_TYPES_JSON = "head_types.json"
FIG_HEAD_TYPES = "head_types_plane"
ATLAS = "atlas.csv"  # posym atlas: one row per head (and atlas.parquet beside it, with the settings in its metadata)
ATLAS_JSON = "atlas.json"
SENSITIVITY = "sensitivity.csv"
SENSITIVITY_MD = "sensitivity.md"
SENSITIVITY_HTML = "sensitivity.html"
PREDICTION = "prediction.csv"
FIG_PREDICTION = "prediction"
VARIANT_CURVES = "fig5b_variants.csv"  # Fig. 5B of every variant of a sensitivity study
FIG_VARIANT_CURVES = "fig5b_variants"
SENSITIVITY_UNITS = "units"  # OUT/units/<variant>/: one variant's job of sensitivity --launcher slurm (its prediction.csv)
PE_STUDY = "pe_study.csv"  # posym pe-study: one row per (variant, task, quantity)
PE_STUDY_MD = "pe_study.md"
PE_STUDY_HTML = "pe_study.html"
PE_PURE_COUNTS = "fig2_variants.csv"  # pure-head counts over training of every variant (mean ± sd over seeds)
FIG_PE_PURE_COUNTS = "fig2_variants"
INTERVENTIONS = "interventions.csv"  # posym interventions: the study table (intervention x task)
INTERVENTIONS_MD = "interventions.md"
INTERVENTIONS_HTML = "interventions.html"
INTERVENTIONS_JSON = "interventions.json"  # the study's settings (runs, grid, n, interventions)
INTERVENTIONS_LENGTHGEN = "interventions_lengthgen.csv"  # every model's lengthgen rows, with a model column
INTERVENTION_HEADS = "intervention_heads.csv"  # per model folder: scores of every head under each intervention
FIG_INTERVENTIONS = "fig5b_interventions_{task}"
FIG_INTERVENTION_HEADS = "intervention_heads_{task}"
HEAD_SETS = "head_sets.csv"  # posym head-sets: one row per cell (set x dose or temperature x length)
HEAD_SETS_CONTROLS = "head_sets_controls.csv"  # one row per matched random control draw of each cell
HEAD_SETS_MD = "head_sets.md"
HEAD_SETS_JSON = "head_sets.json"  # the study's settings, sets, control seeds, readout, notes
HEAD_SETS_OUTCOMES = "head_sets_outcomes.jsonl"  # the cache: per-prompt outcomes per (intervention, length)
FIG_HEAD_SETS_DOSES = "head_sets_doses_{set}"
FIG_HEAD_SETS_TEMPERATURE = "head_sets_temperature_{set}"
HEAD_SETS_COMBINED = "head_sets_combined.csv"  # posym head-sets-combine: one row per cell over the models
HEAD_SETS_COMBINED_MODELS = "head_sets_combined_models.csv"  # one row per (cell, model)
HEAD_SETS_COMBINED_MD = "head_sets_combined.md"
FIG_HEAD_SETS_COMBINED_DOSES = "head_sets_combined_doses_{set}"
FIG_HEAD_SETS_COMBINED_INTERVENTION = "head_sets_combined_intervention_{set}"


def safe_name(text: str) -> str:
    """``text`` as a lower-case file name: runs of other characters than letters, digits, ``._-``
    become ``-`` ("model" if nothing is left)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._").lower() or "model"


def llm_model_slug(model: str | os.PathLike) -> str:
    """Folder name of one model of the ``llm_models`` setting: a bundled short name as it is, a path
    by its last part (``runs/my-llm/`` -> ``my-llm``)."""
    return safe_name(Path(str(model).rstrip("/\\")).name or str(model))


def llm_dir(out: str | os.PathLike, models: Sequence[str], index: int,
            protocol: str = "generate") -> Path:
    """Output folder of model ``models[index]`` of a reproduction: ``DIR/llm/`` for the first,
    ``DIR/llm/models/<slug>/`` for the others; the choice protocol in its ``choice/`` subfolder."""
    base = Path(out) / LLM
    if index:
        base = base / LLM_MODELS / llm_model_slug(models[index])
    return base / LLM_CHOICE if protocol == "choice" else base


def llm_model_dirs(out: str | os.PathLike) -> list[Path]:
    """The generate-protocol folders of every model of a reproduction that exist: ``DIR/llm/`` first,
    then ``DIR/llm/models/*/`` by name (each may hold a ``choice/`` subfolder)."""
    base = Path(out) / LLM
    extra = sorted(p for p in (base / LLM_MODELS).glob("*") if p.is_dir()) if (base / LLM_MODELS).is_dir() else []
    return ([base] if base.is_dir() else []) + extra


def purity(gamma: float) -> str:
    """``purity_gamma{γ}.csv``: the purity table of ``posym dynamics`` at tolerance γ."""
    return f"purity_gamma{gamma:g}.csv"


def pure_counts_csv(gamma: float) -> str:
    """``pure_counts_gamma{γ}.csv``: the pure-head counts per step of ``posym dynamics`` at tolerance γ."""
    return f"pure_counts_gamma{gamma:g}.csv"


def fig2(gamma: float) -> str:
    """Figure stem of Fig. 2 at tolerance γ."""
    return f"fig2_gamma{gamma:g}"


def qk_geometry_stem(layer: int) -> str:
    """Stem of the Fig. 4B q/k geometry of one layer (``.csv`` beside the run, figure under figures/)."""
    return f"qk_geometry_L{layer}"


def flow_name(task: str, split: str, example: int) -> str:
    """Stem of one attention-flow example (figure + edge table, under figures/)."""
    return f"flow-{task}-{split}-{example}"


def vocab_path(export: str | os.PathLike) -> Path:
    """``x.vocab.json`` beside an export ``x.jsonl`` (``posym data export --ids``): token -> id."""
    p = Path(export)
    return p.with_name(p.stem + ".vocab.json")


def summary_path(table: str | os.PathLike) -> Path:
    """``x_summary.csv`` beside a per-seed table ``x.csv`` (lengthgen)."""
    p = Path(table)
    return p.with_name(p.stem + "_summary.csv")


def aggregate_table(out: str | os.PathLike, name: str) -> Path:
    """``DIR/aggregate/<name>.csv``: one multi-seed table of a reproduction (posym.report.aggregate)."""
    return Path(out) / AGGREGATE / f"{name}.csv"


def accuracy_figure(task: str) -> str:
    """Stem of the multi-seed accuracy-per-hop figure of a task under ``DIR/aggregate/figures/``."""
    return f"accuracy_{task}"


#: Stem of the multi-seed Fig. 5B under ``DIR/aggregate/figures/``.
FIG_LENGTHGEN_SEEDS = "fig5b_lengthgen"


def figure(directory: str | os.PathLike, stem: str) -> Path:
    """``directory/figures/<stem>`` (the figure writer adds .png and .pdf)."""
    return Path(directory) / FIGURES / stem


def png(directory: str | os.PathLike, stem: str) -> Path:
    """``directory/figures/<stem>.png``: the PNG of a saved figure (what the HTML report embeds)."""
    return Path(directory) / FIGURES / f"{stem}.png"


# ---- checkpoints ----------------------------------------------------------------------------------
_STEP_DIR = re.compile(r"^step-(\d{6,})$")


def step_dir(run_dir: str | os.PathLike, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS / f"step-{step:06d}"


def step_of_name(name: str) -> int | None:
    """The step of a ``step-NNNNNN`` directory name, else None."""
    m = _STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def is_checkpoint(path: str | os.PathLike) -> bool:
    """A complete HF checkpoint directory (config + weights)."""
    p = Path(path)
    return p.is_dir() and (p / CONFIG_JSON).is_file() and (p / WEIGHTS).is_file()


#: HF ``Trainer`` checkpoint folders: ``checkpoint-N`` (N = the optimizer step).
_HF_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_LAST_NUMBER = re.compile(r"(\d+)(?!.*\d)")


def hf_trainer_state(output_dir: str | os.PathLike) -> Path | None:
    """The newest ``trainer_state.json`` of an HF ``Trainer`` output directory: ``output_dir``'s own
    when present, else that of the ``checkpoint-N/`` with the largest N; None when there is none."""
    root = Path(output_dir)
    if (root / HF_TRAINER_STATE).is_file():
        return root / HF_TRAINER_STATE
    if not root.is_dir():
        return None
    found = sorted((int(m.group(1)), p / HF_TRAINER_STATE) for p in root.iterdir()
                   if (m := _HF_CHECKPOINT.match(p.name)) and (p / HF_TRAINER_STATE).is_file())
    return found[-1][1] if found else None


def hf_checkpoints(output_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(N, path) of every complete ``checkpoint-N/`` model folder of an HF ``Trainer`` output directory
    (config + weights), sorted by N; empty when there is none."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _HF_CHECKPOINT.match(p.name)) and is_checkpoint(p))


def hf_checkpoint_step(name: str) -> int | None:
    """N of an HF ``Trainer`` ``checkpoint-N`` folder name, else None."""
    m = _HF_CHECKPOINT.match(name)
    return int(m.group(1)) if m else None


def checkpoint_series(paths: "list[str | os.PathLike]") -> list[tuple[int, Path]]:
    """(step, model folder) of a checkpoint series, sorted by step: the ``checkpoint-N/`` folders of
    one HF ``Trainer`` output directory, the ``step-NNNNNN`` checkpoints of one posym run, or several
    model folders given in any order (step = the last number in each folder name, else the
    position in the list). PosymError for a folder without ``config.json`` or two equal steps."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise PosymError("a checkpoint series needs at least one folder")
    for p in paths:
        if not p.is_dir():
            raise PosymError(f"no such model folder: {p}" if not p.exists() else f"{p} is not a folder")
    if len(paths) == 1 and not (paths[0] / CONFIG_JSON).is_file():
        root = paths[0]
        found = list_checkpoints(root) or sorted(
            (int(m.group(1)), p) for p in root.iterdir() if (m := _HF_CHECKPOINT.match(p.name)) and p.is_dir())
        if not found:
            raise PosymError(f"{root} holds no checkpoint-N/ (HF Trainer) or checkpoints/step-N/ (posym) folders")
        series = found
    else:
        numbers = [_LAST_NUMBER.search(p.name) for p in paths]
        steps = [int(m.group(1)) for m in numbers] if all(numbers) else list(range(len(paths)))
        series = sorted(zip(steps, paths))
    for step, p in series:
        if not (p / CONFIG_JSON).is_file():
            raise PosymError(f"{p} is not a model folder (no {CONFIG_JSON})")
    dup = sorted({s for s, _ in series if [t for t, _ in series].count(s) > 1})
    if dup:
        raise PosymError(f"two folders of the series have step {dup[0]}; name them with distinct numbers")
    return series


def list_checkpoints(run_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(step, path) of every complete ``step-NNNNNN`` checkpoint of a run, sorted by step."""
    root = Path(run_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        s = step_of_name(p.name)
        if s is not None and is_checkpoint(p):
            out.append((s, p))
    return sorted(out)


def best_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / CHECKPOINTS / BEST


def best_checkpoint(run_dir: str | os.PathLike) -> tuple[int, Path] | None:
    """(step, path) of the run's best-validation checkpoint, or None when the run has none."""
    path = best_dir(run_dir)
    if not is_checkpoint(path):
        return None
    step = read_meta(path).get("step")
    return (int(step), path) if step is not None else None


def is_run_dir(path: str | os.PathLike) -> bool:
    """A run directory: a folder with a run ``posym.json`` (its ``config``) that is not a checkpoint
    (a checkpoint folder holds ``config.json`` and a ``posym.json`` with its ``step``)."""
    p = Path(path)
    if not p.is_dir() or (p / CONFIG_JSON).exists() or not (p / POSYM_JSON).is_file():
        return False
    meta = read_json(p / POSYM_JSON)
    return "config" in meta and "step" not in meta


def enclosing_run(path: str | os.PathLike) -> Path | None:
    """The nearest run directory strictly above ``path`` (e.g. the run of ``RUN/checkpoints/step-N``),
    or None when ``path`` lies in no run."""
    try:
        target = Path(path).resolve()
    except OSError:
        return None
    return next((d for d in target.parents if is_run_dir(d)), None)


def staging_dir(run_dir: str | os.PathLike) -> Path:
    """``.<name>.posym-new`` beside a run directory: where ``train --force`` builds the run that
    replaces it (renamed into place only once complete)."""
    p = Path(run_dir)
    return p.with_name(f".{p.name}.posym-new")


# ---- reproduction directories ---------------------------------------------------------------------
_SEED_DIR = re.compile(r"^seed(\d+)$")
#: The task folders of a reproduction directory: one per task (:data:`posym.constants.TASKS`).
TASK_DIRS = TASKS


def run_dir(out: str | os.PathLike, task: str, seed: int) -> Path:
    """``DIR/<task>/seed<k>``: the training run directory of one (task, seed); analyses write there too."""
    return Path(out) / task / f"seed{int(seed)}"


def find_runs(out_dir: str | os.PathLike, complete_only: bool = True) -> dict[str, dict[int, Path]]:
    """``{task: {seed: run_dir}}`` for every ``DIR/<task>/seed<k>/`` (with ``results.json``, i.e. a
    finished training, unless ``complete_only=False``), tasks in the order number, letter."""
    out = Path(out_dir)
    runs: dict[str, dict[int, Path]] = {}
    for task in TASK_DIRS:
        tdir = out / task
        if not tdir.is_dir():
            continue
        seeds = {}
        for d in tdir.iterdir():
            m = _SEED_DIR.match(d.name)
            if m and d.is_dir() and (not complete_only or (d / RESULTS).is_file()):
                seeds[int(m.group(1))] = d
        if seeds:
            runs[task] = dict(sorted(seeds.items()))
    return runs


def marker_path(out: str | os.PathLike, name: str) -> Path:
    """``DIR/stages/<name>.done``: written atomically when a reproduction stage succeeds."""
    return Path(out) / STAGES / f"{name}.done"


def slurm_script(out: str | os.PathLike, name: str) -> Path:
    """``DIR/slurm/<name>.sbatch``: the batch script of stage ``name`` (rewritten at each submission)."""
    return Path(out) / SLURM / f"{name}.sbatch"


def slurm_log(out: str | os.PathLike, name: str, job: str = "%j") -> Path:
    """``DIR/slurm/<name>-<job>.log``: stdout and stderr of one Slurm job of stage ``name`` (``%j``: the
    pattern sbatch fills in with the job id)."""
    return Path(out) / SLURM / f"{name}-{job}.log"


def _json_default(o):
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def write_json_atomic(path: str | os.PathLike, data: dict) -> None:
    """Write ``data`` as indented JSON, atomically (:func:`posym.files.write_text_atomic`)."""
    write_text_atomic(path, json.dumps(data, indent=2, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> dict:
    """A JSON object file, or {} when it is missing or unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_meta(directory: str | os.PathLike) -> dict:
    """The ``posym.json`` beside a checkpoint or in a run directory ({} if absent; PosymError if corrupt)."""
    path = Path(directory) / POSYM_JSON
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PosymError(f"corrupt {path}: {exc}") from exc


def write_meta(directory: str | os.PathLike, meta: dict) -> Path:
    """Write ``directory/posym.json`` (sorted keys, as every checkpoint's)."""
    path = Path(directory) / POSYM_JSON
    path.write_text(json.dumps(meta, indent=2, sort_keys=True))
    return path


def read_marker(out: str | os.PathLike, name: str) -> dict | None:
    p = marker_path(out, name)
    if not p.is_file():
        return None
    try:
        return json.loads(p.read_text())
    except (json.JSONDecodeError, OSError):
        return None  # a torn marker counts as not done


def stage_table(out: str | os.PathLike) -> list[dict]:
    """The markers of a reproduction directory (name, seconds, started, finished), for the report."""
    rows = []
    sdir = Path(out) / STAGES
    for p in sorted(sdir.glob("*.done")) if sdir.is_dir() else []:
        try:
            m = json.loads(p.read_text())
        except (json.JSONDecodeError, OSError):
            continue
        rows.append({"stage": m.get("stage", p.stem), "seconds": m.get("seconds", math.nan),
                     "started": m.get("started", ""), "finished": m.get("finished", "")})
    return rows




__all__ = [n for n in dir() if n.isupper() or n in (
    "accuracy_figure", "aggregate_table", "best_checkpoint", "best_dir", "figure", "fig2", "find_runs", "flow_name",
    "checkpoint_series", "enclosing_run", "hf_checkpoint_step", "hf_checkpoints",
    "is_checkpoint", "is_run_dir", "llm_dir", "llm_model_dirs", "llm_model_slug",
    "list_checkpoints", "marker_path", "png", "pure_counts_csv", "purity", "qk_geometry_stem", "read_json", "read_marker",
    "read_meta", "run_dir", "safe_name", "slurm_log", "slurm_script", "stage_table", "staging_dir", "step_dir",
    "step_of_name", "summary_path", "write_json_atomic",
    "write_meta")]
