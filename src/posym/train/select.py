"""Post-hoc model selection: a finished run seen as if it had been trained with another
``final_model`` (SPEC §2: the authors' HF Trainer kept the best validation checkpoint).

``select_final_model(RUN, OUT, "best")`` writes a new run directory ``OUT`` that *derives* from
``RUN`` without retraining: the same training trajectory (``metrics.csv`` up to the selected step,
the checkpoints as a symlink), head scores tracked up to the selected step (so "at the end" means at
that step), a ``posym.json`` with ``final_model`` set and ``derived_from`` recorded, and
``results.json`` with the selected model's test accuracy. Every analysis verb then uses the selected
model of ``OUT`` and writes its tables there, leaving ``RUN`` untouched. Bit-identical to what the
training loop would have produced with that ``final_model`` (same test set, same checkpoint).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from posym.errors import PosymError
from posym.runs.lock import DirLock
from posym.runs import layout
from posym.runs.tables import read_checked, read_scores, write_table
from posym.runs.layout import best_checkpoint, list_checkpoints
from posym.train.config import FINAL_MODELS, TrainConfig


def select_final_model(run: str | os.PathLike, out: str | os.PathLike, final_model: str = "best",
                       device: str = "cpu", force: bool = False, progress: bool = True, task: str | None = None,
                       n_test: int | None = None) -> dict:
    """Write ``out`` = ``run`` standing for its ``final_model`` ("best" or "last"); returns its results.
    ``task`` and ``n_test`` (default the SPEC's 45,600) matter only for an HF ``Trainer`` output
    directory (a posym run has its own)."""
    from posym.model.causal_lm import load_causal_lm
    from posym.tasks import make_split
    from posym.train.evaluate import evaluate

    run, out = Path(run), Path(out)
    src, dst = run.resolve(), out.resolve()
    if dst == src or src in dst.parents or dst in src.parents:
        raise PosymError(f"--out {out} overlaps the run {run} it would be derived from (the same folder, inside it "
                         "or around it); choose an --out outside the run")
    if final_model not in FINAL_MODELS:
        raise PosymError(f"unknown final_model {final_model!r}; choose one of {list(FINAL_MODELS)}")
    hf = not (run / layout.POSYM_JSON).is_file() and bool(layout.hf_checkpoints(run))
    if not hf and (not (run / layout.RESULTS).is_file() or not (run / layout.POSYM_JSON).is_file()):
        raise PosymError(f"{run} is not a finished posym run (posym.json and results.json needed) nor an HF Trainer "
                         "output_dir (checkpoint-N/ folders)")
    if out.exists() and any(p.name != layout.LOCK for p in out.iterdir()):
        if not force:
            raise PosymError(f"{out} exists; pass --force to replace it")
        if not (out / layout.POSYM_JSON).is_file() or not (out / layout.POSYM_JSON).read_text().count("derived_from"):
            raise PosymError(f"{out} is not a run derived by posym select; --force only replaces those")
    if hf:
        return _select_hf_trainer(run, out, final_model, device, progress, task, n_test)
    meta = json.loads((run / layout.POSYM_JSON).read_text())
    cfg = TrainConfig.from_dict(meta["config"])
    if final_model == "best":
        found = best_checkpoint(run)
        if found is None:
            raise PosymError(f"run {run} has no best-validation checkpoint (checkpoints/best/)")
        step, ckpt = found
    else:
        ckpts = list_checkpoints(run)
        if not ckpts:
            raise PosymError(f"run {run} has no checkpoint")
        step, ckpt = ckpts[-1]
    metrics = read_checked(run / layout.METRICS, "metrics")  # checked before anything in out is touched
    scores_path = run / layout.SCORES
    scores = read_scores(scores_path) if scores_path.is_file() else None
    with DirLock(out, "run"):
        for p in out.iterdir():
            if p.name != layout.LOCK:
                p.unlink() if p.is_symlink() or p.is_file() else _rmtree(p)
        val = metrics[(metrics["split"] == "val") & (metrics["step"] <= step)]
        if scores is not None:
            write_table(scores[scores["step"] <= step], out / layout.SCORES)
        (out / layout.CHECKPOINTS).symlink_to((run / layout.CHECKPOINTS).resolve(), target_is_directory=True)
        with tqdm(total=1, desc=f"test {cfg.task}: the {final_model} model (step {step})", disable=not progress) as bar:
            test = evaluate(load_causal_lm(ckpt, device=device),
                            make_split(cfg.task, "test", seed=cfg.data_seed, n=cfg.n_test, distractors=cfg.distractors),
                            batch_size=cfg.eval_batch_size, device=device)
            bar.update(1)
        test_row = {"split": "test", "step": step, "train_loss": float("nan"), "lr": float("nan"), **test,
                    "time_s": float("nan")}
        write_table(pd.concat([val, pd.DataFrame([test_row])], ignore_index=True)[metrics.columns], out / layout.METRICS)
        old = json.loads((run / layout.RESULTS).read_text())
        results = {"test": test, "steps": cfg.steps, "final_model": final_model, "final_step": step,
                   "best_step": old.get("best_step"), "best_val_acc": old.get("best_val_acc"),
                   "derived_from": str(run.resolve())}
        (out / layout.RESULTS).write_text(json.dumps(results, indent=2))
        new_meta = {**meta, "config": {**meta["config"], "final_model": final_model},
                    "derived_from": {"run": str(run.resolve()), "final_model": final_model, "step": step}}
        (out / layout.POSYM_JSON).write_text(json.dumps(new_meta, indent=2))
    return results


def _select_hf_trainer(run: Path, out: Path, final_model: str, device: str, progress: bool, task: str | None,
                       n_test: int | None) -> dict:
    """:func:`select_final_model` of an HF ``Trainer`` output directory (module doc)."""
    from posym.checks import check_positive_int
    from posym.model.causal_lm import load_causal_lm
    from posym.runs.resolve import check_model_folder
    from posym.tasks import make_split
    from posym.train.evaluate import evaluate

    n_test = TrainConfig.n_test if n_test is None else check_positive_int(n_test, "n_test")
    ckpt, task = check_model_folder(run, task, step=final_model)  # "best": trainer_state's best_model_checkpoint
    step = int(layout.hf_checkpoint_step(ckpt.name))
    scores_path = run / layout.SCORES
    scores = read_scores(scores_path) if scores_path.is_file() and (run / layout.SCORES_JSON).is_file() else None
    with DirLock(out, "run"):
        for p in out.iterdir():
            if p.name != layout.LOCK:
                p.unlink() if p.is_symlink() or p.is_file() else _rmtree(p)
        if scores is not None:
            write_table(scores[scores["step"] <= step], out / layout.SCORES)
            layout.write_json_atomic(out / layout.SCORES_JSON, layout.read_json(run / layout.SCORES_JSON))
        state = ckpt / layout.HF_TRAINER_STATE  # the evaluations up to that step: Fig. 2 panel A of the derived run
        if state.is_file():
            layout.write_json_atomic(out / layout.HF_TRAINER_STATE, layout.read_json(state))
        link = layout.step_dir(out, step)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ckpt.resolve(), target_is_directory=True)
        with tqdm(total=1, desc=f"test {task}: the {final_model} model (checkpoint-{step})", disable=not progress) as bar:
            test = evaluate(load_causal_lm(ckpt, device=device), make_split(task, "test", seed=0, n=n_test),
                            device=device)
            bar.update(1)
        derived = {"run": str(run.resolve()), "final_model": final_model, "step": step, "source": "hf-trainer",
                   "checkpoint": str(ckpt.resolve())}
        results = {"test": test, "final_model": final_model, "final_step": step, "n_test": n_test,
                   "derived_from": str(run.resolve())}
        layout.write_json_atomic(out / layout.RESULTS, results)
        layout.write_json_atomic(out / layout.POSYM_JSON, {"task": task, "config": {
            "task": task, "final_model": "last", "distractors": "pool"}, "derived_from": derived})
    return results


def _rmtree(p: Path) -> None:
    import shutil

    shutil.rmtree(p)


__all__ = ["select_final_model"]
