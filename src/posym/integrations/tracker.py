"""Positional/symbolic scores of every head of a model *while someone else trains it* (SPEC §3).

:class:`ScoreTracker` is the plain-PyTorch hook: ``tracker(model, step)`` scores every head of the
model on a fixed prompt set with the fast exact path, writes one row per (step, layer, head, τ) to
``OUT/scores.csv`` (the schema of a posym run's ``scores.csv``, so ``posym dynamics OUT`` draws
Fig. 2 from it) and returns summary values (per-layer mean s_POS / s_SYM, number of pure heads).
The HF ``Trainer`` callback (:mod:`posym.integrations.hf`) is a thin wrapper around it.

**One rule for the table** (docs/reliability.md, "Appended score tables"): ``OUT/scores.json`` beside
the table records what it measured (kind ``tracker``, the prompt-set digest, τ, task, model class).
A tracker continues only a table of the same identity; a folder whose ``scores.csv`` another writer
made (a posym run, ``posym scores``) or whose ``scores.json`` names other prompts or τ is refused
when the tracker is built, before any scoring. Scoring a step again replaces that step's rows, so the
(step, layer, head, τ) key stays unique; ``resume_from(step)`` drops the rows after a checkpoint.

Scoring runs without gradients, in eval mode (the model's mode is restored) and leaves the global
RNG streams as it found them, so training is the same with and without it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

import posym
from posym.checks import check_gamma, check_int, check_positive_int, check_taus
from posym.errors import PosymError
from posym.heads.dynamics import classify
from posym.heads.scores import DEFAULT_TAU, vocab_size
from posym.heads.tracking import COLUMNS, score_table
from posym.model.adapters import get_adapter, unwrap_model
from posym.runs import layout
from posym.runs.tables import append_table, check_resumed, parquet_path, read_scores, write_table
from posym.constants import GAMMA, TASKS
from posym.tasks import get_vocab, make_split
from posym.tasks.llm_prompts import LLMPrompt, group_prompts


@dataclass(frozen=True)
class PromptGroup:
    """Prompts scored in one call: ``ids`` [P, n] and their block layout (None: token swaps)."""

    ids: torch.Tensor
    blocks: Any = None


def prompt_groups(prompts: Any, *, task: str | None = None, n: int = 512, seed: int = 0,
                  blocks: Any = None) -> list[PromptGroup]:
    """The prompt set of a tracker, from

    * a posym task name (``"number"`` / ``"letter"``): its first ``n`` validation prompts (seed ``seed``),
      the set posym's own head tracking uses;
    * a JSONL file of prompts (``posym data export`` format; needs ``task`` for the vocabulary);
    * token ids [P, n] (array or tensor), scored with token swaps, or with ``blocks`` (a number of
      blocks or explicit edges, Paper B's block version);
    * a list of :class:`~posym.tasks.llm_prompts.LLMPrompt` (prompts with their own blocks; prompts that
      share a length and block layout are scored together).
    """
    if task is not None and task not in TASKS:
        raise PosymError(f"unknown task {task!r}; choose {' or '.join(TASKS)}")
    if isinstance(prompts, str) and prompts in TASKS:
        n = check_positive_int(n, "n")
        return [PromptGroup(torch.as_tensor(make_split(prompts, "val", seed=seed, n=n).input_ids), blocks)]
    if isinstance(prompts, str) and not Path(prompts).exists() and not {"/", os.sep, "."} & set(prompts):
        raise PosymError(f"unknown task {prompts!r}; choose {' or '.join(TASKS)} (or pass a JSONL file)")
    if isinstance(prompts, (str, os.PathLike)):
        from posym.tasks.export import read_prompt_ids

        if task is None:
            raise PosymError(f"prompts from a file ({prompts}) need task='number' or 'letter' for the vocabulary")
        return [PromptGroup(torch.as_tensor(read_prompt_ids(prompts, task)), blocks)]
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, LLMPrompt) for p in prompts):
        return [PromptGroup(torch.tensor([prompts[i].input_ids for i in idx]), list(bl))
                for (_, bl), idx in group_prompts(prompts).items()]
    what = ("prompts must be a task name (number or letter), a JSONL file, token ids [P, n] or LLM prompts; "
            f"got {type(prompts).__name__}")
    try:
        ids = torch.as_tensor(np.asarray(prompts) if not isinstance(prompts, torch.Tensor) else prompts)
    except (TypeError, ValueError, RuntimeError):
        raise PosymError(what) from None
    if prompts is None or ids.ndim != 2 or ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.shape[0] < 1:
        raise PosymError(f"{what} of shape {tuple(ids.shape)}" if prompts is not None else what)
    return [PromptGroup(ids.long(), blocks)]


def prompt_set_digest(groups: Sequence[PromptGroup]) -> str:
    """sha256 of a prompt set (every group's shape, blocks and ids): the identity of what a tracker
    table measured, stored in ``scores.json``."""
    h = hashlib.sha256()
    for g in groups:
        h.update(f"{tuple(g.ids.shape)}|{g.blocks!r}|".encode())
        h.update(g.ids.detach().cpu().numpy().astype("<i8").tobytes())
    return h.hexdigest()


def _describe(prompts: Any, task: str | None, n: int, seed: int, groups: Sequence[PromptGroup]) -> str:
    P = sum(int(g.ids.shape[0]) for g in groups)
    if isinstance(prompts, str) and prompts in TASKS:
        return f"{prompts} task: first {P} validation prompts (seed {seed})"
    if isinstance(prompts, (str, os.PathLike)):
        return f"prompt file {prompts} ({task} vocabulary)"
    if len(groups) > 1 or groups[0].blocks is not None and not isinstance(groups[0].blocks, int):
        return f"{P} prompts with blocks"
    g = groups[0]
    return f"token ids [{P}, {g.ids.shape[1]}]" + (f", {g.blocks} blocks" if g.blocks is not None else "")


def say(message: str) -> None:
    """One line for the user on stderr (``posym: ...``), as the CLI prints its notes."""
    print(f"posym: {message}", file=sys.stderr, flush=True)


class _KeepRng:
    """Context manager restoring the torch (CPU and CUDA) and numpy global RNG states on exit."""

    def __enter__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.np = np.random.get_state()
        return self

    def __exit__(self, *exc):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        np.random.set_state(self.np)
        return False


def score_groups(model: torch.nn.Module, groups: Sequence[PromptGroup], taus: Sequence[float],
                 batch_size: int = 64) -> pd.DataFrame:
    """Scores of every (layer, head, τ) averaged over all prompts of ``groups`` (weighted by group size).

    Columns ``layer, head, tau, s_pos, s_sym, entropy, swap_mass, n_prompts``.
    """
    model = unwrap_model(model)
    device = next(model.parameters()).device
    frames = []
    with _KeepRng():
        for g in groups:
            frames.append(score_table(model, g.ids.to(device), taus, batch_size=batch_size, blocks=g.blocks))
    if len(frames) == 1:
        return frames[0]
    df = pd.concat(frames, ignore_index=True)
    value_cols = ["s_pos", "s_sym", "entropy", "swap_mass"]
    weighted = df[value_cols].mul(df["n_prompts"], axis=0).assign(layer=df["layer"], head=df["head"], tau=df["tau"],
                                                                 n_prompts=df["n_prompts"])
    out = weighted.groupby(["layer", "head", "tau"], sort=True).sum().reset_index()
    out[value_cols] = out[value_cols].div(out["n_prompts"], axis=0)
    return out[["layer", "head", "tau", *value_cols, "n_prompts"]]


def summary_values(rows: pd.DataFrame, gamma: float = GAMMA, prefix: str = "posym/") -> dict[str, float]:
    """Loggable summary of one step's rows at its smallest τ: mean s_POS / s_SYM per layer and the number
    of pure positional / symbolic heads at tolerance ``gamma`` (SPEC §3 purity rule)."""
    r = rows[np.isclose(rows["tau"], rows["tau"].min())]
    out: dict[str, float] = {}
    for layer, g in r.groupby("layer", sort=True):
        out[f"{prefix}s_pos/layer_{int(layer)}"] = float(g["s_pos"].mean())
        out[f"{prefix}s_sym/layer_{int(layer)}"] = float(g["s_sym"].mean())
    kinds = classify(r["s_pos"].to_numpy(), r["s_sym"].to_numpy(), gamma)
    out[f"{prefix}pure_positional"] = float((kinds == "positional").sum())
    out[f"{prefix}pure_symbolic"] = float((kinds == "symbolic").sum())
    return out


class ScoreTracker:
    """``tracker(model, step)``: score every head on a fixed prompt set and write the rows to
    ``out/scores.csv`` (see the module doc for the one rule of the table). The same engine as posym's
    own head tracking and ``posym scores``; works for every model family posym supports (GPT-J,
    Llama-like, GPT-NeoX, ...; a TransformerLens bridge is unwrapped to its HF model).

    ``prompts``: see :func:`prompt_groups` (``task``, ``n``, ``seed``, ``blocks`` refine it).
    ``out``: a folder (created; PosymError at once if it cannot be written or holds a table of another
    writer or prompt set) or None to keep rows in memory only (``tracker.rows``). ``every``: score
    only when ``step % every == 0`` (None: every call). ``taus``: softmax temperatures. ``gamma``:
    purity tolerance of the summary's pure-head counts. ``verbose``: one line per scoring on stderr.
    A restarted plain loop calls :meth:`resume_from` with the step it continues from.
    """

    def __init__(self, prompts: Any, out: str | os.PathLike | None = None, *, task: str | None = None,
                 n: int = 512, seed: int = 0, blocks: Any = None, every: int | None = None,
                 taus: Sequence[float] = (DEFAULT_TAU,), gamma: float = GAMMA, batch_size: int = 64,
                 verbose: bool = False):
        self.every = None if every is None else check_positive_int(every, "every")
        n, seed = check_positive_int(n, "n"), check_int(seed, "seed")
        self.taus = check_taus(taus)
        self.gamma = check_gamma(gamma)
        self.batch_size = check_positive_int(batch_size, "batch_size")
        self.groups = prompt_groups(prompts, task=task, n=n, seed=seed, blocks=blocks)
        self.task = prompts if isinstance(prompts, str) and prompts in TASKS else task
        self.identity = {"kind": "tracker", "prompts_sha256": prompt_set_digest(self.groups),
                         "prompts": _describe(prompts, self.task, n, seed, self.groups),
                         "n_prompts": sum(int(g.ids.shape[0]) for g in self.groups), "task": self.task,
                         "taus": list(self.taus)}
        self.verbose = bool(verbose)
        self.rows = pd.DataFrame(columns=COLUMNS)
        self.last_summary: dict[str, float] = {}
        self._model: dict | None = None  # class, layers, heads of the model scored (checked once)
        self.out: Path | None = None
        if out is not None:
            self.bind(out)

    # ---- the folder and its table -----------------------------------------------------------------
    @property
    def scores_path(self) -> Path | None:
        return None if self.out is None else self.out / layout.SCORES

    @property
    def sidecar_path(self) -> Path | None:
        return None if self.out is None else self.out / layout.SCORES_JSON

    def table_state(self, out: str | os.PathLike) -> str:
        """What ``out/scores.csv`` is to this tracker: ``"none"`` (no table), ``"same"`` (a tracker table
        of this prompt set and τ), ``"other"`` (a tracker table of other prompts or τ); PosymError for a
        table that no tracker wrote (no ``scores.json``: a posym run, ``posym scores``) or a posym run folder."""
        out = Path(out)
        if (out / layout.POSYM_JSON).is_file():
            raise PosymError(f"{out} is a posym run directory; give the tracker its own folder as out")
        if not (out / layout.SCORES).is_file():
            return "none"
        meta = layout.read_json(out / layout.SCORES_JSON)
        if meta.get("kind") != "tracker":
            raise PosymError(f"{out / layout.SCORES} was not written by a ScoreTracker or the callback (no "
                             f"{layout.SCORES_JSON} beside it); give the tracker another folder as out")
        return "same" if all(meta.get(k) == self.identity[k] for k in ("prompts_sha256", "taus")) else "other"

    def _mismatch(self, out: Path) -> PosymError:
        meta = layout.read_json(out / layout.SCORES_JSON)
        return PosymError(f"{out / layout.SCORES} holds scores of another prompt set or taus ({meta.get('prompts')}, "
                          f"taus {meta.get('taus')}; this tracker: {self.identity['prompts']}, taus "
                          f"{self.identity['taus']}); give the tracker another folder as out")

    def bind(self, out: str | os.PathLike, fresh: bool = False, probe: bool = True) -> None:
        """Write to ``out`` from now on. Checks first (PosymError, nothing scored or written): ``out`` is a
        writable folder (created), and its ``scores.csv``, if any, is a tracker table of this prompt set
        and τ — or, with ``fresh=True`` (a new training that will :meth:`start_new_table`), any tracker table.
        ``probe=False`` skips the write test (a DDP rank that never writes)."""
        out = Path(out)
        state = self.table_state(out) if out.is_dir() else "none"
        if state == "other" and not fresh:
            raise self._mismatch(out)
        if probe:
            _check_writable(out)
        self.out = out

    def start_new_table(self) -> Path | None:
        """A fresh training into a folder that holds a tracker table: move that table aside to
        ``scores.previous.csv`` (replacing an older one) with one line saying so; returns its new path."""
        path = self.scores_path
        if path is None or not path.is_file():
            return None
        prev = self.out / layout.SCORES_PREVIOUS
        os.replace(path, prev)
        if parquet_path(path).is_file():
            os.replace(parquet_path(path), parquet_path(prev))
        say(f"warning: {path} held the scores of an earlier training; moved it to {prev.name} and started a new table")
        return prev

    def resume_from(self, step: int) -> None:
        """Continue from ``step`` (a training resumed from that checkpoint): drop the rows written after it,
        in memory and in ``out/scores.csv`` (a table of this tracker's identity only, see :meth:`bind`)."""
        step = check_int(step, "step")
        self.rows = self.rows[self.rows["step"] <= step]
        path = self.scores_path
        if path is not None and path.is_file():
            if self.table_state(self.out) == "other":
                raise self._mismatch(self.out)
            old = read_scores(path)
            # the rows kept are checked as train --resume checks them (values, no key twice)
            kept = check_resumed(path, "scores", step, "restore it, or give the tracker another folder as out")
            if (old["step"] > step).any():
                write_table(kept, path)

    def steps_written(self) -> set[int]:
        """The steps ``out/scores.csv`` holds (empty without a table)."""
        path = self.scores_path
        return set() if path is None or not path.is_file() else {int(s) for s in read_scores(path)["step"]}

    # ---- the model --------------------------------------------------------------------------------
    def check_model(self, model: Any, against_table: bool = True) -> torch.nn.Module:
        """The HF model to score (a TransformerLens bridge unwrapped); PosymError before any scoring for an
        unsupported family, a vocabulary too small for the task or the prompt ids, or (``against_table``)
        a model of another class or shape than the one this folder's table measured."""
        model = unwrap_model(model)
        ad = get_adapter(model)
        n = vocab_size(model)
        top = max(int(g.ids.max()) for g in self.groups)
        low = min(int(g.ids.min()) for g in self.groups)
        need = max(top + 1, get_vocab(self.task).size if self.task else 0)
        if low < 0:
            raise PosymError(f"prompt ids must be >= 0, got {low}")
        if n is not None and n < need:
            what = f"the {self.task} task needs {need}" if self.task else f"the prompts reach id {top}"
            raise PosymError(f"the model's vocabulary has {n} ids but {what}; score a model with vocab_size >= {need}")
        ident = {"model": type(model).__name__, "layers": int(ad.n_layers), "heads": int(ad.n_heads)}
        if against_table and self._model != ident and self.sidecar_path is not None and self.scores_path.is_file():
            meta = layout.read_json(self.sidecar_path)
            old = {k: meta.get(k) for k in ident}
            if old.get("model") is not None and old != ident:
                raise PosymError(f"{self.scores_path} holds scores of another model ({old['model']}, {old['layers']} "
                                 f"layers x {old['heads']} heads; now {ident['model']}, {ident['layers']} x "
                                 f"{ident['heads']}); give the tracker another folder as out")
        self._model = ident
        return model

    # ---- scoring ----------------------------------------------------------------------------------
    def due(self, step: int) -> bool:
        return self.every is None or int(step) % self.every == 0

    def _write(self, rows: pd.DataFrame, step: int) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.scores_path
        layout.write_json_atomic(self.sidecar_path, {**self.identity, **(self._model or {}), "columns": COLUMNS,
                                                    "posym_version": posym.__version__})
        if not path.is_file():
            write_table(rows, path)
            return
        old = read_scores(path)
        if (old["step"] >= step).any():  # the same step again, or an earlier one: replace, keep the order
            merged = pd.concat([old[old["step"] != step], rows], ignore_index=True)
            write_table(merged.sort_values("step", kind="stable").reset_index(drop=True)[COLUMNS], path)
        else:
            append_table(rows, path, COLUMNS)

    def __call__(self, model: torch.nn.Module, step: int) -> dict[str, float] | None:
        """Score ``model`` at ``step`` (if due): write its rows (replacing rows of the same step) and
        return the summary values."""
        step = check_int(step, "step")
        if not self.due(step):
            return None
        model = self.check_model(model)
        t0 = time.perf_counter()
        rows = score_groups(model, self.groups, self.taus, self.batch_size)
        rows.insert(0, "step", step)
        rows = rows[COLUMNS]
        if self.out is not None:
            self._write(rows, step)
        kept = self.rows[self.rows["step"] != step]
        self.rows = rows if kept.empty else pd.concat([kept, rows], ignore_index=True)
        self.last_summary = summary_values(rows, self.gamma)
        if self.verbose:
            say(f"scored {self.identity['n_prompts']} prompts at step {step} in {time.perf_counter() - t0:.1f} s")
        return self.last_summary


def _check_writable(out: Path) -> None:
    """PosymError unless ``out`` is (or can be created as) a folder a file can be written in."""
    if out.exists() and not out.is_dir():
        raise PosymError(f"out {out} is a file, not a folder; give the tracker a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".posym-write-test.{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PosymError(f"cannot write to {out}: {exc.strerror or exc}") from None


__all__ = ["PromptGroup", "ScoreTracker", "prompt_set_digest", "prompt_groups", "say", "score_groups",
           "summary_values"]
