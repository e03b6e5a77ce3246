"""Length generalization of trained models (SPEC §1.4, §5 Fig. 5B).

Inputs are lengthened by extra target-window tokens inserted before the effective target window
(offsets and chain unchanged); accuracy is exact match of the answer-position argmax, globally and
per hop, for each added length and data seed. Any RoPE family posym reads (docs/models.md): positions
beyond the training length need no change where the family computes its rotary on the fly (Llama,
Qwen3, Gemma-3, GPT-NeoX, ...), and GPT-J's rotary tables are rebuilt (no weight changes;
:meth:`posym.model.adapters.RopeAdapter.extend_to`).
"""

from __future__ import annotations

import resource
import time
from typing import Callable, Sequence

import pandas as pd
import torch
from tqdm.auto import tqdm

from posym.checks import warn_other_task
from posym.constants import REACH_THRESHOLD, TEST_SEED_OFFSET
from posym.errors import PosymError
from posym.resources import require_memory
from posym.model.adapters import get_adapter
from posym.tasks import DEFAULT_HOPS, generate
from posym.tasks._common import make_layout
from posym.runs.tables import INTERVENTION
from posym.train.evaluate import accuracy_table, predict

#: Paper A's grid of added tokens: 0, 10, ..., 100, 200, ..., 1000, 1500, ..., 5000.
PAPER_GRID: tuple[int, ...] = tuple(range(0, 101, 10)) + tuple(range(200, 1001, 100)) + tuple(range(1500, 5001, 500))


def parse_grid(spec: str | Sequence[int] | None) -> list[int]:
    """``"paper"``/None -> PAPER_GRID; ``"0,200,1000"`` -> [0, 200, 1000]; a sequence passes through."""
    if spec is None or spec == "paper":
        return list(PAPER_GRID)
    if isinstance(spec, str):
        try:
            values = [int(x) for x in spec.split(",") if x.strip()]
        except ValueError as exc:
            raise PosymError(f"bad grid {spec!r}: expected 'paper' or comma-separated integers") from exc
    else:
        values = [int(x) for x in spec]
    if not values or min(values) < 0:
        raise PosymError(f"bad grid {spec!r}: added lengths must be non-negative integers")
    return sorted(set(values))


def check_memory(model: torch.nn.Module, extra_tokens: int, token_budget: int = 32768) -> None:
    """PosymError before any work if evaluating at ``extra_tokens`` added tokens would not fit in memory:
    the rebuilt rotary table (float32 sin|cos per position) plus one batch's attention scores per layer."""
    seq_len = 8 + 8 + 1 + int(extra_tokens)
    rd = get_adapter(model).rotary_dim
    require_memory(8.0 * seq_len * rd + 4.0 * seq_len * seq_len * max(1, token_budget // seq_len),
                   f"evaluating at +{extra_tokens} tokens (length {seq_len})")


def evaluate_length(model: torch.nn.Module, task: str, extra_tokens: int, n: int, seed: int,
                    token_budget: int = 32768, device: str | torch.device = "cpu", extra_rule: str = "window",
                    distractors: str = "pool") -> dict[str, float]:
    """Accuracy (global, per hop) on ``n`` test-layout samples with ``extra_tokens`` added tokens drawn
    by ``extra_rule`` (:data:`posym.tasks._common.EXTRA_RULES`; SPEC §1.4, our choice)."""
    warn_other_task(model, task, "evaluated")
    check_memory(model, extra_tokens, token_budget)
    batch = generate(task, n, seed, extra_tokens=extra_tokens, extra_rule=extra_rule, distractors=distractors)
    seq_len = batch.input_ids.shape[1]
    get_adapter(model).extend_to(seq_len)
    bs = max(1, token_budget // seq_len)
    pred, _ = predict(model, batch.input_ids, batch_size=bs, device=device)
    return accuracy_table(pred, batch.labels, batch.hops)


def lengthgen(model: torch.nn.Module, task: str, grid: Sequence[int] = PAPER_GRID, n: int = 200,
              seeds: int | Sequence[int] = 1, token_budget: int = 32768, device: str | torch.device = "cpu",
              progress: bool = True, extra_rule: str = "window", distractors: str = "pool",
              done: pd.DataFrame | None = None,
              on_point: Callable[[pd.DataFrame], None] | None = None, label: str | None = None) -> pd.DataFrame:
    """Accuracy vs added target-window tokens (Fig. 5B). One row per (extra_tokens, seed) with columns
    extra_tokens, seed, n, acc, acc_hop1..4, seconds, peak_rss_mb. Data seeds are disjoint from the
    training/val/test split seeds (:data:`posym.constants.TEST_SEED_OFFSET` ``+ s``). ``extra_rule``: what the
    added tokens are (SPEC §1.4, our choice); ``distractors``: the letter task's distractor rule (the model's training data).

    Resuming: ``done`` holds rows already measured with the same model, ``n`` and rules; its
    (extra_tokens, seed) points are not evaluated again (a point's data depend only on its length,
    seed, ``n`` and rules, so the rows are the ones this call would compute) and are returned first.
    ``on_point(table)`` is called with the table so far after each new point (to save progress);
    ``label`` is added to the progress bar's description (e.g. the intervention)."""
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if n < 1 or not seed_list:
        raise PosymError("need n >= 1 and at least one seed")
    make_layout(task, DEFAULT_HOPS, 8, 8, 0, distractors, extra_rule)  # validates the rules
    warn_other_task(model, task, "evaluated")
    rows = [] if done is None else done.to_dict("records")
    have = {(int(r["extra_tokens"]), int(r["seed"])) for r in rows}
    todo = [(int(e), s) for e in grid for s in seed_list if (int(e), s) not in have]
    if todo:
        check_memory(model, max(e for e, _ in todo), token_budget)
    model = model.to(device).eval()
    bar = tqdm(total=len(grid) * len(seed_list), initial=len(grid) * len(seed_list) - len(todo),
               desc=f"lengthgen {task}" + (f" {label}" if label else ""), disable=not progress, unit="pt")
    for extra, s in todo:
        t0 = time.perf_counter()
        acc = evaluate_length(model, task, extra, n, TEST_SEED_OFFSET + s, token_budget, device, extra_rule, distractors)
        rows.append({"extra_tokens": extra, "seed": s, "n": n, **acc,
                     "seconds": round(time.perf_counter() - t0, 3),
                     "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)})
        bar.set_postfix(extra=extra, acc=f"{acc['acc']:.3f}")
        bar.update(1)
        if on_point is not None:
            on_point(_sorted_rows(rows))
    bar.close()
    return _sorted_rows(rows)


def _sorted_rows(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return table.sort_values(["extra_tokens", "seed"], kind="stable").reset_index(drop=True)


def summarize_lengthgen(table: pd.DataFrame) -> pd.DataFrame:
    """One run's curve over its data seeds (sd 0 with one data seed; the curve over model seeds is
    :func:`posym.report.aggregate.lengthgen_summary`). Per added length: extra_tokens, acc_mean, acc_sd,
    acc_hop{h}_mean, n_seeds (data seeds);
    per intervention (a first column ``intervention``) when the table has that column."""
    if INTERVENTION in table.columns:
        parts = []
        for name, part in table.groupby(INTERVENTION, sort=False):
            s = summarize_lengthgen(part.drop(columns=INTERVENTION))
            s.insert(0, INTERVENTION, name)
            parts.append(s)
        return pd.concat(parts, ignore_index=True) if parts else summarize_lengthgen(table.drop(columns=INTERVENTION))
    cols = ["acc"] + [c for c in table.columns if c.startswith("acc_hop")]
    g = table.groupby("extra_tokens")
    out = pd.DataFrame({"extra_tokens": sorted(table["extra_tokens"].unique())})
    for c in cols:
        out[f"{c}_mean"] = g[c].mean().to_numpy()
        out[f"{c}_sd"] = g[c].std(ddof=1).fillna(0.0).to_numpy()
    out["n_seeds"] = g["seed"].nunique().to_numpy()
    return out


def largest_length_above(summary: pd.DataFrame, threshold: float = REACH_THRESHOLD) -> int | None:
    """The reach (SPEC §5, Fig. 5B): the largest added length such that mean accuracy stays >= ``threshold``
    at it and every shorter one; None when +0 is already below it."""
    best = None
    for _, r in summary.sort_values("extra_tokens").iterrows():
        if r["acc_mean"] < threshold:
            break
        best = int(r["extra_tokens"])
    return best
