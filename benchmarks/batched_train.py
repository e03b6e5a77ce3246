"""Per-run training throughput of the batched engine (``posym train --seeds K``) vs K separate runs.

The quick preset's GPT-J (SPEC §2 shape, 8 layers, no dropout), batch 64 of number-task samples, the
quick preset's optimizer; for each K: K models trained ``--steps`` steps one after another by the
single-run step (``posym.train.loop._optimizer_step``, what ``posym train --seed k`` runs), then the
same K models as one stacked model (``posym.train.batched.StackedEngine``). Timing excludes setup and
``--warmup`` steps; wall seconds and CPU seconds (``time.process_time``, the load-robust figure on a
shared machine), and milliseconds per step per run. Prints a Markdown table.

    python benchmarks/batched_train.py --steps 100 --ks 1 3 6 [--threads 1]
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import torch

from machine import machine_line
from posym.model.arch import arch_config, build_arch_model
from posym.tasks import get_vocab, make_split
from posym.train.batched import StackedEngine
from posym.train.config import make_config
from posym.train.loop import LastTokenLoss, _optimizer_step, make_optimizer


def _batches(k: int, steps: int, x: torch.Tensor, y: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Run ``k``'s batches (64 rows each, a different offset per run)."""
    out = []
    for s in range(steps):
        lo = ((s * 7 + k * 13) * 64) % (len(x) - 64)
        out.append((x[lo:lo + 64], y[lo:lo + 64]))
    return out


def separate(k: int, steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(wall s, CPU s) of ``steps`` steps of each of ``k`` runs trained one after another."""
    cfg = make_config("number", "quick")
    mcfg = arch_config("gptj", "quick", get_vocab("number").size)
    wall = cpu = 0.0
    for run in range(k):
        model = build_arch_model(mcfg, seed=run).train()
        opt, sched = make_optimizer(model, cfg)
        objective, params = LastTokenLoss(model), list(model.parameters())
        for s, (xb, yb) in enumerate(_batches(run, steps + warmup, x, y)):
            if s == warmup:
                t0, c0 = time.perf_counter(), time.process_time()
            _optimizer_step(objective, params, opt, sched, xb, yb, cfg.max_grad_norm)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
    return wall, cpu


def batched(k: int, steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(wall s, CPU s) of ``steps`` steps of ``k`` runs as one stacked model."""
    cfg = make_config("number", "quick")
    mcfg = arch_config("gptj", "quick", get_vocab("number").size)
    runs = []
    for run in range(k):
        model = build_arch_model(mcfg, seed=run).train()
        opt, sched = make_optimizer(model, cfg)
        runs.append(SimpleNamespace(model=model, optimizer=opt, scheduler=sched, config=cfg))
    engine = StackedEngine(runs)
    per_run = [_batches(run, steps + warmup, x, y) for run in range(k)]
    for s in range(steps + warmup):
        if s == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        xs = torch.stack([per_run[r][s][0] for r in range(k)])
        ys = torch.stack([per_run[r][s][1] for r in range(k)])
        engine.step(xs, ys, cfg.max_grad_norm)
    return time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 3, 6])
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(machine_line())
    data = make_split("number", "train", n=20_000)
    x, y = torch.from_numpy(data.input_ids), torch.from_numpy(data.labels)
    print(f"quick preset GPT-J, batch 64, {a.steps} timed steps after {a.warmup}, {a.threads} thread(s)\n")
    print("| K | separate: wall s | CPU s | ms/step/run | batched: wall s | CPU s | ms/step/run | "
          "batched/separate (CPU) |")
    print("|---|---|---|---|---|---|---|---|")
    for k in a.ks:
        sw, sc = separate(k, a.steps, a.warmup, x, y)
        bw, bc = batched(k, a.steps, a.warmup, x, y)
        per = 1000 / (a.steps * k)
        print(f"| {k} | {sw:.1f} | {sc:.1f} | {sc * per:.1f} | {bw:.1f} | {bc:.1f} | {bc * per:.1f} | "
              f"{bc / sc:.2f}× |", flush=True)


if __name__ == "__main__":
    main()
