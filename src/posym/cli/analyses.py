"""The analyses of a trained model: ``select``, ``scores``, ``dynamics``, ``flow``, ``ablate``, ``freqs``,
``theory`` and ``lengthgen`` (Paper A §3–§5, SPEC §3–§4)."""

from __future__ import annotations

import argparse
from functools import partial

from posym.cli.common import (MODEL_HELP, STEP_HELP, SUPPRESS, TASK_CHOICES, TASK_HELP, OneLineParser, add_force,
                              add_intervene_args, add_launcher_options, add_swap_exclude, call, launcher_options, not_,
                              show, verb_default)
from posym.cli.types import (bounded_int, device_type, finite_float, gamma_type, grid_type, int_list, nonneg_int,
                             positive_float, positive_int, step_choice, str_list)


def _cmd_select(a: argparse.Namespace) -> None:
    from posym.verbs.select import select
    show(call(select, a, "run_dir", "out", names=("final_model", "device", "force", "task", "n_test")))


def _cmd_scores(a: argparse.Namespace) -> None:
    from posym.verbs.scores import scores_command
    show(call(scores_command, a, n_prompts="n", taus="tau",
              names=("run_dir", "model", "series", "out", "force", "task", "prompts", "text", "ids", "blocks",
                     "batch_size", "per_prompt", "steps", "seed", "device", "swap_exclude", "intervene", "layers")))


def _cmd_dynamics(a: argparse.Namespace) -> None:
    from posym.verbs.dynamics import dynamics
    show(call(dynamics, a, "run_dir", gammas="gamma", names=("tau", "layers", "out", "force")))


def _cmd_flow(a: argparse.Namespace) -> None:
    from posym.verbs.flow import flow
    show(call(flow, a, "run_dir", examples=("example", lambda e: [e]),
              names=("task", "split", "seed", "top_k", "min_weight", "step", "out", "force")))


def _cmd_ablate(a: argparse.Namespace) -> None:
    from posym.verbs.ablate import ablate
    show(call(ablate, a, "run_dir", names=("task", "n", "seed", "modes", "step", "out", "force", "heads", "readout")))


def _cmd_freqs(a: argparse.Namespace) -> None:
    from posym.verbs.freqs import freqs
    show(call(freqs, a, "path", layer_geometry="layer", scores=("no_scores", not_),
              names=("task", "n", "out", "step", "weighting", "force", "intervene", "layers")))


def _cmd_theory_discrepancy(a: argparse.Namespace) -> None:
    from posym.verbs.theory import discrepancy
    show(call(discrepancy, a, "out", runs="run", names=("theta_index", "theta_retrieval", "alphabet", "n_max", "grid",
                                                         "n", "seed", "task", "intervene", "lengths", "force")))


def _cmd_theory_restricted(a: argparse.Namespace) -> None:
    from posym.verbs.theory import restricted
    show(call(restricted, a, "out", names=("steps", "seed", "force")))


def _cmd_lengthgen(a: argparse.Namespace) -> None:
    from posym.verbs.lengthgen import lengthgen
    show(call(partial(lengthgen, **launcher_options(a)), a, "run_dir",
              names=("task", "grid", "n", "seeds", "data_seed", "out", "extra_rule", "step", "device",
                     "force", "resume", "intervene", "layers")))


def _model_parser(sub: argparse._SubParsersAction, name: str, help: str, positional: str = "run_dir",
                  **kwargs) -> argparse.ArgumentParser:
    """A verb on one model (:data:`MODEL_HELP`): the model and ``--task``; :func:`_step_out_force` ends it."""
    p = sub.add_parser(name, help=help, **kwargs)
    p.add_argument(positional, help=MODEL_HELP)
    p.add_argument("--task", default=SUPPRESS, choices=TASK_CHOICES, help=TASK_HELP)
    return p


def _step_out_force(p: argparse.ArgumentParser, out_help: str, intervene: bool = False) -> None:
    """``--step``, ``--out``, (``intervene``) ``--intervene``/``--layers`` and ``--force`` of a verb on one model."""
    p.add_argument("--step", type=step_choice, default=SUPPRESS, help=STEP_HELP)
    p.add_argument("--out", default=SUPPRESS, help=out_help)
    if intervene:
        add_intervene_args(p)
    add_force(p)


def _add_scores(sub: argparse._SubParsersAction) -> None:
    from posym.reading import HOW_TO_READ

    sc = sub.add_parser("scores", help="positional/symbolic scores of every head (SPEC §3, fast exact path)",
                        epilog=HOW_TO_READ, formatter_class=argparse.RawDescriptionHelpFormatter)
    sc.add_argument("run_dir", nargs="?", default=SUPPRESS, help="run directory: scores every checkpoint")
    sc.add_argument("--model", default=SUPPRESS,
                    help="an HF checkpoint of any supported RoPE family (docs/models.md) or a run directory")
    sc.add_argument("--series", nargs="+", default=SUPPRESS, metavar="DIR",
                    help="a checkpoint series: an HF Trainer output folder (its checkpoint-N/) or several model "
                         "folders (step = the last number in each name); one table with a step column")
    sc.add_argument("--task", default=SUPPRESS, choices=TASK_CHOICES,
                    help="token ids of SPEC §1 (needed for foreign checkpoints)")
    sc.add_argument("--prompts", default=SUPPRESS,
                    help="JSONL prompt file (posym data export); default: validation prompts")
    own = sc.add_mutually_exclusive_group()
    own.add_argument("--text", default=SUPPRESS, metavar="FILE",
                     help="score --model on your own texts: one per line, tokenized with the model's tokenizer")
    own.add_argument("--ids", default=SUPPRESS, metavar="FILE",
                     help="score --model on your own token ids (the model's tokenizer): one sequence per line, "
                          "a JSON list or ids separated by spaces; lengths may differ")
    sc.add_argument("--blocks", type=bounded_int(2, "blocks"), default=SUPPRESS,
                    help="with --text/--ids: swap N contiguous blocks (Paper B's LLM version) instead of tokens")
    sc.add_argument("--batch-size", type=positive_int, default=SUPPRESS,
                    help="with --text/--ids: sequences per forward (memory grows with batch x length^2)")
    sc.add_argument("--n", type=positive_int, default=SUPPRESS, help="validation prompts when --prompts is not given")
    sc.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed of the validation prompts")
    sc.add_argument("--tau", type=positive_float, action="append", default=SUPPRESS,
                    help="softmax temperature of the swap weights (repeatable)")
    sc.add_argument("--steps", type=int_list, default=SUPPRESS, help="only these checkpoint steps, e.g. 0,1000,6750")
    sc.add_argument("--per-prompt", action="store_true", default=SUPPRESS, help="one row per prompt instead of means")
    add_swap_exclude(sc, "key positions kept out of the swaps (their attention stays in the softmax): none = SPEC §3, "
                         "every key before the query (default for task prompts; with --text / --ids the default is "
                         "bos: a real LLM's first token is an attention sink, docs/llm.md); bos = position 0 (an "
                         "attention sink); first:K = positions 0..K-1; printed with the results")
    sc.add_argument("--device", type=device_type, default=SUPPRESS, help="cpu or cuda")
    sc.add_argument("--out", default=SUPPRESS, help="CSV file (default: RUN_DIR/scores.csv; ./runs/scores/<model name>/"
                    "scores.csv for --model FOLDER, never inside it; FOLDER/checkpoint_scores.csv for --series FOLDER; "
                    "needed for several --series folders)")
    add_intervene_args(sc)
    add_force(sc)
    sc.set_defaults(func=_cmd_scores)


def _add_theory(sub: argparse._SubParsersAction) -> None:
    th = sub.add_parser("theory", help="RoPE constructions, discrepancy (Fig. 5A), frequency-restricted heads")
    tsub = th.add_subparsers(dest="theory_verb", required=True, parser_class=OneLineParser)
    td = tsub.add_parser("discrepancy", help="Δ(n) of the Index and Retrieval constructions with Theorem 3.2 bounds")
    td.add_argument("--out", default="runs/theory", help="output directory")  # OWN_DEFAULTS: the verb's is required
    td.add_argument("--theta-index", type=finite_float, default=SUPPRESS)
    td.add_argument("--theta-retrieval", type=finite_float, default=SUPPRESS)
    td.add_argument("--alphabet", type=bounded_int(2, "alphabet"), default=SUPPRESS)
    td.add_argument("--n-max", type=bounded_int(2, "n-max"), default=SUPPRESS)
    td.add_argument("--run", action="append", default=SUPPRESS,
                    help="also measure Δ of every head of this model vs added tokens (repeatable): " + MODEL_HELP)
    td.add_argument("--task", default=SUPPRESS, choices=TASK_CHOICES,
                    help="task of a --run checkpoint posym did not write")
    td.add_argument("--grid", type=lambda s: int_list(s, 0), default=SUPPRESS,
                    help="added tokens for --run, e.g. 0,100,1000 (default 0,20,50,100,300,1000)")
    td.add_argument("--n", type=positive_int, default=SUPPRESS, help="prompts per added length for --run")
    td.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed for --run")
    add_intervene_args(td, layers=False, metavar="NAME:KEY=VALUE[,...]",
                       help="also Δ(n) and the weight on the correct key under this intervention, e.g. "
                            "temperature:beta=1, ntk:kappa=4, interpolate:n_train=17, freq-mask:keep=1+2 (repeatable; "
                            "writes discrepancy_interventions.csv + figure)")
    td.add_argument("--lengths", type=lambda s: int_list(s, 2), default=SUPPRESS,
                    help="lengths n for --intervene, e.g. 17,117,1017,5017 (default 17..5017, log-spaced)")
    add_force(td)
    td.set_defaults(func=_cmd_theory_discrepancy)
    tr = tsub.add_parser("restricted", help="train 1-layer toys on Index/Retrieval with each RoPE frequency band")
    tr.add_argument("--out", default="runs/theory", help="output directory")  # OWN_DEFAULTS: the verb's is required
    tr.add_argument("--steps", type=positive_int, default=SUPPRESS)
    tr.add_argument("--seed", type=nonneg_int, default=SUPPRESS)
    add_force(tr)
    tr.set_defaults(func=_cmd_theory_restricted)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    se = sub.add_parser("select", help="a finished run seen with another final model (e.g. the best checkpoint)")
    se.add_argument("run_dir", help="a finished posym run, or an HF Trainer output_dir (checkpoint-N/ folders)")
    se.add_argument("--task", default=SUPPRESS, choices=TASK_CHOICES, help=TASK_HELP)
    se.add_argument("--n-test", type=positive_int, default=SUPPRESS,
                    help="test prompts for an HF Trainer output_dir (default 45,600, SPEC §1.3)")
    se.add_argument("--final-model", default=SUPPRESS, choices=["best", "last"],
                    help="best: the first checkpoint with the best validation accuracy (HF load_best_model_at_end)")
    se.add_argument("--out", required=True, help="the derived run directory (analyses write there)")
    se.add_argument("--device", type=device_type, default=SUPPRESS)
    add_force(se, "replace a run derived earlier")
    se.set_defaults(func=_cmd_select)

    _add_scores(sub)

    d = sub.add_parser("dynamics", help="pure heads and Paper A Fig. 2 from a run's scores.csv (SPEC §3)")
    d.add_argument("run_dir")
    verb_default(d.add_argument("--gamma", type=gamma_type, action="append", default=SUPPRESS,
                                help="purity tolerance in (0, 0.5) (repeatable; %(verb_default)s)"),
                 "posym.verbs.dynamics:dynamics", "gammas", lambda v: ", ".join(map(str, v)))
    d.add_argument("--tau", type=positive_float, default=SUPPRESS, help="τ of the scores to use (default: smallest)")
    d.add_argument("--layers", type=int_list, default=SUPPRESS,
                   help="layers drawn in panel B, every head of each (default: all), e.g. 0,3,4,11")
    d.add_argument("--out", default=SUPPRESS, help="output directory (default: the run directory)")
    add_force(d)
    d.set_defaults(func=_cmd_dynamics)

    f = _model_parser(sub, "flow", "attention flow of one prompt with the hop chain (Paper A Fig. 3)")
    f.add_argument("--example", type=nonneg_int, default=0, help="index of the prompt in the split")  # OWN_DEFAULTS
    f.add_argument("--split", default=SUPPRESS, choices=["train", "val", "test"])
    f.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed")
    f.add_argument("--top-k", type=positive_int, default=SUPPRESS)
    f.add_argument("--min-weight", type=finite_float, default=SUPPRESS)
    _step_out_force(f, "output directory (default: the run directory; figures/ inside)")
    f.set_defaults(func=_cmd_flow)

    a = _model_parser(sub, "ablate", "zero/mean-ablate each head; test accuracy per hop (Paper A Fig. 3)")
    a.add_argument("--n", type=positive_int, default=SUPPRESS, help="test prompts")
    a.add_argument("--seed", type=nonneg_int, default=SUPPRESS)
    a.add_argument("--modes", type=str_list(("zero", "mean")), default=SUPPRESS)
    a.add_argument("--heads", default=SUPPRESS, metavar="SEL",
                   help="ablate a head set together: L3H1+L5H0, a type (positional, symbolic, induction, ...) or "
                        "random:TYPE[,seed=S], its matched random control (needs --out)")
    a.add_argument("--readout", default=SUPPRESS, metavar="FILE",
                   help="head readout of the same model that --heads TYPE is read from (head_types.csv or scores.csv)")
    _step_out_force(a, "output directory (default: the run directory)")
    a.set_defaults(func=_cmd_ablate)

    fq = _model_parser(sub, "freqs", "RoPE frequency use per layer/head, Table 1, Fig. 8 and Fig. 4B (SPEC §4)", "path")
    fq.add_argument("--n", type=positive_int, default=SUPPRESS, help="test prompts")
    fq.add_argument("--layer", type=nonneg_int, default=SUPPRESS,
                    help="layer of the q/k geometry figure (default: lowest ID)")
    fq.add_argument("--weighting", default=SUPPRESS, choices=["max_abs", "centered"])
    fq.add_argument("--no-scores", action="store_true", default=SUPPRESS,
                    help="skip per-frequency positional/symbolic scores")
    _step_out_force(fq, "output directory (default: the given path)", intervene=True)
    fq.set_defaults(func=_cmd_freqs)

    _add_theory(sub)

    lg = _model_parser(sub, "lengthgen", "accuracy vs added target-window tokens (SPEC §1.4, Fig. 5B)")
    lg.add_argument("--grid", type=grid_type, default=SUPPRESS,
                    help="'paper' (0,10..100,200..1000,1500..5000) or e.g. 0,200,1000")
    lg.add_argument("--n", type=positive_int, default=SUPPRESS, help="samples per added length and seed")
    lg.add_argument("--seeds", type=positive_int, default=SUPPRESS, help="data seeds (spread reported as sd)")
    lg.add_argument("--data-seed", type=nonneg_int, default=SUPPRESS, metavar="K",
                    help="only data seed K (what one Slurm job of a several-seed lengthgen measures)")
    lg.add_argument("--device", type=device_type, default=SUPPRESS)
    lg.add_argument("--extra-rule", default=SUPPRESS, choices=["window", "distractor", "copies"],
                    help="what the added tokens are (SPEC §1.4, our choice): target-window-like filler (default), "
                         "pre-target-like distractors, or copies of non-answer target-window tokens")
    lg.add_argument("--resume", action="store_true", default=SUPPRESS,
                    help="keep the points of an existing table measured the same way, evaluate the rest, "
                         "and save after each point (extends a grid; an interrupted run loses nothing)")
    _step_out_force(lg, "CSV file (default: DIR/lengthgen.csv)", intervene=True)
    add_launcher_options(lg, launcher_help="local: this process (default); slurm: one sbatch job per data seed, "
                                           "then one that writes the table (docs/cluster.md)")
    lg.set_defaults(func=_cmd_lengthgen)
