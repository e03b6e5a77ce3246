"""Training speed of each ``posym train --arch`` family (docs/models.md) against GPT-J.

The quick preset's model (8 layers, 1 head, width 128, MLP 512) built in each family
(``posym.model.arch``) and trained by posym's own step (``posym.train.loop``: AdamW, warmup/decay,
clipping, last-token loss; GPT-J's fast last-token forward, the other families' plain HF eager
forward, as ``posym train`` runs them) on the same number-task batches, one family after the other
in interleaved rounds so all see the same machine state. Reports steps/s (wall) and CPU seconds per
step (``time.process_time``, the load-robust figure on a shared machine) after ``--warmup`` steps;
``--sdpa`` adds each non-GPT-J family under SDPA attention (what ``posym train`` does not use).

    python benchmarks/arch_speed.py --steps 20 --rounds 2 --threads 1 [--sdpa]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from machine import machine_line
from posym.model.arch import ARCHS, arch_config, attention_implementation, build_arch_model, n_params
from posym.tasks import get_vocab, make_split
from posym.train.config import make_config
from posym.train.loop import LastTokenLoss, _optimizer_step, make_optimizer


def run(arch: str, steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor,
        attention: str | None = None) -> tuple[float, float, int]:
    """(steps/s, CPU seconds per step, parameters) of ``steps`` training steps of ``arch`` after ``warmup``."""
    cfg = make_config("number", "quick", arch=arch)
    model = build_arch_model(arch_config(arch, "quick", get_vocab("number").size), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    objective, params = LastTokenLoss(model), list(model.parameters())
    B = cfg.batch_size
    with attention_implementation(model, attention):
        for s in range(steps + warmup):
            if s == warmup:
                t0, c0 = time.perf_counter(), time.process_time()
            sl = slice(s * B % (len(x) - B), s * B % (len(x) - B) + B)
            _optimizer_step(objective, params, opt, sched, x[sl], y[sl], cfg.max_grad_norm)
    return steps / (time.perf_counter() - t0), (time.process_time() - c0) / steps, n_params(model)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--sdpa", action="store_true", help="also each non-GPT-J family with SDPA attention")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(machine_line(), flush=True)
    batch = make_split("number", "train", n=64 * (a.steps + a.warmup + 1))
    x, y = torch.from_numpy(batch.input_ids), torch.from_numpy(batch.labels)
    cases = [(arch, None) for arch in a.archs.split(",")]
    if a.sdpa:
        cases += [(arch, "sdpa") for arch, _ in cases if arch != "gptj"]
    res: dict[tuple[str, str | None], list[tuple[float, float, int]]] = {c: [] for c in cases}
    for r in range(a.rounds):
        for c in cases:
            res[c].append(run(c[0], a.steps, a.warmup, x, y, attention=c[1]))
            sps, cpu, _ = res[c][-1]
            print(f"round {r + 1} {c[0]:>8} {c[1] or 'eager':>5}: {sps:.2f} steps/s, {cpu:.4f} CPU s/step", flush=True)
    base = statistics.median(cpu for _, cpu, _ in res[cases[0]])
    print(f"\n| --arch | attention | parameters | steps/s (median) | CPU s/step (median) | CPU time vs {cases[0][0]} |"
          "\n|---|---|---|---|---|---|")
    for c in cases:
        sps = statistics.median(s for s, _, _ in res[c])
        cpu = statistics.median(cp for _, cp, _ in res[c])
        attn = c[1] or ("posym's fast path" if c[0] == "gptj" else "eager")
        print(f"| `{c[0]}` | {attn} | {res[c][0][2]:,} | {sps:.2f} | {cpu:.4f} | {cpu / base:.2f}× |")


if __name__ == "__main__":
    main()
