"""Overhead of the HF Trainer callback at the paper configuration, side by side.

Trains the paper GPT-J (SPEC §2) on number-task batches with HF ``Trainer`` as the authors' script
did (batch 64, AdamW 0.95/0.999, wd 1e-4, warmup 750, evaluation every 50 steps) twice in one
process: without and with ``PositionalSymbolicCallback("number")`` (512 validation prompts scored at
every evaluation, as posym's built-in tracking). Reports the wall time of each run, the time spent
inside the callback and the overhead = callback time / training time without it (target < 10 %).

    python benchmarks/callback_overhead.py [--steps 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from machine import machine_line
from posym.integrations import PositionalSymbolicCallback
from posym.model import build_model, model_config
from posym.tasks import get_vocab, make_split


class _DS(torch.utils.data.Dataset):
    """Sequences of 17 inputs + the answer; labels -100 except the answer (the authors' layout)."""

    def __init__(self, split: str, n: int):
        b = make_split("number", split, n=n)
        x, y = torch.from_numpy(b.input_ids), torch.from_numpy(b.labels)
        self.seq = torch.cat([x, y[:, None]], dim=1)
        self.labels = torch.full_like(self.seq, -100)
        self.labels[:, -1] = y

    def __len__(self):
        return len(self.seq)

    def __getitem__(self, i):
        return {"input_ids": self.seq[i], "labels": self.labels[i]}


class _TimedCallback(PositionalSymbolicCallback):
    seconds = 0.0

    def _score(self, args, state, model):
        t0 = time.perf_counter()
        super()._score(args, state, model)
        self.seconds += time.perf_counter() - t0


def run(steps: int, n_eval: int, callback: _TimedCallback | None) -> float:
    from transformers import Trainer, TrainingArguments, logging

    logging.set_verbosity_error()
    model = build_model(model_config("paper", get_vocab("number").size), seed=0)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=64, per_device_eval_batch_size=600,
                                 learning_rate=1e-4, adam_beta1=0.95, adam_beta2=0.999, weight_decay=1e-4,
                                 warmup_steps=750, lr_scheduler_type="linear", max_steps=steps, logging_steps=50,
                                 eval_strategy="steps", eval_steps=50, save_strategy="no", report_to=[],
                                 use_cpu=True, dataloader_num_workers=0, disable_tqdm=True, seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=_DS("train", 64 * steps),
                          eval_dataset=_DS("val", n_eval), callbacks=[callback] if callback else [])
        t0 = time.perf_counter()
        trainer.train()
        return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prompts", type=int, default=512, help="prompts the callback scores")
    ap.add_argument("--n-eval", type=int, default=2400, help="validation samples of the Trainer's own evaluation")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(machine_line(), flush=True)
    plain = run(a.steps, a.n_eval, None)
    cb = _TimedCallback("number", n=a.prompts, at_start=False)
    tracked = run(a.steps, a.n_eval, cb)
    print(f"threads={torch.get_num_threads()} torch={torch.__version__}; {a.steps} steps, evaluation every 50")
    print(f"without the callback: {plain:.1f} s; with it: {tracked:.1f} s; inside the callback: {cb.seconds:.1f} s")
    print(f"overhead: {100 * cb.seconds / plain:.1f} % of training time (wall-time difference "
          f"{100 * (tracked - plain) / plain:+.1f} %)")


if __name__ == "__main__":
    main()
