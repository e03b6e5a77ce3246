"""Per-prompt outcomes under an intervention: the paired unit of the head-set study (issue 37;
docs/head_sets.md).

For each test prompt: ``correct`` (1 when the greedy answer — the argmax over the whole vocabulary at
the last position, as :func:`posym.lengthgen.trained.evaluate_length` scores it — is the label) and
``rank``, the answer's **normalised rank among the candidates**: ``(r − 1)/(C − 1)`` with ``r = 1 +``
the number of candidates whose logit is strictly above the answer's and ``C`` the number of distinct
candidates (0 = the model's first choice, 1 = its last; the rule of the LLM ``choice`` protocol,
:func:`posym.lengthgen.llm_tables.normalised_rank`, so trained models and LLMs read alike).

**Candidates** of a posym task prompt: the distinct tokens of its *effective target window* — the
``target_len`` columns after the added tokens (SPEC §1.1, §1.4: the answer is always one of them; the
added tokens are not candidates), the same set the LLM ``choice`` protocol scores
(:func:`posym.tasks.prompts.candidates`: every distinct target-window token).

The same prompts (data seed ``TEST_SEED_OFFSET + seed``, as :func:`~posym.lengthgen.trained.lengthgen`)
are used for every intervention, so two conditions are paired prompt by prompt. The intervention
comes from the caller as a context-manager factory (this floor does not import ``interventions``).
For offline LLMs, :func:`choice_outcomes` reads the same two columns from the ``choice`` protocol's
``answers.jsonl`` records (``correct``, ``target_rank``, ``n_candidates``) rather than a new protocol.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, ContextManager, Iterable, Sequence

import numpy as np
import pandas as pd
import torch

from posym.checks import check_int, warn_other_task
from posym.constants import TEST_SEED_OFFSET
from posym.errors import PosymError
from posym.lengthgen.llm_tables import normalised_rank
from posym.lengthgen.trained import check_memory
from posym.model.adapters import get_adapter
from posym.tasks import generate
from posym.train.evaluate import predict

#: The columns of an outcomes table, one row per prompt.
OUTCOME_COLUMNS: tuple[str, ...] = ("prompt", "correct", "rank", "n_candidates")
#: A context-manager factory: called once, its context holds the intervention for the forwards.
Intervene = Callable[[], ContextManager[Any]]


def candidate_ranks(logits: np.ndarray, labels: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rank [n], n_candidates [n])``: the label's normalised rank among the distinct tokens of each row
    of ``candidates [n, C]`` (module doc) from ``logits [n, V]``; the label must be one of its row's
    candidates. Exact: a loop over rows (``n`` is hundreds)."""
    logits, labels, candidates = np.asarray(logits), np.asarray(labels), np.asarray(candidates)
    if candidates.ndim != 2 or len(candidates) != len(labels) or len(logits) != len(labels):
        raise PosymError(f"candidates must be [n, C] for n = {len(labels)} prompts, got shape {candidates.shape}")
    ranks, counts = np.empty(len(labels)), np.empty(len(labels), dtype=np.int64)
    for i, (row, label) in enumerate(zip(candidates, labels)):
        cands = np.unique(row)
        if label not in cands:
            raise PosymError(f"prompt {i}: its answer {int(label)} is not one of its candidates; "
                             "give candidates that contain the answer (the target window)")
        target = logits[i, int(label)]
        ranks[i] = normalised_rank(1 + int((logits[i, cands] > target).sum()), len(cands))
        counts[i] = len(cands)
    return ranks, counts


def prompt_outcomes(model: torch.nn.Module, input_ids: np.ndarray | torch.Tensor, labels: np.ndarray | Sequence[int],
                    candidates: np.ndarray | torch.Tensor | None = None, *, intervene: Intervene | None = None,
                    batch_size: int = 512, device: str | torch.device = "cpu") -> pd.DataFrame:
    """Per-prompt outcomes (:data:`OUTCOME_COLUMNS`) of ``model`` on ``input_ids [n, T]`` with answers
    ``labels [n]``, inside ``intervene()`` (None: the untouched model). ``candidates [n, C]``: the tokens
    the rank is taken among (default: each prompt's own tokens ``input_ids``)."""
    ids = np.asarray(input_ids.cpu() if isinstance(input_ids, torch.Tensor) else input_ids, dtype=np.int64)
    labels = np.asarray(labels, dtype=np.int64)
    if ids.ndim != 2 or labels.shape != (len(ids),) or not len(ids):
        raise PosymError(f"need input_ids [n, T] and labels [n] with n >= 1, got {ids.shape} and {labels.shape}")
    cands = ids if candidates is None else np.asarray(candidates.cpu() if isinstance(candidates, torch.Tensor)
                                                      else candidates)
    with torch.no_grad(), (intervene() if intervene is not None else nullcontext()):
        pred, logits = predict(model, ids, batch_size=check_int(batch_size, "batch_size", lo=1), device=device)
    rank, count = candidate_ranks(logits, labels, cands)
    return pd.DataFrame({"prompt": np.arange(len(ids)), "correct": (pred == labels).astype(np.int64), "rank": rank,
                         "n_candidates": count})


def task_outcomes(model: torch.nn.Module, task: str, extra_tokens: int, n: int, seed: int = 0, *,
                  intervene: Intervene | None = None, extra_rule: str = "window", distractors: str = "pool",
                  token_budget: int = 32768, device: str | torch.device = "cpu") -> pd.DataFrame:
    """Per-prompt outcomes of a trained posym model on ``n`` test-layout prompts of ``task`` with
    ``extra_tokens`` added tokens (data seed ``TEST_SEED_OFFSET + seed``; SPEC §1.4), candidates = the
    effective target window (module doc). The same arguments give the same prompts under every
    intervention (the pairing of docs/head_sets.md)."""
    warn_other_task(model, task, "evaluated")
    check_memory(model, extra_tokens, token_budget)
    batch = generate(task, check_int(n, "n", lo=1), TEST_SEED_OFFSET + check_int(seed, "seed", lo=0),
                     extra_tokens=extra_tokens, extra_rule=extra_rule, distractors=distractors)
    start = int(extra_tokens)
    window = batch.input_ids[:, start:start + batch.target_len]
    get_adapter(model).extend_to(batch.seq_len)
    model = model.to(device).eval()
    return prompt_outcomes(model, batch.input_ids, batch.labels, window, intervene=intervene,
                           batch_size=max(1, token_budget // batch.seq_len), device=device)


def choice_outcomes(records: Iterable[dict], *, intervention: str, task: str, length: int) -> pd.DataFrame:
    """Per-prompt outcomes (:data:`OUTCOME_COLUMNS`, ``prompt`` = the sample's ``(run, index)`` order)
    of one ``(intervention, task, length)`` from the ``choice`` records of ``answers.jsonl``
    (:mod:`posym.lengthgen.llm_answers`: ``correct``, ``target_rank``, ``n_candidates``). Empty when none match."""
    rows = sorted(((int(r.get("run", 0)), int(r["index"])), r) for r in records
                  if r.get("protocol") == "choice" and r.get("intervention", "none") == intervention
                  and r.get("task") == task and int(r.get("length", -1)) == int(length))
    return pd.DataFrame({"prompt": np.arange(len(rows)), "correct": [int(bool(r["correct"])) for _, r in rows],
                         "rank": [normalised_rank(r["target_rank"], r["n_candidates"]) for _, r in rows],
                         "n_candidates": [int(r["n_candidates"]) for _, r in rows]}, columns=list(OUTCOME_COLUMNS))


__all__ = ["Intervene", "OUTCOME_COLUMNS", "candidate_ranks", "choice_outcomes", "prompt_outcomes", "task_outcomes"]
