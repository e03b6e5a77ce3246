"""Training speed of each training-time positional encoding (SPEC §2.1) against ``rope``.

The quick preset's GPT-J (8 layers) trained by posym's own step (``posym.train.loop``: fast
last-token forward, AdamW, warmup/decay, clipping) on the same number-task batches, one variant
after the other in interleaved rounds so all see the same machine state; ``randomized:L`` draws its
position ids each step as the loop does. Reports steps/s (wall) and CPU seconds per step
(``time.process_time``, the load-robust figure on a shared machine) after ``--warmup`` steps.

    python benchmarks/pe_speed.py --steps 100 --rounds 2 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from machine import machine_line
from posym.model import build_model, model_config
from posym.model.pe import parse_pe, random_positions
from posym.tasks import get_vocab, make_split
from posym.train.config import make_config
from posym.train.loop import LastTokenLoss, _optimizer_step, make_optimizer

VARIANTS = ("rope", "nope", "p-rope:0.5", "rope-base:500000", "randomized:2048", "ssmax")


def run(pe: str, steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(steps/s, CPU seconds per step) of ``steps`` training steps of variant ``pe`` after ``warmup``."""
    cfg = make_config("number", "quick", pe=pe)
    model = build_model(model_config("quick", get_vocab("number").size, pe=cfg.pe), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    objective, params, variant = LastTokenLoss(model), list(model.parameters()), parse_pe(cfg.pe)
    B = cfg.batch_size
    for s in range(steps + warmup):
        if s == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        sl = slice(s * B % (len(x) - B), s * B % (len(x) - B) + B)
        pos = random_positions(B, x.shape[1], int(variant.value), 0, s) if variant.kind == "randomized" else None
        _optimizer_step(objective, params, opt, sched, x[sl], y[sl], cfg.max_grad_norm, positions=pos)
    return steps / (time.perf_counter() - t0), (time.process_time() - c0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(machine_line(), flush=True)
    batch = make_split("number", "train", n=64 * (a.steps + a.warmup + 1))
    x, y = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.labels)
    variants = a.variants.split(",")
    res: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for r in range(a.rounds):
        for v in variants:
            res[v].append(run(v, a.steps, a.warmup, x, y))
            print(f"round {r + 1} {v:>18}: {res[v][-1][0]:.2f} steps/s, {res[v][-1][1]:.4f} CPU s/step", flush=True)
    base = statistics.median(c for _, c in res[variants[0]])
    print(f"\n| --pe | steps/s (median) | CPU s/step (median) | CPU time vs {variants[0]} |\n|---|---|---|---|")
    for v in variants:
        sps = statistics.median(s for s, _ in res[v])
        cpu = statistics.median(c for _, c in res[v])
        print(f"| `{v}` | {sps:.2f} | {cpu:.4f} | {cpu / base:.2f}× |")


if __name__ == "__main__":
    main()
