"""Training configuration: presets of SPEC §2 plus our ``quick`` preset."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from posym.errors import PosymError

TASKS = ("number", "letter")
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class TrainConfig:
    """Everything that determines a training run (stored in ``RUN/posym.json``)."""

    task: str
    preset: str = "quick"
    seed: int = 0  # init seed
    data_seed: int = 0  # dataset generation seed (SPEC §1.3 splits derive from it)
    order_seed: int = 0  # shuffling order of training samples
    steps: int = 6750
    batch_size: int = 64
    lr: float = 1e-4
    betas: tuple[float, float] = (0.95, 0.999)
    weight_decay: float = 1e-4
    eps: float = 1e-8
    warmup: int = 750
    max_grad_norm: float = 1.0  # HF Trainer default, which the paper's runs used
    eval_every: int = 50
    eval_batch_size: int = 600
    n_val: int = 2400
    n_test: int = 45600
    checkpoint_every: int = 250
    checkpoint_extra_every: int | None = None  # denser checkpoints (e.g. 50) for offline analysis
    model_overrides: dict[str, Any] = field(default_factory=dict)
    track_heads: bool = True  # scores of every head at every evaluation step (SPEC §3) -> scores.csv
    track_prompts: int = 512  # the first P validation prompts
    track_taus: tuple[float, ...] = (1e-4,)
    # "bf16": torch.autocast(bfloat16) around the training forward + loss; weights, optimizer state,
    # evaluation and head scores stay float32. "fp32": no autocast.
    precision: str = "fp32"
    compile: bool = False  # torch.compile the training forward + loss (checkpoints hold the plain module)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["betas"] = list(self.betas)
        d["track_taus"] = list(self.track_taus)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key in ("betas", "track_taus"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)


# Training hyper-parameters per preset. "paper" is SPEC §2 exactly (one epoch of 432,000 / 64).
PRESET_TRAINING: dict[str, dict[str, Any]] = {
    "paper": dict(steps=6750, lr=1e-4, warmup=750, batch_size=64, eval_every=50),
    # Our choice: fewer layers, no dropout, a 10x larger learning rate, fewer steps (docs/reproduction.md).
    "quick": dict(steps=1500, lr=1e-3, warmup=150, batch_size=64, eval_every=50),
}


def make_config(task: str, preset: str = "quick", **kwargs: Any) -> TrainConfig:
    """Resolve a TrainConfig from a preset and explicit keyword overrides (None values ignored)."""
    if task not in TASKS:
        raise PosymError(f"unknown task {task!r}; choose one of {list(TASKS)}")
    if preset not in PRESET_TRAINING:
        raise PosymError(f"unknown preset {preset!r}; choose one of {sorted(PRESET_TRAINING)}")
    known = {f.name for f in fields(TrainConfig)}
    bad = sorted(k for k in kwargs if k not in known)
    if bad:
        raise PosymError(f"unknown training option(s): {', '.join(bad)}")
    cfg = TrainConfig(task=task, preset=preset, **PRESET_TRAINING[preset])
    cfg = replace(cfg, **{k: v for k, v in kwargs.items() if v is not None})
    if cfg.steps < 1 or cfg.batch_size < 1 or cfg.eval_every < 1:
        raise PosymError("steps, batch_size and eval_every must be positive")
    if cfg.precision not in PRECISIONS:
        raise PosymError(f"unknown precision {cfg.precision!r}; choose one of {list(PRECISIONS)}")
    from posym.model.gptj import model_config
    from posym.tasks import get_vocab

    model_config(preset, get_vocab(task).size, **cfg.model_overrides)  # validates the overrides early
    return cfg
