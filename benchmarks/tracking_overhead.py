"""Head-tracking overhead at the paper preset, measured side by side.

Tracking scores 512 validation prompts at every evaluation step (every 50 training steps). This
times, in one process, 50 training steps of the paper GPT-J and one tracking call, and reports the
overhead = tracking time / training time of one evaluation interval (target < 10 %).

    python benchmarks/tracking_overhead.py [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from machine import machine_line
from posym.heads.tracking import HeadTracker
from posym.model import build_model, model_config
from posym.tasks import get_vocab, make_split
from posym.train.config import make_config
from posym.train.loop import make_optimizer, train_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=int, default=50, help="training steps between evaluations")
    ap.add_argument("--prompts", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(machine_line(), flush=True)
    cfg = make_config("number", "paper")
    model = build_model(model_config("paper", get_vocab("number").size), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    train_set = make_split("number", "train", n=64 * a.interval)
    x, y = torch.from_numpy(train_set.input_ids), torch.from_numpy(train_set.labels)
    tracker = HeadTracker(make_split("number", "val", n=a.prompts).input_ids)
    t_train, t_track = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            t0 = time.perf_counter()
            for s in range(a.interval):
                train_step(model, opt, sched, x[s * 64:(s + 1) * 64], y[s * 64:(s + 1) * 64], cfg.max_grad_norm)
            t_train.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            tracker(r, model, Path(tmp))
            t_track.append(time.perf_counter() - t0)
    tr, tk = float(np.median(t_train)), float(np.median(t_track))
    print(f"threads={torch.get_num_threads()}  {a.interval} training steps: {tr:.2f} s   "
          f"tracking {a.prompts} prompts: {tk:.2f} s")
    print(f"overhead: {100 * tk / tr:.1f} % of training time")


if __name__ == "__main__":
    main()
