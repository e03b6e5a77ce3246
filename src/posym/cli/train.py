"""``posym train``: GPT-J (or ``--arch``: another HF family) on one task (SPEC §2)."""

from __future__ import annotations

import argparse

from posym.cli.common import SUPPRESS, TASK_CHOICES, add_quiet, call, not_, show, verb_default
from posym.cli.types import arch_type, device_type, key_value, nonneg_int, pe_type, positive_float, positive_int, \
    threads_type

#: The TrainConfig fields ``posym train`` takes as options (beside ``--set``: ``model_overrides``).
CONFIG_OPTIONS = ("preset", "seed", "data_seed", "order_seed", "steps", "eval_every", "checkpoint_every",
                  "checkpoint_extra_every", "track_heads", "track_prompts", "precision", "compile", "batch_size",
                  "epochs", "final_model", "distractors", "pe", "arch", "n_test", "cuda_graph")
CONFIG = "posym.verbs.train:TrainConfig"


def _seeds_type(text: str) -> tuple[int, ...]:
    """A ``--seeds`` value (:func:`posym.verbs.train.seed_list`); one-line error otherwise."""
    from posym.errors import PosymError
    from posym.verbs.train import seed_list

    try:
        return seed_list(text)
    except PosymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_train(a: argparse.Namespace) -> None:
    from posym.verbs.train import train_task
    show(call(train_task, a, "task", "out", names=(*CONFIG_OPTIONS, "seeds", "resume", "force", "device", "threads"),
              model_overrides="set", log=("log", tuple), progress=("quiet", not_)))


def add_parsers(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train GPT-J (or --arch: Llama, Qwen3, Gemma-3, GPT-NeoX) on a task (SPEC §2)")
    t.add_argument("--task", required=True, choices=TASK_CHOICES)
    t.add_argument("--preset", default=SUPPRESS, choices=["quick", "paper", "authors"],
                   help="quick (minutes on a CPU), paper (SPEC §2) or authors (paper + batch 192 + best checkpoint)")
    t.add_argument("--out", required=True, help="run directory (e.g. runs/NAME)")
    one_or_many = t.add_mutually_exclusive_group()
    one_or_many.add_argument("--seed", type=nonneg_int, default=SUPPRESS,
                             help="init seed; also data and order seed unless given")
    one_or_many.add_argument("--seeds", type=_seeds_type, default=SUPPRESS, metavar="K|S,S,...",
                             help="train seeds 0..K-1 (or the listed ones) as one batched model into OUT/seed{k}/, "
                                  "each equal to --seed k alone (docs/runs.md)")
    t.add_argument("--data-seed", type=nonneg_int, default=SUPPRESS)
    t.add_argument("--order-seed", type=nonneg_int, default=SUPPRESS)
    t.add_argument("--device", type=device_type, default=SUPPRESS, help="cpu or cuda")
    t.add_argument("--steps", type=positive_int, default=SUPPRESS, help="optimizer steps (default: the preset's)")
    verb_default(t.add_argument("--eval-every", type=positive_int, default=SUPPRESS,
                                help="evaluate every N steps (default %(verb_default)s)"), CONFIG)
    verb_default(t.add_argument("--checkpoint-every", type=positive_int, default=SUPPRESS,
                                help="keep a checkpoint every N steps (default %(verb_default)s)"), CONFIG)
    t.add_argument("--checkpoint-extra-every", type=positive_int, default=SUPPRESS, help="additional denser checkpoints")
    t.add_argument("--set", action="append", type=key_value, default=SUPPRESS, metavar="KEY=VALUE",
                   help="override a GPTJConfig field (repeatable; another --arch maps n_layer, n_head, n_embd, "
                        "n_inner, rotary_dim, n_positions, the dropouts, layer_norm_epsilon, initializer_range)")
    t.add_argument("--track-heads", action=argparse.BooleanOptionalAction, default=SUPPRESS,
                   help="score every head at each evaluation step into scores.csv (default: on)")
    verb_default(t.add_argument("--track-prompts", type=positive_int, default=SUPPRESS,
                                help="validation prompts scored when tracking (%(verb_default)s)"), CONFIG)
    verb_default(t.add_argument("--batch-size", type=positive_int, default=SUPPRESS,
                                help="global batch (default %(verb_default)s; the authors' 3-GPU DataParallel run: 192)"),
                 CONFIG)
    t.add_argument("--epochs", type=positive_float, default=SUPPRESS,
                   help="passes over the 432,000 training samples instead of --steps (3 at batch 192 = 6,750 steps)")
    verb_default(t.add_argument("--n-test", type=positive_int, default=SUPPRESS, metavar="N",
                                help="sequences of the final test evaluation (default %(verb_default)s, SPEC §1.3's "
                                     "test split; a few hundred suffice for a quick run)"), CONFIG, show="{:,}".format)
    t.add_argument("--final-model", default=SUPPRESS, choices=["last", "best"],
                   help="the model test accuracy and analyses use: last step (default) or the first "
                        "checkpoint with the best validation accuracy (HF load_best_model_at_end)")
    t.add_argument("--log", action="append", default=SUPPRESS, choices=["tensorboard"],
                   help="also log loss, accuracy per hop and head scores: tensorboard -> RUN/tensorboard/ "
                        "(needs the [tensorboard] extra)")
    t.add_argument("--distractors", default=SUPPRESS, choices=["pool", "uniform"],
                   help="letter task: distractor right letters from the non-chain pool (default, the authors') "
                        "or uniform over a..h (posym's old data, for ablations)")
    t.add_argument("--precision", default=SUPPRESS, choices=["fp32", "bf16", "fp16"],
                   help="fp32 (default), bf16 autocast, or fp16 autocast + loss scaling (HF fp16=True) of the "
                        "training forward (weights, scores stay fp32)")
    t.add_argument("--compile", action=argparse.BooleanOptionalAction, default=SUPPRESS,
                   help="torch.compile the training forward (default: off)")
    t.add_argument("--cuda-graph", default=SUPPRESS, choices=["off", "auto", "on"],
                   help="capture the training step as one CUDA graph (docs/benchmarks.md#cuda-graphs): off (default), "
                        "auto (where possible, else eager with a note) or on (refused where impossible)")
    t.add_argument("--pe", type=pe_type, default=SUPPRESS, metavar="PE",
                   help="positional encoding (docs/spec.md §2.1): rope (default), nope, p-rope:F, rope-base:THETA, "
                        "randomized:L, ssmax")
    t.add_argument("--arch", type=arch_type, default=SUPPRESS, metavar="ARCH",
                   help="model family at the preset's shape (docs/models.md): gptj (default, the paper's), llama, "
                        "qwen3, gemma3, gpt-neox; --pe other than rope / rope-base is GPT-J's only")
    t.add_argument("--threads", type=threads_type, default=SUPPRESS, help="torch CPU threads")
    t.add_argument("--resume", action="store_true", default=SUPPRESS, help="continue an interrupted run")
    t.add_argument("--force", action="store_true", default=SUPPRESS,
                   help="replace an existing run directory (posym runs only)")
    add_quiet(t)
    t.set_defaults(func=_cmd_train)
