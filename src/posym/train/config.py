"""Training configuration: :class:`TrainConfig` and its resolution from a preset (:mod:`posym.presets`; SPEC §2)."""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from posym import presets
from posym.checks import check_positive_int
from posym.constants import TASKS
from posym.errors import PosymError

PRECISIONS = ("fp32", "bf16", "fp16")
#: Which model a finished run stands for (SPEC §2): the last step, or the authors' HF
#: ``load_best_model_at_end``: the *first* evaluation step reaching the maximal validation accuracy.
FINAL_MODELS = ("last", "best")
#: Optional loggers of a run's training values (``RUN/tensorboard/`` event files for TensorBoard).
LOGGERS = ("tensorboard",)
#: ``posym train --cuda-graph``: capture the training step as one CUDA graph (``posym.train.graphs``):
#: never ("off", the default), where possible ("auto": else eager, with a note) or always ("on": else refused).
CUDA_GRAPH_MODES = ("off", "auto", "on")
#: Upper bound on optimizer steps: a sanity bound (the evaluation and checkpoint schedules are sets of steps).
MAX_STEPS = 100_000_000
#: Upper bound (exclusive) on the init seed: torch seeds are 64-bit signed, and the dropout stream is
#: seeded from it plus an offset per rank.
MAX_SEED = 2**62


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
    # evaluation and head scores stay float32. "fp16": float16 autocast plus dynamic loss scaling
    # (torch.amp.GradScaler), as HF Trainer's fp16=True (the authors' setting on CUDA). "fp32": none.
    precision: str = "fp32"
    compile: bool = False  # torch.compile the training forward + loss (checkpoints hold the plain module)
    # letter-task distractor right letters (SPEC §1.2): "pool" (the authors' rule) or "uniform" (ablation)
    distractors: str = "pool"
    # "last" or "best" (SPEC §2, load_best_model_at_end): the model that test accuracy and every analysis use
    final_model: str = "last"
    # epochs over the 432,000 training samples; when set, steps = round(epochs * (432,000 // batch_size))
    epochs: float | None = None
    # extra loggers (LOGGERS): "tensorboard" writes loss, accuracy per hop and head-score summaries
    log: tuple[str, ...] = ()
    # training-time positional encoding (SPEC §2.1, posym.model.pe): rope, nope, p-rope:F, rope-base:θ,
    # randomized:L, ssmax[:N]; stored canonical (ssmax gets the task's training length as N)
    pe: str = "rope"
    # model family (posym.model.arch.ARCHS): "gptj" (the paper's model) or llama, qwen3, gemma3, gpt-neox
    # at the preset's shape (docs/models.md); runs written before the field existed are GPT-J
    arch: str = "gptj"
    # CUDA_GRAPH_MODES: the training step as one CUDA graph (posym.train.graphs); stored only when not "off",
    # so a run without it writes the posym.json it always wrote
    cuda_graph: str = "off"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if d["cuda_graph"] == "off":
            del d["cuda_graph"]
        d["betas"] = list(self.betas)
        d["track_taus"] = list(self.track_taus)
        d["log"] = list(self.log)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TrainConfig":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key, value in kw.items():
            _check_type(key, value, _FIELD_TYPES[key])
        for key in ("betas", "track_taus", "log"):
            if key in kw:
                kw[key] = tuple(kw[key])
        # runs written before the field existed were trained on posym's old letter data
        kw.setdefault("distractors", "uniform")
        return cls(**kw)


def _check_type(key: str, value: Any, kind: Any) -> None:
    """ValueError naming ``config.<key>`` when a stored value is not of its field's type."""
    args = typing.get_args(kind)
    if type(None) in args:  # X | None
        if value is None:
            return
        kind = next(a for a in args if a is not type(None))
    origin = typing.get_origin(kind) or kind
    if origin is bool:
        ok = isinstance(value, bool)
    elif origin is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif origin is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif origin is tuple:
        ok = isinstance(value, (list, tuple))
    else:
        ok = isinstance(value, origin)
    if not ok:
        name = {bool: "true or false", int: "an integer", float: "a number", tuple: "a list", str: "a string",
                dict: "a JSON object"}.get(origin, getattr(origin, "__name__", str(origin)))
        raise ValueError(f"config.{key} must be {name}, got {value!r}")


#: Training hyper-parameters per preset: the ``train`` sections of :data:`posym.presets.PRESETS` ("paper" is
#: SPEC §2 exactly, one epoch of 432,000 / 64; "authors" the authors' HF Trainer run).
PRESET_TRAINING: dict[str, dict[str, Any]] = presets.section("train")


_FIELD_TYPES: dict[str, Any] = typing.get_type_hints(TrainConfig)


def steps_for_epochs(epochs: float, batch_size: int) -> int:
    """Optimizer steps of ``epochs`` passes over the training split (drop-last batches, as the loop).

    SPEC §2: 1 epoch at batch 64 and 3 epochs (HF's default) at a global batch of 192 both give 6,750.
    """
    from posym.tasks.dataset import SPLIT_SIZES

    return max(1, round(epochs * (SPLIT_SIZES["train"] // batch_size)))


def make_config(task: str, preset: str = "quick", **kwargs: Any) -> TrainConfig:
    """Resolve a TrainConfig from a preset and explicit keyword overrides (None values ignored), SPEC §2.

    ``arch`` picks the model family (:data:`posym.model.arch.ARCHS`, default ``"gptj"``); a ``pe`` or a
    ``model_overrides`` key the family cannot take is a one-line PosymError here, before any work."""
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
    if cfg.batch_size < 1 or cfg.eval_every < 1:
        raise PosymError("batch_size and eval_every must be positive")
    if cfg.epochs is not None:
        if not cfg.epochs > 0:
            raise PosymError(f"epochs must be positive, got {cfg.epochs}")
        if kwargs.get("steps") is not None:
            raise PosymError("give either steps or epochs, not both")
        cfg = replace(cfg, steps=steps_for_epochs(cfg.epochs, cfg.batch_size))
    if cfg.steps < 1:
        raise PosymError("steps must be positive")
    if cfg.steps > MAX_STEPS:
        raise PosymError(f"steps={cfg.steps} exceeds {MAX_STEPS:,} (at the paper preset's ≈ 5 steps/s on a CPU "
                         f"that is over {MAX_STEPS // 5 // 86400:,} days); give a smaller --steps")
    if cfg.track_prompts < 1 or cfg.n_val < 1:
        raise PosymError("track_prompts and n_val must be positive")
    check_positive_int(cfg.n_test, "n_test")  # the final test evaluation's sequences (SPEC §1.3)
    if cfg.precision not in PRECISIONS:
        raise PosymError(f"unknown precision {cfg.precision!r}; choose one of {list(PRECISIONS)}")
    if isinstance(cfg.log, str):
        cfg = replace(cfg, log=(cfg.log,))
    bad_log = [x for x in cfg.log if x not in LOGGERS]
    if bad_log:
        raise PosymError(f"unknown logger(s) {', '.join(map(str, bad_log))}; choose from {', '.join(LOGGERS)}")
    cfg = replace(cfg, log=tuple(dict.fromkeys(cfg.log)))
    if cfg.cuda_graph not in CUDA_GRAPH_MODES:
        raise PosymError(f"unknown cuda_graph {cfg.cuda_graph!r}; choose one of {list(CUDA_GRAPH_MODES)}")
    if cfg.final_model not in FINAL_MODELS:
        raise PosymError(f"unknown final_model {cfg.final_model!r}; choose one of {list(FINAL_MODELS)}")
    from posym.tasks._common import DISTRACTOR_RULES

    if cfg.distractors not in DISTRACTOR_RULES:
        raise PosymError(f"unknown distractor rule {cfg.distractors!r}; choose one of {list(DISTRACTOR_RULES)}")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or not 0 <= cfg.seed < MAX_SEED:
        raise PosymError(f"seed must be an integer in [0, 2**62), got {cfg.seed!r}")
    from posym.model.arch import arch_config, check_arch, check_arch_pe
    from posym.model.pe import complete_pe
    from posym.tasks import get_vocab

    check_arch(cfg.arch)
    check_arch_pe(cfg.arch, cfg.pe)  # a --pe the family cannot train exactly: refused before anything else
    cfg = replace(cfg, pe=complete_pe(cfg.pe, train_seq_len(task)).name)
    if not isinstance(cfg.model_overrides, dict):
        raise PosymError(f"model_overrides must be a JSON object of model fields, got {cfg.model_overrides!r}")
    check_model_overrides(task, cfg.model_overrides)
    # validates the overrides early (for another arch: only the GPT-J fields it maps, SPEC §2)
    arch_config(cfg.arch, preset, get_vocab(task).size, pe=cfg.pe, **cfg.model_overrides)
    return cfg


def train_seq_len(task: str) -> int:
    """Input tokens of a training sample of ``task`` (SPEC §1.1, query last): the positions a model needs."""
    from posym.tasks import make_split

    return make_split(task, "val", 0, 1).seq_len


def check_model_overrides(task: str, overrides: dict[str, Any]) -> None:
    """PosymError naming a model override that transformers would reject only later (or by a traceback):
    an unknown ``activation_function``, a ``layer_norm_epsilon`` / ``initializer_range`` that is not a
    finite positive number, and ``n_positions`` shorter than the task's training sequences."""
    import math

    if "activation_function" in overrides:
        from transformers.activations import ACT2FN

        act = overrides["activation_function"]
        if not isinstance(act, str) or act not in ACT2FN:
            raise PosymError(f"unknown activation_function {act!r}; choose e.g. gelu_new (GPT-J's), gelu, relu, silu")
    for key in ("layer_norm_epsilon", "initializer_range"):
        if key in overrides:
            v = overrides[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf:
                raise PosymError(f"{key} must be a finite positive number, got {v!r}")
    n_pos = overrides.get("n_positions")
    if isinstance(n_pos, int) and not isinstance(n_pos, bool) and n_pos >= 1:
        need = train_seq_len(task)
        if n_pos < need:
            raise PosymError(f"n_positions={n_pos} is shorter than the {task} task's training sequences "
                             f"({need} tokens); give n_positions >= {need}")
