"""``posym`` command line: argparse only. Each command calls one verb of :mod:`posym.verbs` and
prints what it returns.

Every bad value is refused at the edge by an argparse type (one line ``posym: error: …``, exit 2);
user errors raised by the API (``PosymError``) and the expected file-system failures (an unwritable
or read-only path, a file where a folder is needed, a full disk) print one line and exit 2 as well.
An unexpected exception still prints its traceback, so bugs stay visible.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import sys
import warnings
from typing import Any, Callable, Sequence

from posym.errors import PosymError
from posym.resources import QUICK_REPRODUCTION_TIME

TASK_CHOICES = ("number", "letter")


# ------------------------------------------------------------------------------------------------
# argparse types (one home for every list / number rule)
# ------------------------------------------------------------------------------------------------
def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _bounded_int(lo: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        v = _int(text)
        if v < lo:
            raise argparse.ArgumentTypeError(f"{what} must be >= {lo}, got {v}")
        return v
    parse.__name__ = what.replace(" ", "_")
    return parse


positive_int = _bounded_int(1, "a count")
nonneg_int = _bounded_int(0, "a non-negative integer")
threads_type = _bounded_int(1, "threads")


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {text!r}")
    return v


def finite_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def gamma_type(text: str) -> float:
    """A purity tolerance γ in (0, 0.5) (SPEC §3; the rule's one home is :func:`posym.checks.check_gamma`)."""
    from posym.checks import check_gamma

    try:
        return check_gamma(finite_float(text))
    except PosymError:
        raise argparse.ArgumentTypeError(f"gamma must lie in (0, 0.5), got {text}") from None


def int_list(text: str, lo: int = 0) -> list[int]:
    """Comma-separated integers >= ``lo`` (e.g. ``0,1000,6750``); empty items are an error."""
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    bad = [v for v in values if v < lo]
    if bad:
        raise argparse.ArgumentTypeError(f"values must be >= {lo}, got {bad[0]}")
    return values


def positive_int_list(text: str) -> list[int]:
    return int_list(text, lo=1)


def str_list(choices: Sequence[str] | None = None) -> Callable[[str], list[str]]:
    """Comma-separated names (each one of ``choices`` when given); empty lists are an error."""
    def parse(text: str) -> list[str]:
        items = [x.strip() for x in text.split(",")]
        if not text.strip() or any(not x for x in items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of names, got {text!r}")
        bad = [x for x in items if choices is not None and x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; choose from {', '.join(choices)}")
        return items
    parse.__name__ = "list"
    return parse


def grid_type(text: str) -> str | list[int]:
    """``paper`` or comma-separated added lengths >= 0."""
    return "paper" if text == "paper" else int_list(text, lo=0)


def step_choice(text: str) -> int | str:
    """A checkpoint step (>= 0), ``last`` or ``best`` (SPEC §2)."""
    if text in ("last", "best"):
        return text
    v = _int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"a step must be >= 0, got {v}")
    return v


def device_type(text: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N`` (``mps`` on Apple silicon)."""
    if text in ("cpu", "cuda", "mps") or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")


def key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` with a JSON value when it parses (``n_layer=4``, ``rotary_dim=null``), else a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE (e.g. n_layer=4), got {text!r}")
    try:
        return key.strip(), json.loads(raw)
    except json.JSONDecodeError:
        return key.strip(), raw


def pe_type(text: str) -> str:
    """A ``--pe`` value (SPEC §2.1) in its canonical form; one-line error otherwise."""
    from posym.model.pe import parse_pe

    try:
        return parse_pe(text).name
    except PosymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def arch_type(text: str) -> str:
    """An ``--arch`` value (:data:`posym.model.arch.ARCHS`); one-line error listing them otherwise."""
    from posym.model.arch import check_arch

    try:
        return check_arch(text.strip().lower())
    except PosymError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


STEP_HELP = ("checkpoint of a run or HF Trainer output_dir: a step, 'last' or 'best' (default: the model the run "
             "stands for; an output_dir's saved model, else its newest checkpoint-N/)")
#: What every analysis verb takes (posym.runs.resolve.resolve_model; docs/models.md).
MODEL_HELP = ("a posym run, an HF Trainer output_dir, one checkpoint-N/ or a model folder of any RoPE family posym "
              "reads (--task where the folder does not say it)")
TASK_HELP = "task of a folder that does not say its own (an HF Trainer output_dir, a model folder)"


def _add_intervene_args(parser: argparse.ArgumentParser) -> None:
    """``--intervene SPEC`` (repeatable) and ``--layers L[,L…]`` of every measuring verb
    (docs/interventions.md); the verb parses and checks them (posym.interventions.plan_interventions)
    before any work, so building the parser imports no torch."""
    parser.add_argument("--intervene", action="append", default=None, metavar="SPEC",
                        help="measure under an inference-time intervention, e.g. temperature:beta=1, ntk:kappa=4, "
                             "interpolate:n_train=17, freq-mask:keep=1+2+3, none (repeatable: one measurement "
                             "each; the tables' intervention column; docs/interventions.md)")
    parser.add_argument("--layers", type=int_list, default=None, metavar="L[,L...]",
                        help="layers the temperature / freq-mask interventions act on (default: all)")


def _reading():
    """``posym.heads.reading`` (HOW_TO_READ, MIN_MASS) loaded from its file, so that building the
    parser does not import ``posym.heads`` (torch): the module imports nothing."""
    import importlib.util
    from pathlib import Path

    import posym

    if "posym.heads.reading" in sys.modules:
        return sys.modules["posym.heads.reading"]
    spec = importlib.util.spec_from_file_location("_posym_reading", Path(posym.__file__).parent / "heads" / "reading.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``posym: error: <verb>: <message>`` and exit status 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        verb = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        self.exit(2, f"posym: error: {verb + ': ' if verb else ''}{message}\n")


# ------------------------------------------------------------------------------------------------
# commands: one verb call and a print each
# ------------------------------------------------------------------------------------------------
def _show(res) -> None:
    if res.summary:
        print(res.summary)


def _cmd_data_export(a):
    from posym.verbs.data import export
    _show(export(a.task, a.split, a.n, a.out, seed=a.seed, extra_tokens=a.extra_tokens, ids=a.ids, force=a.force))


def _cmd_data_show(a):
    from posym.verbs.data import show
    _show(show(a.task, a.split, a.n, seed=a.seed, extra_tokens=a.extra_tokens))


def _cmd_train(a):
    from posym.train import make_config
    from posym.verbs.train import train

    overrides = dict(a.set or [])
    cfg = make_config(a.task, a.preset, seed=a.seed, data_seed=a.data_seed if a.data_seed is not None else a.seed,
                      order_seed=a.order_seed if a.order_seed is not None else a.seed, steps=a.steps,
                      eval_every=a.eval_every, checkpoint_every=a.checkpoint_every,
                      checkpoint_extra_every=a.checkpoint_extra_every, model_overrides=overrides or None,
                      track_heads=a.track_heads, track_prompts=a.track_prompts, precision=a.precision,
                      compile=a.compile, batch_size=a.batch_size, epochs=a.epochs, final_model=a.final_model,
                      distractors=a.distractors, log=tuple(a.log) if a.log else None, pe=a.pe, arch=a.arch)
    if a.resume and not a.force:  # with --force: only the error
        given = [f"--{name.replace('_', '-')} {_shown(value)}".rstrip() for name, value in (
            ("set", a.set), ("steps", a.steps), ("precision", a.precision), ("compile", a.compile),
            ("batch_size", a.batch_size), ("epochs", a.epochs), ("final_model", a.final_model),
            ("distractors", a.distractors), ("log", a.log), ("pe", a.pe), ("arch", a.arch)) if value is not None]
        if given:
            print("posym: note: --resume continues with the run's stored configuration; ignored: "
                  + ", ".join(given), file=sys.stderr)
    result = train(cfg, a.out, resume=a.resume, force=a.force, device=a.device, threads=a.threads,
                   progress=not a.quiet)
    from posym.train.distributed import is_main

    if is_main():  # under torchrun only rank 0 reports
        print(result.summary)


def _shown(value) -> str:
    """An option's value as typed (``--set`` pairs as ``k=v``; a flag as nothing)."""
    if value is True:
        return ""
    if isinstance(value, (list, tuple)):
        return " ".join(f"{v[0]}={v[1]}" if isinstance(v, tuple) and len(v) == 2 else str(v) for v in value)
    return str(value)


def _cmd_select(a):
    from posym.verbs.select import select
    _show(select(a.run_dir, a.out, final_model=a.final_model, device=a.device, force=a.force, task=a.task,
                 n_test=a.n_test))


def _swap_exclude(parser, own_sequences: bool = False) -> None:
    """``--swap-exclude none|bos|first:K`` (posym.heads.swaps.parse_swap_exclude; docs/spec.md §3)."""
    default = ("none = SPEC §3, every key before the query (default for task prompts; with --text / --ids the "
               "default is bos: a real LLM's first token is an attention sink, docs/llm.md)") if own_sequences else \
        "none = SPEC §3, every key before the query (default)"
    parser.add_argument("--swap-exclude", default=None if own_sequences else "none", metavar="none|bos|first:K",
                        help=f"key positions kept out of the swaps (their attention stays in the softmax): {default}; "
                             "bos = position 0 (an attention sink); first:K = positions 0..K-1; printed with the results")


def _cmd_scores(a):
    from posym.verbs.scores import scores

    target = a.model or a.run_dir
    if sum(map(bool, (a.model, a.run_dir, a.series))) != 1:
        raise PosymError("give exactly one of RUN_DIR, --model MODEL_DIR or --series DIR [DIR ...]")
    if a.text or a.ids:  # the model's own sequences (docs/llm.md, "Scoring your own sequences")
        clash = [o for o, v in (("RUN_DIR", a.run_dir), ("--series", a.series), ("--task", a.task),
                                ("--prompts", a.prompts), ("--steps", a.steps)) if v]
        if not a.model or clash:
            raise PosymError(f"--text / --ids score one model: give --model MODEL{f', not {clash[0]}' if clash else ''}")
        _show(scores(a.model, out=a.out, force=a.force, text=a.text, ids=a.ids, blocks=a.blocks,
                     taus=a.tau or [1e-4], per_prompt=a.per_prompt, swap_exclude=a.swap_exclude or "bos",
                     batch_size=a.batch_size, device=a.device, intervene=a.intervene, layers=a.layers))
        return
    if a.blocks is not None:
        raise PosymError("--blocks applies to --text / --ids (task prompts are scored with token swaps)")
    _show(scores(target, series=a.series, out=a.out, force=a.force, task=a.task, prompts=a.prompts, n_prompts=a.n,
                 taus=a.tau or [1e-4], per_prompt=a.per_prompt, steps=a.steps, seed=a.seed, device=a.device,
                 swap_exclude=a.swap_exclude or "none", intervene=a.intervene, layers=a.layers))


def _cmd_dynamics(a):
    from posym.verbs.dynamics import dynamics
    _show(dynamics(a.run_dir, gammas=a.gamma or [0.1], tau=a.tau, layers=a.layers, out=a.out, force=a.force))


def _cmd_flow(a):
    from posym.verbs.flow import flow
    _show(flow(a.run_dir, examples=[a.example], task=a.task, split=a.split, seed=a.seed, top_k=a.top_k,
               min_weight=a.min_weight, step=a.step, out=a.out, force=a.force))


def _cmd_ablate(a):
    from posym.verbs.ablate import ablate
    _show(ablate(a.run_dir, task=a.task, n=a.n, seed=a.seed, modes=a.modes, step=a.step, out=a.out, force=a.force))


def _cmd_freqs(a):
    from posym.verbs.freqs import freqs
    _show(freqs(a.path, task=a.task, n=a.n, out=a.out, layer_geometry=a.layer, step=a.step, scores=not a.no_scores,
                weighting=a.weighting, force=a.force, intervene=a.intervene, layers=a.layers))


def _cmd_theory_discrepancy(a):
    from posym.verbs.theory import discrepancy
    _show(discrepancy(a.out, theta_index=a.theta_index, theta_retrieval=a.theta_retrieval, alphabet=a.alphabet,
                      n_max=a.n_max, runs=a.run or (), grid=a.grid, n=a.n, seed=a.seed, task=a.task,
                      intervene=a.intervene or (), lengths=a.lengths, force=a.force))


def _cmd_theory_restricted(a):
    from posym.verbs.theory import restricted
    _show(restricted(a.out, steps=a.steps, seed=a.seed, force=a.force))


def _cmd_lengthgen(a):
    from posym.verbs.lengthgen import lengthgen
    _show(lengthgen(a.run_dir, task=a.task, grid=a.grid, n=a.n, seeds=a.seeds, out=a.out, extra_rule=a.extra_rule,
                    step=a.step, device=a.device, force=a.force, resume=a.resume, intervene=a.intervene,
                    layers=a.layers))


def _cmd_llm_eval(a):
    from posym.verbs.llm import llm_eval

    kw = {k: v for k, v in (("lengths", a.lengths), ("n", a.n), ("tasks", a.tasks)) if v is not None}
    _show(llm_eval(a.model, a.gguf, api_base=a.api_base, api_model=a.api_model, api_key_env=a.api_key_env,
                   runs=a.runs, out=a.out, max_per_second=a.max_per_second, max_per_minute=a.max_per_minute,
                   concurrency=a.concurrency, max_retries=a.max_retries, timeout=a.timeout, device_map=a.device_map,
                   dtype=a.dtype, device=a.device, batch_size=a.batch_size, max_new_tokens=a.max_new_tokens,
                   n_examples=a.n_examples, offload_folder=a.offload_folder, threads=a.threads,
                   protocol=a.protocol, progress=not a.quiet, intervene=a.intervene, layers=a.layers, **kw))


def _cmd_llm_heads(a):
    from posym.verbs.llm import llm_heads
    _show(llm_heads(a.model, a.gguf, prompts=a.prompts, n=a.n, seed=a.seed, length=a.length, n_entities=a.entities,
                    n_examples=a.n_examples, tau=a.tau, centred=a.centred, min_mass=a.min_mass, out=a.out,
                    device=a.device, dtype=a.dtype, batch_size=a.batch_size, threads=a.threads,
                    progress=not a.quiet, force=a.force, swap_exclude=a.swap_exclude, intervene=a.intervene,
                    layers=a.layers))


def _cmd_head_types(a):
    from posym.studies.head_types import head_types
    _show(head_types(a.model, a.gguf, prompts=a.prompts, swap_exclude=a.swap_exclude, n=a.n, length=a.length,
                     seed=a.seed, tau=a.tau, gamma=a.gamma, min_mass=a.min_mass, pure_fraction=a.pure_fraction,
                     n_boot=a.n_boot, n_null=a.n_null,
                     window_length=a.window_length, n_entities=a.entities, n_examples=a.n_examples,
                     device=a.device, dtype=a.dtype, batch_size=a.batch_size, threads=a.threads, out=a.out,
                     force=a.force, progress=not a.quiet))


def _cmd_interventions(a):
    from posym.studies.intervention_study import interventions

    _show(interventions(a.runs, a.out, task=a.task, intervene=a.intervene, best_of=a.best_of, grid=a.grid, n=a.n, seeds=a.seeds,
                        heads_lengths=[] if a.no_heads else a.heads_lengths, heads_n=a.heads_n, device=a.device,
                        progress=not a.quiet))


def _cmd_sensitivity(a):
    from posym.studies.sensitivity import sensitivity

    variants: dict[str, str] = {}
    for name, path in a.variants:
        if name in variants:
            raise PosymError(f"variant {name!r} given twice")
        variants[name] = path
    _show(sensitivity(variants, a.out, predict=not a.no_predict, n=a.n, force=a.force, intervention=a.intervention))


def _cmd_pe_study(a):
    from posym.studies.encodings import pe_study

    variants: dict[str, str] = {}
    for name, path in a.variants:
        if name in variants:
            raise PosymError(f"variant {name!r} given twice")
        variants[name] = path
    _show(pe_study(variants, a.out, force=a.force, intervention=a.intervention,
                   **({"lengthgen": a.lengthgen} if a.lengthgen else {})))


def _cmd_reproduce(a):
    from posym.verbs.reproduce import overrides_from_pairs, reproduce
    from posym.launch.slurm import slurm_options

    given = [a.slurm_partition, a.slurm_time, a.slurm_gpus, a.slurm_cpus, a.slurm_opt, a.launcher_config]
    options = slurm_options(a.slurm_partition, a.slurm_time, a.slurm_gpus, a.slurm_cpus, a.slurm_opt or (),
                            a.launcher_config) if any(v is not None for v in given) else None
    path = reproduce(a.preset, out=a.out, seeds=a.seeds, device=a.device, tasks=tuple(a.tasks), stages=a.stages,
                     llm=not a.no_llm, progress=not a.quiet, jobs=a.jobs,
                     overrides=overrides_from_pairs(dict(a.set or [])) or None, launcher=a.launcher,
                     slurm_options=options, detach=a.detach)
    print(f"report: {path}" + (" (written by the last Slurm job)" if a.detach else ""))


def _cmd_status(a):
    from posym.verbs.status import status
    _show(status(a.dir))


def _cmd_stage(a):
    from posym.verbs.reproduce import run_stage
    run_stage(a.dir, a.name, submission=a.submission)


def _cmd_report(a):
    from posym.verbs.report import report
    _show(report(a.dir, screenshot=a.screenshot, markdown=a.markdown, force=a.force))


def _variant(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=REPRODUCTION_DIR, got {text!r}")
    return name, path


# ------------------------------------------------------------------------------------------------
# the parser
# ------------------------------------------------------------------------------------------------
def _force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help="replace existing outputs (atomically)")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="posym", description="Positional versus symbolic attention heads (Urrutia et al. 2026).")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=OneLineParser)

    data = sub.add_parser("data", help="generate, export and inspect task data (SPEC §1)")
    dsub = data.add_subparsers(dest="data_verb", required=True, parser_class=OneLineParser)
    for name, fn, helptext in [("export", _cmd_data_export, "write samples as JSONL"),
                               ("show", _cmd_data_show, "print decoded examples")]:
        d = dsub.add_parser(name, help=helptext)
        d.add_argument("--task", required=True, choices=TASK_CHOICES)
        d.add_argument("--split", default="train", choices=["train", "val", "test"])
        d.add_argument("--n", type=nonneg_int, default=5 if name == "show" else 1000, help="number of samples")
        d.add_argument("--extra-tokens", type=nonneg_int, default=0, help="extra target-window tokens (SPEC §1.4)")
        d.add_argument("--seed", type=nonneg_int, default=0, help="data seed (splits derive from it)")
        if name == "export":
            d.add_argument("--out", required=True, help="output .jsonl file")
            d.add_argument("--ids", action="store_true",
                           help="also write token ids (input_ids, label_id) and the vocabulary OUT_STEM.vocab.json")
            _force(d)
        d.set_defaults(func=fn)

    t = sub.add_parser("train", help="train GPT-J (or --arch: Llama, Qwen3, Gemma-3, GPT-NeoX) on a task (SPEC §2)")
    t.add_argument("--task", required=True, choices=TASK_CHOICES)
    t.add_argument("--preset", default="quick", choices=["quick", "paper", "authors"],
                   help="quick (minutes on a CPU), paper (SPEC §2) or authors (paper + batch 192 + best checkpoint)")
    t.add_argument("--out", required=True, help="run directory (e.g. runs/NAME)")
    t.add_argument("--seed", type=nonneg_int, default=0, help="init seed; also data and order seed unless given")
    t.add_argument("--data-seed", type=nonneg_int, default=None)
    t.add_argument("--order-seed", type=nonneg_int, default=None)
    t.add_argument("--device", type=device_type, default="cpu", help="cpu or cuda")
    t.add_argument("--steps", type=positive_int, default=None, help="optimizer steps (default: the preset's)")
    t.add_argument("--eval-every", type=positive_int, default=None, help="evaluate every N steps (default 50)")
    t.add_argument("--checkpoint-every", type=positive_int, default=None,
                   help="keep a checkpoint every N steps (default 250)")
    t.add_argument("--checkpoint-extra-every", type=positive_int, default=None, help="additional denser checkpoints")
    t.add_argument("--set", action="append", type=key_value, metavar="KEY=VALUE",
                   help="override a GPTJConfig field (repeatable; another --arch maps n_layer, n_head, n_embd, "
                        "n_inner, rotary_dim, n_positions, the dropouts, layer_norm_epsilon, initializer_range)")
    t.add_argument("--track-heads", action=argparse.BooleanOptionalAction, default=None,
                   help="score every head at each evaluation step into scores.csv (default: on)")
    t.add_argument("--track-prompts", type=positive_int, default=None,
                   help="validation prompts scored when tracking (512)")
    t.add_argument("--batch-size", type=positive_int, default=None,
                   help="global batch (default 64; the authors' 3-GPU DataParallel run: 192)")
    t.add_argument("--epochs", type=positive_float, default=None,
                   help="passes over the 432,000 training samples instead of --steps (3 at batch 192 = 6,750 steps)")
    t.add_argument("--final-model", default=None, choices=["last", "best"],
                   help="the model test accuracy and analyses use: last step (default) or the first "
                        "checkpoint with the best validation accuracy (HF load_best_model_at_end)")
    t.add_argument("--log", action="append", default=None, choices=["tensorboard"],
                   help="also log loss, accuracy per hop and head scores: tensorboard -> RUN/tensorboard/ "
                        "(needs the [tensorboard] extra)")
    t.add_argument("--distractors", default=None, choices=["pool", "uniform"],
                   help="letter task: distractor right letters from the non-chain pool (default, the authors') "
                        "or uniform over a..h (posym's old data, for ablations)")
    t.add_argument("--precision", default=None, choices=["fp32", "bf16", "fp16"],
                   help="fp32 (default), bf16 autocast, or fp16 autocast + loss scaling (HF fp16=True) of the "
                        "training forward (weights, scores stay fp32)")
    t.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the training forward (default: off)")
    t.add_argument("--pe", type=pe_type, default=None, metavar="PE",
                   help="positional encoding (docs/spec.md §2.1): rope (default), nope, p-rope:F, rope-base:THETA, "
                        "randomized:L, ssmax")
    t.add_argument("--arch", type=arch_type, default=None, metavar="ARCH",
                   help="model family at the preset's shape (docs/models.md): gptj (default, the paper's), llama, "
                        "qwen3, gemma3, gpt-neox; --pe other than rope / rope-base is GPT-J's only")
    t.add_argument("--threads", type=threads_type, default=None, help="torch CPU threads")
    t.add_argument("--resume", action="store_true", help="continue an interrupted run")
    t.add_argument("--force", action="store_true", help="replace an existing run directory (posym runs only)")
    t.add_argument("--quiet", action="store_true", help="no progress bar")
    t.set_defaults(func=_cmd_train)

    se = sub.add_parser("select", help="a finished run seen with another final model (e.g. the best checkpoint)")
    se.add_argument("run_dir", help="a finished posym run, or an HF Trainer output_dir (checkpoint-N/ folders)")
    se.add_argument("--task", default=None, choices=TASK_CHOICES, help=TASK_HELP)
    se.add_argument("--n-test", type=positive_int, default=None,
                    help="test prompts for an HF Trainer output_dir (default 45,600, SPEC §1.3)")
    se.add_argument("--final-model", default="best", choices=["best", "last"],
                    help="best: the first checkpoint with the best validation accuracy (HF load_best_model_at_end)")
    se.add_argument("--out", required=True, help="the derived run directory (analyses write there)")
    se.add_argument("--device", type=device_type, default="cpu")
    se.add_argument("--force", action="store_true", help="replace a run derived earlier")
    se.set_defaults(func=_cmd_select)

    reading = _reading()
    sc = sub.add_parser("scores", help="positional/symbolic scores of every head (SPEC §3, fast exact path)",
                        epilog=reading.HOW_TO_READ, formatter_class=argparse.RawDescriptionHelpFormatter)
    sc.add_argument("run_dir", nargs="?", help="run directory: scores every checkpoint")
    sc.add_argument("--model", default=None,
                    help="an HF checkpoint of any supported RoPE family (docs/models.md) or a run directory")
    sc.add_argument("--series", nargs="+", default=None, metavar="DIR",
                    help="a checkpoint series: an HF Trainer output folder (its checkpoint-N/) or several model "
                         "folders (step = the last number in each name); one table with a step column")
    sc.add_argument("--task", default=None, choices=TASK_CHOICES,
                    help="token ids of SPEC §1 (needed for foreign checkpoints)")
    sc.add_argument("--prompts", default=None, help="JSONL prompt file (posym data export); default: validation prompts")
    own = sc.add_mutually_exclusive_group()
    own.add_argument("--text", default=None, metavar="FILE",
                     help="score --model on your own texts: one per line, tokenized with the model's tokenizer")
    own.add_argument("--ids", default=None, metavar="FILE",
                     help="score --model on your own token ids (the model's tokenizer): one sequence per line, "
                          "a JSON list or ids separated by spaces; lengths may differ")
    sc.add_argument("--blocks", type=_bounded_int(2, "blocks"), default=None,
                    help="with --text/--ids: swap N contiguous blocks (Paper B's LLM version) instead of tokens")
    sc.add_argument("--batch-size", type=positive_int, default=64,
                    help="with --text/--ids: sequences per forward (memory grows with batch x length^2)")
    sc.add_argument("--n", type=positive_int, default=512, help="validation prompts when --prompts is not given")
    sc.add_argument("--seed", type=nonneg_int, default=0, help="data seed of the validation prompts")
    sc.add_argument("--tau", type=positive_float, action="append", help="softmax temperature of the swap weights (repeatable)")
    sc.add_argument("--steps", type=int_list, default=None, help="only these checkpoint steps, e.g. 0,1000,6750")
    sc.add_argument("--per-prompt", action="store_true", help="one row per prompt instead of means")
    _swap_exclude(sc, own_sequences=True)
    sc.add_argument("--device", type=device_type, default="cpu", help="cpu or cuda")
    sc.add_argument("--out", default=None, help="CSV file (default: RUN_DIR/scores.csv; ./runs/scores/<model name>/"
                    "scores.csv for --model FOLDER, never inside it; FOLDER/checkpoint_scores.csv for --series FOLDER; "
                    "needed for several --series folders)")
    _add_intervene_args(sc)
    _force(sc)
    sc.set_defaults(func=_cmd_scores)

    d = sub.add_parser("dynamics", help="pure heads and Paper A Fig. 2 from a run's scores.csv (SPEC §3)")
    d.add_argument("run_dir")
    d.add_argument("--gamma", type=gamma_type, action="append", help="purity tolerance in (0, 0.5) (repeatable; 0.1)")
    d.add_argument("--tau", type=positive_float, default=None, help="τ of the scores to use (default: smallest)")
    d.add_argument("--layers", type=int_list, default=None,
                   help="layers drawn in panel B, every head of each (default: all), e.g. 0,3,4,11")
    d.add_argument("--out", default=None, help="output directory (default: the run directory)")
    _force(d)
    d.set_defaults(func=_cmd_dynamics)

    f = sub.add_parser("flow", help="attention flow of one prompt with the hop chain (Paper A Fig. 3)")
    f.add_argument("run_dir", help=MODEL_HELP)
    f.add_argument("--example", type=nonneg_int, default=0, help="index of the prompt in the split")
    f.add_argument("--task", default=None, choices=TASK_CHOICES, help=TASK_HELP)
    f.add_argument("--split", default="test", choices=["train", "val", "test"])
    f.add_argument("--seed", type=nonneg_int, default=0, help="data seed")
    f.add_argument("--top-k", type=positive_int, default=3)
    f.add_argument("--min-weight", type=finite_float, default=0.05)
    f.add_argument("--step", type=step_choice, default=None, help=STEP_HELP)
    f.add_argument("--out", default=None, help="output directory (default: the run directory; figures/ inside)")
    _force(f)
    f.set_defaults(func=_cmd_flow)

    a = sub.add_parser("ablate", help="zero/mean-ablate each head; test accuracy per hop (Paper A Fig. 3)")
    a.add_argument("run_dir", help=MODEL_HELP)
    a.add_argument("--task", default=None, choices=TASK_CHOICES, help=TASK_HELP)
    a.add_argument("--n", type=positive_int, default=2000, help="test prompts")
    a.add_argument("--seed", type=nonneg_int, default=0)
    a.add_argument("--modes", type=str_list(("zero", "mean")), default=["zero", "mean"])
    a.add_argument("--step", type=step_choice, default=None, help=STEP_HELP)
    a.add_argument("--out", default=None, help="output directory (default: the run directory)")
    _force(a)
    a.set_defaults(func=_cmd_ablate)

    fq = sub.add_parser("freqs", help="RoPE frequency use per layer/head, Table 1, Fig. 8 and Fig. 4B (SPEC §4)")
    fq.add_argument("path", help=MODEL_HELP)
    fq.add_argument("--task", default=None, choices=TASK_CHOICES, help=TASK_HELP)
    fq.add_argument("--n", type=positive_int, default=512, help="test prompts")
    fq.add_argument("--layer", type=nonneg_int, default=None, help="layer of the q/k geometry figure (default: lowest ID)")
    fq.add_argument("--step", type=step_choice, default=None, help=STEP_HELP)
    fq.add_argument("--weighting", default="max_abs", choices=["max_abs", "centered"])
    fq.add_argument("--no-scores", action="store_true", help="skip per-frequency positional/symbolic scores")
    fq.add_argument("--out", default=None, help="output directory (default: the given path)")
    _add_intervene_args(fq)
    _force(fq)
    fq.set_defaults(func=_cmd_freqs)

    th = sub.add_parser("theory", help="RoPE constructions, discrepancy (Fig. 5A), frequency-restricted heads")
    tsub = th.add_subparsers(dest="theory_verb", required=True, parser_class=OneLineParser)
    td = tsub.add_parser("discrepancy", help="Δ(n) of the Index and Retrieval constructions with Theorem 3.2 bounds")
    td.add_argument("--out", default="runs/theory", help="output directory")
    td.add_argument("--theta-index", type=finite_float, default=0.8)
    td.add_argument("--theta-retrieval", type=finite_float, default=0.0027)
    td.add_argument("--alphabet", type=_bounded_int(2, "alphabet"), default=8)
    td.add_argument("--n-max", type=_bounded_int(2, "n-max"), default=100)
    td.add_argument("--run", action="append", default=None,
                    help="also measure Δ of every head of this model vs added tokens (repeatable): " + MODEL_HELP)
    td.add_argument("--task", default=None, choices=TASK_CHOICES, help="task of a --run checkpoint posym did not write")
    td.add_argument("--grid", type=lambda s: int_list(s, 0), default=None,
                    help="added tokens for --run, e.g. 0,100,1000 (default 0,20,50,100,300,1000)")
    td.add_argument("--n", type=positive_int, default=64, help="prompts per added length for --run")
    td.add_argument("--seed", type=nonneg_int, default=0, help="data seed for --run")
    td.add_argument("--intervene", action="append", default=None, metavar="NAME:KEY=VALUE[,...]",
                    help="also Δ(n) and the weight on the correct key under this intervention, e.g. "
                         "temperature:beta=1, ntk:kappa=4, interpolate:n_train=17, freq-mask:keep=1+2 (repeatable; "
                         "writes discrepancy_interventions.csv + figure)")
    td.add_argument("--lengths", type=lambda s: int_list(s, 2), default=None,
                    help="lengths n for --intervene, e.g. 17,117,1017,5017 (default 17..5017, log-spaced)")
    _force(td)
    td.set_defaults(func=_cmd_theory_discrepancy)
    tr = tsub.add_parser("restricted", help="train 1-layer toys on Index/Retrieval with each RoPE frequency band")
    tr.add_argument("--out", default="runs/theory", help="output directory")
    tr.add_argument("--steps", type=positive_int, default=1500)
    tr.add_argument("--seed", type=nonneg_int, default=0)
    _force(tr)
    tr.set_defaults(func=_cmd_theory_restricted)

    llm = sub.add_parser("llm", help="real pretrained LLMs (SPEC §1.5)")
    lsub = llm.add_subparsers(dest="llm_verb", required=True, parser_class=OneLineParser)
    le = lsub.add_parser("eval", help="1-hop number/letter prompts vs target-window length (Table 3)")
    le.add_argument("--model", default=None,
                    help="smollm2 (default) | gemma3-270m | an HF model folder with its tokenizer | a .gguf file")
    le.add_argument("--gguf", default=None, help="GGUF file inside --model")
    le.add_argument("--api-base", default=None, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    le.add_argument("--api-model", default=None)
    le.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    le.add_argument("--lengths", type=positive_int_list, default=None,
                    help="target-window sizes, e.g. 12,32,100 (default: SPEC §1.5)")
    le.add_argument("--runs", type=positive_int, default=5)
    le.add_argument("--n", type=positive_int, default=None, help="prompts per (task, length, run)")
    le.add_argument("--tasks", type=str_list(TASK_CHOICES), default=None, help="number,letter (default: both)")
    le.add_argument("--protocol", choices=("generate", "choice"), default="generate",
                    help="generate: greedy reply, parsed; choice: argmax log-likelihood of the distinct window "
                         "tokens, with chance level (local models only; default out runs/llm/<model>-choice)")
    le.add_argument("--max-per-second", type=positive_float, default=None, help="API rate limit (requests per second)")
    le.add_argument("--max-per-minute", type=positive_float, default=None, help="API rate limit (requests per minute)")
    le.add_argument("--concurrency", type=positive_int, default=1, help="parallel API requests")
    le.add_argument("--max-retries", type=nonneg_int, default=6, help="API retries on 429/5xx/timeouts")
    le.add_argument("--timeout", type=positive_float, default=60.0, help="API request timeout in seconds")
    le.add_argument("--device-map", default=None, help="'auto' shards a large local model over GPUs/CPU (accelerate)")
    le.add_argument("--offload-folder", default=None, help="disk offload folder for --device-map auto")
    le.add_argument("--dtype", default=None, help="float32, bfloat16, float16 or auto (default: fp32 on CPU)")
    le.add_argument("--device", type=device_type, default=None, help="cpu or cuda (without --device-map)")
    le.add_argument("--batch-size", type=positive_int, default=None, help="prompts per forward (local)")
    le.add_argument("--max-new-tokens", type=positive_int, default=8)
    le.add_argument("--n-examples", type=nonneg_int, default=3, help="worked examples in each prompt")
    le.add_argument("--quiet", action="store_true", help="no progress bar")
    le.add_argument("--threads", type=threads_type, default=None)
    le.add_argument("--out", default=None, help="output directory (answers are cached there; reruns resume; "
                                                 "a folder holding the other protocol's tables is refused)")
    _add_intervene_args(le)
    le.set_defaults(func=_cmd_llm_eval)
    lh = lsub.add_parser("heads", help="s_POS/s_SYM (block swaps), entropy, frequency use of every head (SPEC §3, §6)",
                         epilog=f"{reading.HOW_TO_READ}\n\n{reading.HEADS_RECIPE}",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    lh.add_argument("--model", default=None,
                    help="smollm2 (default) | gemma3-270m | an HF model folder with its tokenizer | a .gguf file")
    lh.add_argument("--gguf", default=None, help="GGUF file inside --model")
    lh.add_argument("--prompts", type=str_list(("all", "binding", "number", "letter")), default=["all"],
                    help="all, binding, number, letter or a comma list")
    lh.add_argument("--n", type=positive_int, default=32, help="prompts per set")
    lh.add_argument("--seed", type=nonneg_int, default=0, help="data seed (1-hop: the run number)")
    lh.add_argument("--length", type=positive_int, default=12, help="target-window length of the 1-hop prompts")
    lh.add_argument("--entities", type=_bounded_int(2, "entities"), default=6,
                    help="entity-attribute facts per binding prompt")
    lh.add_argument("--n-examples", type=nonneg_int, default=3, help="worked examples in each 1-hop prompt")
    lh.add_argument("--tau", type=positive_float, default=1e-4, help="softmax temperature of the swap weights")
    lh.add_argument("--centred", action="store_true",
                    help="cosines on attention minus the mass-matched uniform row (uniform heads score 0, not 1)")
    _swap_exclude(lh)
    lh.add_argument("--min-mass", type=finite_float, default=reading.MIN_MASS,
                    help=f"summaries leave out heads with block_mass below this (0..1; default {reading.MIN_MASS:g}; "
                         "0 keeps every head)")
    lh.add_argument("--device", type=device_type, default=None, help="cpu or cuda (default: cuda when available)")
    lh.add_argument("--dtype", default=None, help="float32, bfloat16, float16 or auto (default: fp32 on CPU)")
    lh.add_argument("--batch-size", type=positive_int, default=8, help="prompts per forward")
    lh.add_argument("--threads", type=threads_type, default=None, help="torch CPU threads")
    lh.add_argument("--out", default=None,
                    help="output directory (default: runs/llm-heads/<model>/ under the current folder)")
    lh.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_intervene_args(lh)
    _force(lh)
    lh.set_defaults(func=_cmd_llm_heads)

    sources = ("repeated", "binding", "number", "letter")  # posym.studies.head_types.PROMPT_SOURCES
    ht = sub.add_parser("head-types", help="every head of an LLM typed two ways: s_POS/s_SYM beside the classic "
                                           "detectors (previous-token, induction, duplicate-token, sink)",
                        epilog=reading.HOW_TO_READ, formatter_class=argparse.RawDescriptionHelpFormatter)
    ht.add_argument("--model", default=None,
                    help="smollm2 (default) | gemma3-270m | an HF model folder with its tokenizer | a .gguf file")
    ht.add_argument("--gguf", default=None, help="GGUF file inside --model")
    ht.add_argument("--prompts", type=str_list(("all", *sources)), default=list(sources),
                    help="prompt sources: repeated (random sequences repeated twice), binding, number, letter "
                         "(posym llm heads' sets), a comma list or all (default: all)")
    ht.add_argument("--swap-exclude", default="bos", metavar="none|bos|first:K",
                    help="keys kept out of the swaps (default bos: the start token, real LLMs' attention sink; "
                         "none = SPEC §3 exactly)")
    ht.add_argument("--n", type=positive_int, default=32, help="prompts per source")
    ht.add_argument("--length", type=positive_int, default=64,
                    help="tokens of the random sequence each repeated prompt holds twice (1 + 2 x length tokens)")
    ht.add_argument("--seed", type=nonneg_int, default=0, help="data seed (and of the bootstrap)")
    ht.add_argument("--tau", type=positive_float, default=1e-4, help="softmax temperature of the swap weights")
    ht.add_argument("--gamma", type=gamma_type, default=0.1, help="purity tolerance of the readings, in (0, 0.5)")
    ht.add_argument("--min-mass", type=finite_float, default=reading.MIN_MASS,
                    help=f"a prompt's reading is uninformative below this swap mass (default {reading.MIN_MASS:g})")
    ht.add_argument("--pure-fraction", type=finite_float, default=None,
                    help="a head pure on the mean over prompts is typed pure only when it is pure of that kind on "
                         "at least this share of the prompts (0..1; default 0.9; 0 = the mean alone decides)")
    ht.add_argument("--n-boot", type=positive_int, default=1000, help="bootstrap resamples of the 95%% CIs")
    ht.add_argument("--n-null", type=positive_int, default=1000, help="shuffles of the null of the correlations")
    ht.add_argument("--window-length", type=positive_int, default=12, help="target-window length of the 1-hop sets")
    ht.add_argument("--entities", type=_bounded_int(2, "entities"), default=6, help="facts per binding prompt")
    ht.add_argument("--n-examples", type=nonneg_int, default=3, help="worked examples in each 1-hop prompt")
    ht.add_argument("--device", type=device_type, default=None, help="cpu or cuda (default: cuda when available)")
    ht.add_argument("--dtype", default=None, help="float32, bfloat16, float16 or auto (default: fp32 on CPU)")
    ht.add_argument("--batch-size", type=positive_int, default=8, help="prompts per forward")
    ht.add_argument("--threads", type=threads_type, default=None, help="torch CPU threads")
    ht.add_argument("--out", default=None, help="output directory (default: runs/head-types/<model>/)")
    ht.add_argument("--quiet", action="store_true", help="no progress bar")
    _force(ht)
    ht.set_defaults(func=_cmd_head_types)

    lg = sub.add_parser("lengthgen", help="accuracy vs added target-window tokens (SPEC §1.4, Fig. 5B)")
    lg.add_argument("run_dir", help=MODEL_HELP)
    lg.add_argument("--task", default=None, choices=TASK_CHOICES, help=TASK_HELP)
    lg.add_argument("--grid", type=grid_type, default="paper",
                    help="'paper' (0,10..100,200..1000,1500..5000) or e.g. 0,200,1000")
    lg.add_argument("--n", type=positive_int, default=200, help="samples per added length and seed")
    lg.add_argument("--seeds", type=positive_int, default=1, help="data seeds (spread reported as sd)")
    lg.add_argument("--device", type=device_type, default="cpu")
    lg.add_argument("--out", default=None, help="CSV file (default: DIR/lengthgen.csv)")
    lg.add_argument("--extra-rule", default="window", choices=["window", "distractor", "copies"],
                    help="what the added tokens are (SPEC §1.4, our choice): target-window-like filler (default), "
                         "pre-target-like distractors, or copies of non-answer target-window tokens")
    lg.add_argument("--step", type=step_choice, default=None, help=STEP_HELP)
    lg.add_argument("--resume", action="store_true",
                    help="keep the points of an existing table measured the same way, evaluate the rest, "
                         "and save after each point (extends a grid; an interrupted run loses nothing)")
    _add_intervene_args(lg)
    _force(lg)
    lg.set_defaults(func=_cmd_lengthgen)

    iv = sub.add_parser("interventions", help="the interventions study: trained models of both tasks under each "
                                              "inference-time intervention (Fig. 5B, heads, theory's prediction)")
    iv.add_argument("runs", nargs="+", help="trained models of one architecture (both tasks, any seeds): posym runs, "
                                            "HF Trainer output_dirs, checkpoint-N/ or model folders (docs/models.md)")
    iv.add_argument("--task", default=None, choices=TASK_CHOICES, help=TASK_HELP)
    iv.add_argument("--out", required=True, help="study directory (re-running the command continues it)")
    iv.add_argument("--intervene", action="append", default=None, metavar="NAME:KEY=VALUE[,...]",
                    help="interventions to measure (repeatable; default: the study grid, docs/interventions.md)")
    iv.add_argument("--best-of", default=None, metavar="DIR",
                    help="measure each family's best setting per task of an earlier study directory instead")
    iv.add_argument("--grid", type=lambda t: t if t == "search" else grid_type(t), default="search",
                    help="'search' (0..1000, cheap), 'paper' (to +5,000) or added lengths, e.g. 0,100,1000")
    iv.add_argument("--n", type=positive_int, default=200, help="samples per added length and data seed")
    iv.add_argument("--seeds", type=positive_int, default=1, help="data seeds per point")
    iv.add_argument("--heads-lengths", type=int_list, default=None,
                    help="added lengths of the head readout (default 0,100,1000)")
    iv.add_argument("--heads-n", type=positive_int, default=16, help="prompts of the head readout")
    iv.add_argument("--no-heads", action="store_true", help="no head readout (e.g. for the full grid after a search)")
    iv.add_argument("--device", type=device_type, default="cpu")
    iv.add_argument("--quiet", action="store_true", help="no progress bars")
    iv.set_defaults(func=_cmd_interventions)

    sv = sub.add_parser("sensitivity", help="compare reproduction variants (training choices) and test whether "
                                             "head discrepancy predicts length extrapolation")
    sv.add_argument("variants", nargs="+", type=_variant, metavar="NAME=DIR",
                    help="a variant name and its reproduction directory, or (a Fig. 5B-only variant, e.g. another "
                         "extra-token rule) its posym lengthgen tables: NAME=a.csv[,b.csv]")
    sv.add_argument("--out", required=True, help="output directory (sensitivity.csv/.md, prediction.csv/.png)")
    sv.add_argument("--n", type=positive_int, default=256, help="prompts per model for the discrepancy at training length")
    sv.add_argument("--no-predict", action="store_true", help="only the sensitivity table (no model is loaded)")
    sv.add_argument("--intervention", default="none", metavar="NAME",
                    help="whose rows of the lengthgen tables of a Fig. 5B-only variant are shown (its canonical "
                         "string, e.g. ntk:kappa=4; default none: the untouched model)")
    _force(sv)
    sv.set_defaults(func=_cmd_sensitivity)

    pe = sub.add_parser("pe-study", help="reproductions trained with different positional encodings (--pe) side "
                                         "by side: accuracy, milestones, pure heads, frequencies, Fig. 5B, the goal")
    pe.add_argument("variants", nargs="+", type=_variant, metavar="NAME=DIR",
                    help="a variant name and its reproduction directory (posym reproduce --set train.pe=...)")
    pe.add_argument("--out", required=True, help="output directory (pe_study.csv/.md/.html, fig2_variants, fig5b_variants)")
    pe.add_argument("--lengthgen", metavar="FILE",
                    help="the length-generalization table inside each run that Fig. 5B and the reach read "
                         "(default: the reproduction's own; e.g. lengthgen_paper.csv written by "
                         "posym lengthgen RUN --grid paper --out RUN/lengthgen_paper.csv)")
    pe.add_argument("--intervention", default="none", metavar="NAME",
                    help="whose rows of a length table measured under several interventions Fig. 5B and the "
                         "reach show (its canonical string, e.g. ntk:kappa=4; default none: the untouched model)")
    _force(pe)
    pe.set_defaults(func=_cmd_pe_study)

    rp = sub.add_parser("reproduce", help="one command: train, analyse and report Paper A (resumable stages)")
    rp.add_argument("--preset", default="quick", choices=["quick", "paper", "tiny"],
                    help=f"quick ({QUICK_REPRODUCTION_TIME}), paper (SPEC §2, full analyses); tiny is for tests")
    rp.add_argument("--out", required=True, help="output directory (a re-run skips finished stages)")
    rp.add_argument("--seeds", type=positive_int, default=1, help="seeds 0..K-1 per task; results as mean ± sd")
    rp.add_argument("--device", type=device_type, default="cpu", help="cpu or cuda")
    rp.add_argument("--tasks", type=str_list(TASK_CHOICES), default=list(TASK_CHOICES),
                    help="comma-separated subset of number,letter")
    rp.add_argument("--jobs", type=positive_int, default=None, help="worker processes (default: min(#cpus, #runs); 1 = serial)")
    rp.add_argument("--no-llm", action="store_true", help="leave out the offline LLM evaluations (Table 3; setting llm_models)")
    rp.add_argument("--stages", type=str_list(), default=None, help="only these stages, e.g. train,dynamics or freqs-number-s0")
    rp.add_argument("--quiet", action="store_true", help="no progress bars (stage lines are still printed)")
    rp.add_argument("--set", action="append", type=key_value, metavar="KEY=VALUE",
                    help="override a preset setting (repeatable; JSON values; dotted keys for nested ones), "
                         "e.g. lengthgen_n=60, lengthgen_grid=0,100,1000, llm.runs=2")
    rp.add_argument("--launcher", default="local", choices=["local", "slurm"],
                    help="local: worker processes on this machine (default); slurm: one sbatch job per stage "
                         "(docs/cluster.md)")
    rp.add_argument("--slurm-partition", default=None, metavar="NAME", help="partition of every job")
    rp.add_argument("--slurm-time", default=None, metavar="TIME", help="time limit of every job, e.g. 2:00:00")
    rp.add_argument("--slurm-gpus", type=nonneg_int, default=None, metavar="N", help="GPUs per job (--gres=gpu:N)")
    rp.add_argument("--slurm-cpus", type=positive_int, default=None, metavar="N",
                    help="CPUs per job (--cpus-per-task; also the job's torch threads)")
    rp.add_argument("--slurm-opt", action="append", default=None, metavar="KEY=VALUE",
                    help="a further sbatch option (repeatable), e.g. account=lab, qos=normal")
    rp.add_argument("--launcher-config", default=None, metavar="FILE",
                    help="the slurm options as a .toml or .json file (keys partition, time, gpus, cpus, opts, "
                         "setup, python); options given here win")
    rp.add_argument("--detach", action="store_true",
                    help="with --launcher slurm: return once the jobs are submitted (posym status DIR follows them)")
    rp.set_defaults(func=_cmd_reproduce)

    st = sub.add_parser("status", help="the state of each stage of a reproduction directory (markers, Slurm jobs)")
    st.add_argument("dir", help="directory written by posym reproduce")
    st.set_defaults(func=_cmd_status)

    sj = sub.add_parser("_stage")  # hidden: what one Slurm job of posym reproduce --launcher slurm runs
    sj.add_argument("dir")
    sj.add_argument("name")
    sj.add_argument("--submission", default=None)
    sj.set_defaults(func=_cmd_stage)

    rr = sub.add_parser("report", help="(re)write DIR/report.html of a reproduction directory from its saved tables")
    rr.add_argument("dir", help="directory written by posym reproduce")
    rr.add_argument("--screenshot", default=None, help="also save a PNG screenshot (needs Chromium)")
    rr.add_argument("--markdown", action="store_true",
                    help="print the \"paper vs posym\" table as Markdown instead of writing the report")
    rr.add_argument("--force", action="store_true", help="replace an existing report.html (and --screenshot file)")
    rr.set_defaults(func=_cmd_report)
    sub.metavar = "{" + ",".join(n for n in sub.choices if not n.startswith("_")) + "}"  # _stage stays hidden
    return p


#: File-system failures a user can fix (one line, exit 2); anything else keeps its traceback.
_USER_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR,
                errno.EEXIST, errno.ENOENT, errno.ENAMETOOLONG, errno.EMFILE}


@contextlib.contextmanager
def _posym_warnings():
    """Print each :class:`~posym.errors.PosymWarning` as one line ``posym: warning: …`` (others as Python does)."""
    from posym.errors import PosymWarning
    from posym.progress import clear_bars

    shown, previous = set(), warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, PosymWarning):
            return previous(message, category, filename, lineno, file, line)
        if str(message) not in shown:
            shown.add(str(message))
            clear_bars()
            print(f"posym: warning: {message}", file=sys.stderr)
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (2 for every bad input, 130 on Ctrl-C)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed on one line)
        return int(exc.code or 0)
    from posym.progress import clear_bars, line_progress

    try:
        with line_progress(), _posym_warnings():  # progress bars as plain lines when stderr is not a terminal
            args.func(args)
    except PosymError as exc:
        clear_bars()  # the error gets its own line, not the end of a bar's
        print(f"posym: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in _USER_ERRNOS:
            raise
        clear_bars()
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"posym: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:
        clear_bars()
        print("posym: error: out of memory; use smaller sizes (--n, --grid, --batch-size)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        clear_bars()
        print("posym: interrupted (a run or reproduction continues with the same command and --resume / again)",
              file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
