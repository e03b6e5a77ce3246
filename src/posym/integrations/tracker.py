"""Positional/symbolic scores of every head of a model *while someone else trains it* (SPEC §3).

:class:`ScoreTracker` is the plain-PyTorch hook: ``tracker(model, step)`` scores every head of the
model on a fixed prompt set with the fast exact path, appends one row per (step, layer, head, τ) to
``OUT/scores.csv`` (the schema of a posym run's ``scores.csv``, so ``posym dynamics OUT`` draws
Fig. 2 from it) and returns summary values (per-layer mean s_POS / s_SYM, number of pure heads).
The HF ``Trainer`` callback (:mod:`posym.integrations.hf`) is a thin wrapper around it.

Scoring runs without gradients, in eval mode (the model's mode is restored) and leaves the global
RNG streams as it found them, so training is the same with and without it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from posym.errors import PosymError
from posym.heads.dynamics import classify
from posym.heads.scores import DEFAULT_TAU
from posym.heads.tracking import COLUMNS, score_table
from posym.runs import layout
from posym.runs.tables import append_table, write_table
from posym.tasks import TASKS, make_split
from posym.tasks.llm_prompts import LLMPrompt, group_prompts

#: Purity tolerance of the logged pure-head counts (SPEC §3, Paper A's γ).
DEFAULT_GAMMA = 0.1


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
    if isinstance(prompts, str) and prompts in TASKS:
        return [PromptGroup(torch.as_tensor(make_split(prompts, "val", seed=seed, n=n).input_ids), blocks)]
    if isinstance(prompts, (str, os.PathLike)):
        from posym.tasks.export import read_prompt_ids

        if task is None:
            raise PosymError(f"prompts from a file ({prompts}) need task='number' or 'letter' for the vocabulary")
        return [PromptGroup(torch.as_tensor(read_prompt_ids(prompts, task)), blocks)]
    if isinstance(prompts, (list, tuple)) and prompts and all(isinstance(p, LLMPrompt) for p in prompts):
        return [PromptGroup(torch.tensor([prompts[i].input_ids for i in idx]), list(bl))
                for (_, bl), idx in group_prompts(prompts).items()]
    ids = torch.as_tensor(np.asarray(prompts) if not isinstance(prompts, torch.Tensor) else prompts)
    if ids.ndim != 2 or ids.dtype.is_floating_point or ids.shape[0] < 1:
        raise PosymError(f"prompts must be a task name, a JSONL file, token ids [P, n] or LLM prompts; "
                         f"got {type(prompts).__name__} of shape {tuple(ids.shape)}")
    return [PromptGroup(ids.long(), blocks)]


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


def summary_values(rows: pd.DataFrame, gamma: float = DEFAULT_GAMMA, prefix: str = "posym/") -> dict[str, float]:
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
    """``tracker(model, step)``: score every head on a fixed prompt set and append the rows to
    ``out/scores.csv`` (see the module doc). The same engine as posym's own head tracking and
    ``posym scores``; works for every model family posym supports (GPT-J, Llama-like, GPT-NeoX, ...).

    ``prompts``: see :func:`prompt_groups` (``task``, ``n``, ``seed``, ``blocks`` refine it).
    ``out``: a folder (created) or None to keep rows in memory only (``tracker.rows``). ``every``:
    score only when ``step % every == 0`` (None: every call). ``taus``: softmax temperatures.
    """

    def __init__(self, prompts: Any, out: str | os.PathLike | None = None, *, task: str | None = None,
                 n: int = 512, seed: int = 0, blocks: Any = None, every: int | None = None,
                 taus: Sequence[float] = (DEFAULT_TAU,), gamma: float = DEFAULT_GAMMA, batch_size: int = 64):
        if every is not None and (isinstance(every, bool) or int(every) < 1):
            raise PosymError(f"every must be a positive number of steps, got {every!r}")
        self.groups = prompt_groups(prompts, task=task, n=n, seed=seed, blocks=blocks)
        self.out = Path(out) if out is not None else None
        self.every = None if every is None else int(every)
        self.taus = tuple(float(t) for t in taus)
        self.gamma = float(gamma)
        self.batch_size = int(batch_size)
        self.rows = pd.DataFrame(columns=COLUMNS)
        self.last_summary: dict[str, float] = {}

    @property
    def scores_path(self) -> Path | None:
        return None if self.out is None else self.out / layout.SCORES

    def due(self, step: int) -> bool:
        return self.every is None or int(step) % self.every == 0

    def resume_from(self, step: int) -> None:
        """Drop rows written after ``step`` (a training run resumed from that checkpoint)."""
        self.rows = self.rows[self.rows["step"] <= step]
        path = self.scores_path
        if path is not None and path.is_file():
            old = pd.read_csv(path)
            write_table(old[old["step"] <= step], path)

    def __call__(self, model: torch.nn.Module, step: int) -> dict[str, float] | None:
        """Score ``model`` at ``step`` (if due): append its rows and return the summary values."""
        if not self.due(step):
            return None
        rows = score_groups(model, self.groups, self.taus, self.batch_size)
        rows.insert(0, "step", int(step))
        rows = rows[COLUMNS]
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            append_table(rows, self.scores_path, COLUMNS)
        self.rows = rows if self.rows.empty else pd.concat([self.rows, rows], ignore_index=True)
        self.last_summary = summary_values(rows, self.gamma)
        return self.last_summary


__all__ = ["DEFAULT_GAMMA", "PromptGroup", "ScoreTracker", "prompt_groups", "score_groups", "summary_values"]
