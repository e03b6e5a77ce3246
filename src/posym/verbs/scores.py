"""``posym scores``: positional/symbolic scores of every head of every checkpoint (SPEC §3, Paper B)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import pandas as pd
import torch

from posym.errors import PosymError
from posym.heads.reading import READ_POINTER
from posym.heads.scores import DEFAULT_TAU
from posym.heads.tracking import score_table
from posym.runs import layout
from posym.runs.lock import in_progress_note
from posym.verbs import Outputs, VerbResult


def _prompt_ids(task: str, prompts: str | os.PathLike | None, n_prompts: int, seed: int):
    from posym.tasks import make_split
    from posym.tasks.export import read_prompt_ids

    if n_prompts < 1:
        raise PosymError(f"need at least one prompt, got n={n_prompts}")
    return read_prompt_ids(prompts, task) if prompts else make_split(task, "val", seed=seed, n=n_prompts).input_ids


def _architecture(folder: Path) -> tuple:
    """(model_type, layers, heads, hidden size) of a model folder's ``config.json`` (None where absent)."""
    cfg = layout.read_json(Path(folder) / layout.CONFIG_JSON)
    pick = lambda *names: next((cfg[n] for n in names if cfg.get(n) is not None), None)
    return (cfg.get("model_type"), pick("num_hidden_layers", "n_layer"), pick("num_attention_heads", "n_head"),
            pick("hidden_size", "n_embd"))


def check_targets(targets: list[tuple[int | None, Path]], task: str) -> None:
    """Before any model is loaded: every folder of a series has one architecture (SPEC §3 curves compare
    one model over training), and a vocabulary that holds the task's ids (SPEC §1.1)."""
    from posym.tasks import get_vocab

    need = get_vocab(task).size
    first = None
    for _, folder in targets:
        vocab = layout.read_json(Path(folder) / layout.CONFIG_JSON).get("vocab_size")
        if isinstance(vocab, int) and vocab < need:
            raise PosymError(f"model at {folder} has vocab_size {vocab} < {need} of the {task} task")
        arch = _architecture(folder)
        if first is None:
            first = (folder, arch)
        elif arch != first[1]:
            show = lambda a: f"{a[0]} ({a[1]} layers x {a[2]} heads, width {a[3]})"
            raise PosymError(f"the series mixes architectures: {first[0]} is {show(first[1])} but {folder} is "
                             f"{show(arch)}; score each model's checkpoints into its own table")


def _score_targets(targets: list[tuple[int | None, Path]], task: str, ids, taus: Sequence[float], per_prompt: bool,
                   progress: bool, device: str, swap_exclude: str = "none") -> pd.DataFrame:
    """One block of rows per (step, model folder); a ``step`` column unless the only step is None."""
    from tqdm.auto import tqdm

    from posym.heads.swaps import parse_swap_exclude
    from posym.runs.resolve import resolve_model

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise PosymError("--device cuda requested but CUDA is not available")
    exclude = parse_swap_exclude(swap_exclude, ids)
    check_targets(targets, task)
    frames = []
    for step, p in tqdm(targets, desc="scoring checkpoints", disable=not progress or len(targets) == 1):
        model, _, _ = resolve_model(p, task=task, device=device, any_family=True)
        frames.append(score_table(model, ids, taus, step=step, per_prompt=per_prompt, exclude_keys=exclude))
    return pd.concat(frames, ignore_index=True)


def score_checkpoints(path: str | os.PathLike, task: str | None = None, prompts: str | os.PathLike | None = None,
                      n_prompts: int = 512, taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False,
                      steps: Sequence[int] | None = None, seed: int = 0, progress: bool = True,
                      device: str = "cpu", swap_exclude: str = "none") -> pd.DataFrame:
    """Scores of every checkpoint of a run directory (one block of rows per ``step``), or of one HF
    checkpoint directory of any supported RoPE family (GPT-J, Llama, Gemma, ...; docs/models.md; no
    ``step`` column). Prompts: a JSONL file, else the first
    ``n_prompts`` validation prompts of the task (the set head tracking uses). ``device``: where the
    models run (e.g. "cuda"); scores are float32/float64 on every device. ``swap_exclude``: keys kept
    out of the swaps, ``none`` (SPEC §3) | ``bos`` | ``first:K`` (docs/spec.md §3)."""
    path = Path(path)
    if not path.is_dir():
        raise PosymError(f"no such run or model directory: {path}" if not path.exists() else f"{path} is not a folder")
    ckpts = layout.list_checkpoints(path)
    if ckpts and steps is not None:
        wanted = set(steps)
        ckpts = [(s, p) for s, p in ckpts if s in wanted]
        if not ckpts:
            raise PosymError(f"none of the steps {sorted(wanted)} has a checkpoint in {path}")
    targets = list(ckpts) if ckpts else [(None, path)]
    task = task or layout.read_meta(path).get("task") or (layout.read_meta(targets[0][1]).get("task") if ckpts else None)
    if task is None:
        raise PosymError(f"cannot tell the task of {path}: pass --task number|letter")
    return _score_targets(targets, task, _prompt_ids(task, prompts, n_prompts, seed), taus, per_prompt, progress,
                          device, swap_exclude)


def score_series(folders: Sequence[str | os.PathLike], task: str | None = None,
                 prompts: str | os.PathLike | None = None, n_prompts: int = 512,
                 taus: Sequence[float] = (DEFAULT_TAU,), per_prompt: bool = False, steps: Sequence[int] | None = None,
                 seed: int = 0, progress: bool = True, device: str = "cpu", swap_exclude: str = "none") -> pd.DataFrame:
    """Scores of every checkpoint of a series (:func:`posym.runs.layout.checkpoint_series`: the
    ``checkpoint-N/`` folders of an HF ``Trainer`` run, or a list of model folders), any supported
    family, as one tidy table with a ``step`` column — the ``scores.csv`` that ``posym dynamics`` turns
    into Fig. 2 curves and pure-head steps (SPEC §3). Each block equals scoring its folder alone."""
    series = layout.checkpoint_series(list(folders))
    if steps is not None:
        wanted = set(steps)
        series = [(s, p) for s, p in series if s in wanted]
        if not series:
            raise PosymError(f"none of the steps {sorted(wanted)} is in the series")
    task = task or layout.read_meta(series[0][1]).get("task")
    if task is None:
        raise PosymError("cannot tell the task of the series: pass --task number|letter")
    return _score_targets(series, task, _prompt_ids(task, prompts, n_prompts, seed), taus, per_prompt, progress,
                          device, swap_exclude)


def default_out(path: str | os.PathLike | None = None, series: Sequence[str | os.PathLike] | None = None) -> Path:
    """Where ``posym scores`` writes without ``--out``: ``RUN/scores.csv`` for a posym run directory;
    ``FOLDER/checkpoint_scores.csv`` for a series given as one folder (an HF ``output_dir``, whose
    ``scores.csv`` is the callback's denser table); ``./runs/scores/<model name>/scores.csv`` for one
    model folder (never inside the model's own folder). PosymError for several series folders."""
    if series is not None:
        series = list(series)
        if len(series) != 1:
            raise PosymError("a series of several folders needs --out FILE.csv")
        return Path(series[0]) / layout.CHECKPOINT_SCORES
    path = Path(path)
    if layout.list_checkpoints(path) or (path / layout.METRICS).is_file():
        return path / layout.SCORES
    return Path(layout.SCORES_HOME) / layout.safe_name(path.resolve().name) / layout.SCORES


def scores(path: str | os.PathLike | None = None, *, series: Sequence[str | os.PathLike] | None = None,
           out: str | os.PathLike | None = None, force: bool = False, **kwargs) -> VerbResult:
    """:func:`score_checkpoints` of ``path`` or :func:`score_series` of ``series``, written to ``out``
    (default: :func:`default_out`); the summary is the last step's table."""
    if (path is None) == (series is None):
        raise PosymError("give exactly one of a run/model folder or a series of checkpoint folders")
    series = None if series is None else list(series)
    out = Path(out) if out else default_out(path, series)
    outputs = Outputs([out], force).check()
    df = score_series(series, **kwargs) if series is not None else score_checkpoints(path, **kwargs)
    outputs.csv(df, out)
    last = df[df["step"] == df["step"].max()] if "step" in df else df
    cols = [c for c in ("layer", "head", "tau", "s_pos", "s_sym", "entropy") if c in last]
    steps = f" at {df['step'].nunique()} steps" if "step" in df else ""
    note = in_progress_note(path, int(df["step"].max()) if "step" in df else None) if path is not None else ""
    text = (last[cols].groupby(["layer", "head", "tau"]).mean().round(3).to_string()
            + f"\nwrote {len(df)} rows{steps} to {out}" + (f"\n{note}" if note else ""))
    text += f"\nswap-exclude: {kwargs.get('swap_exclude', 'none')} (keys kept out of the swaps; docs/spec.md §3)"
    text += f"\n{READ_POINTER}"
    return VerbResult(df, outputs.written, text)


__all__ = ["check_targets", "default_out", "score_checkpoints", "score_series", "scores"]
