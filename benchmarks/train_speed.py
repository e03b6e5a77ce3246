"""Training speed, side by side: posym's loop vs an HF Trainer baseline.

Both train the paper GPT-J (SPEC §2) on the same number-task batches with the paper's optimiser.
The baseline is configured as Paper A's code did: ``GPTJForCausalLM`` with eager attention, 18-token
sequences (17 inputs + appended answer) whose labels are -100 except the answer, HF ``Trainer`` with
AdamW (betas 0.95/0.999, wd 1e-4), linear warmup 750, batch 64, grad-norm clip 1.0 (Trainer default).
Timing excludes setup: steps/s over the steps after ``--warmup`` steps, measured in interleaved
rounds so both see the same machine state. ``--profile`` prints where posym's step spends its time.

    python benchmarks/train_speed.py --steps 150 --rounds 2 [--threads 2] [--profile]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from posym.model import build_model, model_config
from posym.tasks import get_vocab, make_split
from posym.train.config import make_config
from posym.train.loop import make_optimizer, train_step


def _data(n: int):
    batch = make_split("number", "train", n=n)
    return torch.from_numpy(batch.input_ids), torch.from_numpy(batch.labels)


def run_posym(steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> float:
    cfg = make_config("number", "paper")
    model = build_model(model_config("paper", get_vocab("number").size), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    for s in range(steps + warmup):
        if s == warmup:
            t0 = time.perf_counter()
        sl = slice(s * 64 % (len(x) - 64), s * 64 % (len(x) - 64) + 64)
        train_step(model, opt, sched, x[sl], y[sl], cfg.max_grad_norm)
    return steps / (time.perf_counter() - t0)


def run_hf_trainer(steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> float:
    from transformers import Trainer, TrainerCallback, TrainingArguments, logging

    logging.set_verbosity_error()
    model = build_model(model_config("paper", get_vocab("number").size), seed=0)
    seq = torch.cat([x, y[:, None]], dim=1)  # 18 tokens: inputs + answer
    labels = torch.full_like(seq, -100)
    labels[:, -1] = y

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return len(seq)

        def __getitem__(self, i):
            return {"input_ids": seq[i], "labels": labels[i]}

    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())

    args = TrainingArguments(output_dir="runs/.bench-hf", per_device_train_batch_size=64, learning_rate=1e-4,
                             adam_beta1=0.95, adam_beta2=0.999, weight_decay=1e-4, warmup_steps=750,
                             lr_scheduler_type="linear", max_steps=steps + warmup, logging_steps=50,
                             save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=DS(), callbacks=[Clock()]).train()
    return steps / (stamps[-1] - stamps[warmup - 1])


def profile_posym(x: torch.Tensor, y: torch.Tensor, steps: int = 20) -> str:
    from torch.profiler import profile

    cfg = make_config("number", "paper")
    model = build_model(model_config("paper", get_vocab("number").size), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    for s in range(5):
        train_step(model, opt, sched, x[:64], y[:64], cfg.max_grad_norm)
    with profile() as prof:
        for s in range(steps):
            train_step(model, opt, sched, x[s * 64:(s + 1) * 64], y[s * 64:(s + 1) * 64], cfg.max_grad_norm)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    x, y = _data((a.steps + a.warmup) * 64 + 64)
    ours, hf = [], []
    for r in range(a.rounds):
        ours.append(run_posym(a.steps, a.warmup, x, y))
        hf.append(run_hf_trainer(a.steps, a.warmup, x, y))
        print(f"round {r + 1}: posym {ours[-1]:.2f} steps/s   HF Trainer {hf[-1]:.2f} steps/s")
    o, h = float(np.median(ours)), float(np.median(hf))
    print(f"threads={torch.get_num_threads()} torch={torch.__version__}")
    print(f"posym loop : {o:.2f} steps/s (median of {a.rounds})")
    print(f"HF Trainer : {h:.2f} steps/s (median of {a.rounds})")
    print(f"ratio      : {o / h:.2f}x")
    if a.profile:
        print(profile_posym(x, y))


if __name__ == "__main__":
    main()
