"""Training speed, side by side: posym's loop vs an HF Trainer baseline.

Both train the paper GPT-J (SPEC §2) on the same number-task batches with the paper's optimiser.
The baseline is configured as Paper A's code did: ``GPTJForCausalLM`` with eager attention, 18-token
sequences (17 inputs + appended answer) whose labels are -100 except the answer, HF ``Trainer`` with
AdamW (betas 0.95/0.999, wd 1e-4), linear warmup 750, batch 64, grad-norm clip 1.0 (Trainer default).
Timing excludes setup: steps/s over the steps after ``--warmup`` steps, measured in interleaved
rounds so both see the same machine state; each round reports steps/s (wall) and CPU seconds per
step (``time.process_time``, the load-robust figure on a shared machine). ``--profile`` prints
where each side's step spends its time (torch profiler, 20 steps).

    python benchmarks/train_speed.py --steps 150 --rounds 2 [--threads 2] [--profile]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from machine import machine_line
from posym.model import build_model, model_config
from posym.tasks import get_vocab, make_split
from posym.train.config import make_config
from posym.train.loop import make_optimizer, train_step


def _data(n: int):
    batch = make_split("number", "train", n=n)
    return torch.from_numpy(batch.input_ids), torch.from_numpy(batch.labels)


def run_posym(steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(steps/s, CPU seconds per step) of posym's loop over ``steps`` steps after ``warmup``."""
    cfg = make_config("number", "paper")
    model = build_model(model_config("paper", get_vocab("number").size), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    for s in range(steps + warmup):
        if s == warmup:
            t0, c0 = time.perf_counter(), time.process_time()
        sl = slice(s * 64 % (len(x) - 64), s * 64 % (len(x) - 64) + 64)
        train_step(model, opt, sched, x[sl], y[sl], cfg.max_grad_norm)
    return steps / (time.perf_counter() - t0), (time.process_time() - c0) / steps


def run_hf_trainer(steps: int, warmup: int, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(steps/s, CPU seconds per step) of the HF Trainer baseline, timed between step-end callbacks."""
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

    stamps: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            stamps.append((time.perf_counter(), time.process_time()))

    args = TrainingArguments(output_dir="runs/.bench-hf", per_device_train_batch_size=64, learning_rate=1e-4,
                             adam_beta1=0.95, adam_beta2=0.999, weight_decay=1e-4, warmup_steps=750,
                             lr_scheduler_type="linear", max_steps=steps + warmup, logging_steps=50,
                             save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True,
                             dataloader_num_workers=0, disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=DS(), callbacks=[Clock()]).train()
    (w0, c0), (w1, c1) = stamps[warmup - 1], stamps[-1]
    return steps / (w1 - w0), (c1 - c0) / steps


def profile_steps(x: torch.Tensor, y: torch.Tensor, steps: int = 20) -> str:
    """torch-profiler tables of ``steps`` steps of posym's step and of the baseline's model step (the HF
    forward on 18 tokens with -100 labels, backward, clipping, AdamW; without the Trainer's own loop)."""
    from torch.profiler import profile

    cfg = make_config("number", "paper")
    V = get_vocab("number").size
    model = build_model(model_config("paper", V), seed=0).train()
    opt, sched = make_optimizer(model, cfg)
    hf = build_model(model_config("paper", V), seed=0).train()
    hf_opt = torch.optim.AdamW(hf.parameters(), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-4)
    seq = torch.cat([x, y[:, None]], dim=1)
    labels = torch.full_like(seq, -100)
    labels[:, -1] = y

    def posym_step(s: int) -> None:
        train_step(model, opt, sched, x[s * 64:(s + 1) * 64], y[s * 64:(s + 1) * 64], cfg.max_grad_norm)

    def hf_step(s: int) -> None:
        hf(input_ids=seq[s * 64:(s + 1) * 64], labels=labels[s * 64:(s + 1) * 64]).loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        hf_opt.step()
        hf_opt.zero_grad()

    out = []
    for name, step in (("posym step", posym_step), ("HF model step", hf_step)):
        for s in range(5):
            step(s)
        c0 = time.process_time()
        with profile() as prof:
            for s in range(steps):
                step(s)
        out.append(f"{name}: {(time.process_time() - c0) / steps:.3f} CPU s/step under the profiler\n"
                   + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    return "\n".join(out)


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
    print(machine_line(), flush=True)
    for r in range(a.rounds):
        ours.append(run_posym(a.steps, a.warmup, x, y))
        hf.append(run_hf_trainer(a.steps, a.warmup, x, y))
        print(f"round {r + 1}: posym {ours[-1][0]:.2f} steps/s, {ours[-1][1]:.3f} CPU s/step   "
              f"HF Trainer {hf[-1][0]:.2f} steps/s, {hf[-1][1]:.3f} CPU s/step   "
              f"ratio {ours[-1][0] / hf[-1][0]:.2f}x wall, {hf[-1][1] / ours[-1][1]:.2f}x CPU", flush=True)
    o, h = (float(np.median([v[0] for v in side])) for side in (ours, hf))
    oc, hc = (float(np.median([v[1] for v in side])) for side in (ours, hf))
    cpu_ratios = [b[1] / a_[1] for a_, b in zip(ours, hf)]
    print(f"posym loop : {o:.2f} steps/s, {oc:.3f} CPU s/step (median of {a.rounds})")
    print(f"HF Trainer : {h:.2f} steps/s, {hc:.3f} CPU s/step (median of {a.rounds})")
    print(f"ratio      : {o / h:.2f}x wall, {hc / oc:.2f}x CPU (per-round CPU ratios "
          f"{min(cpu_ratios):.2f}-{max(cpu_ratios):.2f})")
    if a.profile:
        print(profile_steps(x, y))


if __name__ == "__main__":
    main()
