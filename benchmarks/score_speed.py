"""Head-score speed, side by side: the fast exact path vs the literal re-run reference.

Scores the same prompts (default: the first 512 validation prompts of the checkpoint's task) on a
paper-preset checkpoint with both paths in one run, checks that they agree (max |Δ| of s_POS/s_SYM),
and prints the time of each and the ratio.

    python benchmarks/score_speed.py runs/paper-number [--n 512] [--threads 2]
    python benchmarks/score_speed.py --random --task letter      # random-init paper GPT-J
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from machine import machine_line
from posym.heads import scores_fast, scores_reference
from posym.model import build_model, model_config
from posym.tasks import get_vocab, make_split


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", help="run directory or checkpoint directory")
    ap.add_argument("--random", action="store_true", help="use a random-init paper GPT-J instead")
    ap.add_argument("--task", default=None)
    ap.add_argument("--n", type=int, default=512, help="prompts scored by both paths")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(machine_line(), flush=True)
    if a.random or not a.path:
        task = a.task or "number"
        model = build_model(model_config("paper", get_vocab(task).size), seed=0).eval()
        where = "random-init paper GPT-J"
    else:
        from posym.runs.resolve import resolve_model

        model, task, step = resolve_model(a.path, task=a.task)
        where = f"{a.path} (step {step})"
    ids = make_split(task, "val", n=a.n).input_ids
    t0 = time.perf_counter()
    fast = scores_fast(model, ids)
    t_fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = scores_reference(model, ids)
    t_ref = time.perf_counter() - t0
    diff = max(np.abs(fast.s_pos - ref.s_pos).max(), np.abs(fast.s_sym - ref.s_sym).max())
    print(f"model: {where}; task {task}; {a.n} prompts; threads={torch.get_num_threads()} torch={torch.__version__}")
    print(f"fast path      : {t_fast:8.2f} s")
    print(f"reference path : {t_ref:8.2f} s")
    print(f"ratio          : {t_ref / t_fast:8.0f}x   (max |fast - reference| = {diff:.2e})")


if __name__ == "__main__":
    main()
