"""Learning-rate and checkpoint schedules (SPEC §2; docs/architecture.md "train/")."""

from __future__ import annotations


def linear_warmup_decay(step: int, warmup: int, total: int) -> float:
    """LR multiplier: linear warmup over ``warmup`` steps, then linear decay to 0 at ``total``.

    Identical to ``transformers.get_linear_schedule_with_warmup`` (the paper's Trainer schedule).
    """
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def checkpoint_steps(total: int, every: int = 250, log_max: int = 512, extra_every: int | None = None) -> list[int]:
    """Steps at which a checkpoint is kept: 0, 1, 2, 4, ..., ``log_max``; every ``every`` steps;
    every ``extra_every`` steps if given; and ``total``. Sorted, unique, all <= total."""
    steps = {0, total}
    s = 1
    while s <= min(log_max, total):
        steps.add(s)
        s *= 2
    for period in (every, extra_every):
        if period:
            steps.update(range(0, total + 1, period))
    return sorted(x for x in steps if x <= total)


def eval_steps(total: int, every: int) -> list[int]:
    """Evaluation steps: 0, every, 2*every, ..., and the final step."""
    return sorted(set(range(0, total + 1, every)) | {total})
