"""The run directory as code (docs/architecture.md "runs/", docs/runs.md): every file name under ``runs/<name>/``
(:mod:`posym.runs.layout`), resolving a directory to a model (:mod:`posym.runs.resolve`), one writer
per directory (:mod:`posym.runs.lock`), provenance (:mod:`posym.runs.provenance`) and the tables'
schema, CSV + Parquet writer and reader (:mod:`posym.runs.tables`, :func:`load_run`).

Sits above ``tasks`` and ``model`` and below everything else: no other module spells a run file name.
"""

from posym.runs.layout import find_runs, list_checkpoints, run_dir, step_dir
from posym.runs.lock import DirLock
from posym.runs.resolve import ResolvedModel, resolve_checkpoint, resolve_model, resolve_task, run_final_model
from posym.runs.tables import RUN_TABLES, load_run

__all__ = ["DirLock", "RUN_TABLES", "ResolvedModel", "find_runs", "load_run", "list_checkpoints",
           "resolve_checkpoint", "resolve_model", "resolve_task", "run_dir", "run_final_model", "step_dir"]
