"""What every command group shares: the one-line-error parser, the call of a verb with only the options
the user gave (the verb's signature is the one home of each default), the help texts that show a verb's
default, and the option groups used by several commands (the LLM model options, ``--intervene``)."""

from __future__ import annotations

import argparse
import importlib
import inspect
from typing import Any, Callable

from posym.constants import TASKS

SUPPRESS = argparse.SUPPRESS
TASK_CHOICES = TASKS  # the tasks of Paper A (SPEC §1)

STEP_HELP = ("checkpoint of a run or HF Trainer output_dir: a step, 'last' or 'best' (default: the model the run "
             "stands for; an output_dir's saved model, else its newest checkpoint-N/)")
#: What every analysis verb takes (posym.runs.resolve.resolve_model; docs/models.md).
MODEL_HELP = ("a posym run, an HF Trainer output_dir, one checkpoint-N/ or a model folder of any RoPE family posym "
              "reads (--task where the folder does not say it)")
TASK_HELP = "task of a folder that does not say its own (an HF Trainer output_dir, a model folder)"
LLM_MODEL_HELP = "smollm2 (default) | gemma3-270m | an HF model folder with its tokenizer | a .gguf file"

#: Options whose command-line default intentionally differs from the verb's (the verb has none, or another
#: one): (command, dest) -> why. Every other option is declared with ``default=SUPPRESS`` (or None).
OWN_DEFAULTS: dict[tuple[str, str], str] = {
    ("data export", "split"): "the verb takes the split as a required argument; the CLI exports train",
    ("data export", "n"): "the verb takes the count as a required argument; the CLI exports 1000",
    ("flow", "example"): "the verb takes examples or hops (no default); the CLI draws prompt 0",
    ("theory discrepancy", "out"): "the verb's out is required; the CLI writes runs/theory",
    ("theory restricted", "out"): "the verb's out is required; the CLI writes runs/theory",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors: ``posym: error: <verb>: <message>`` and exit status 2."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        verb = self.prog.split(" ", 1)[1] if " " in self.prog else ""
        self.exit(2, f"posym: error: {verb + ': ' if verb else ''}{message}\n")


class _VerbDefault:
    """The default of ``param`` of ``target`` (``"module:name"``), looked up only when ``--help`` is
    formatted: the verbs import torch, which building the parser must not."""

    def __init__(self, target: str, param: str, show: Callable[[Any], str]) -> None:
        self.target, self.param, self.show = target, param, show

    def __str__(self) -> str:
        module, _, name = self.target.partition(":")
        default = inspect.signature(getattr(importlib.import_module(module), name)).parameters[self.param].default
        if default is inspect.Parameter.empty:
            raise TypeError(f"{self.target}({self.param}) has no default")
        return self.show(default)


def verb_default(action: argparse.Action, target: str, param: str | None = None,
                 show: Callable[[Any], str] = str) -> argparse.Action:
    """Let ``action``'s help say ``%(verb_default)s``: the default of ``param`` (default: the action's
    dest) in the signature of ``target`` (``"posym.verbs.flow:flow"``), so the number is written once."""
    action.verb_default = _VerbDefault(target, param or action.dest, show)  # type: ignore[attr-defined]
    return action


def given(args: argparse.Namespace, *names: str, **mapping: str | tuple[str, Callable[[Any], Any]]) -> dict[str, Any]:
    """The options the user gave, as keyword arguments of a verb: each of ``names`` under its own name,
    each ``param=dest`` (or ``param=(dest, convert)``) under ``param``; an option not given is left out,
    so the verb's default applies."""
    out: dict[str, Any] = {}
    for param, source in [*((n, n) for n in names), *mapping.items()]:
        dest, convert = (source, None) if isinstance(source, str) else source
        if hasattr(args, dest):
            value = getattr(args, dest)
            out[param] = convert(value) if convert is not None else value
    return out


def call(verb: Callable[..., Any], args: argparse.Namespace, *positional: str, **mapping: Any) -> Any:
    """``verb(*positional dests, **given options)``: see :func:`given`. A ``names=(...)`` tuple in
    ``mapping`` passes those options under their own names."""
    names = mapping.pop("names", ())
    return verb(*(getattr(args, p) for p in positional), **given(args, *names, **mapping))


def show(result: Any) -> None:
    """Print what a verb returns for the terminal (its ``summary``), if anything."""
    if result.summary:
        print(result.summary)


def not_(value: Any) -> bool:
    """A ``--no-x`` / ``--quiet`` flag as the verb's positive option (``progress=not quiet``)."""
    return not value


def add_force(p: argparse.ArgumentParser, help: str = "replace existing outputs (atomically)") -> None:
    p.add_argument("--force", action="store_true", default=SUPPRESS, help=help)


def add_quiet(p: argparse.ArgumentParser, help: str = "no progress bar") -> None:
    p.add_argument("--quiet", action="store_true", default=SUPPRESS, help=help)


def add_intervene_args(p: argparse.ArgumentParser, *, layers: bool = True, metavar: str = "SPEC",
                       help: str = ("measure under an inference-time intervention, e.g. temperature:beta=1, "
                                    "ntk:kappa=4, rope-base:theta=20000, interpolate:n_train=17, freq-mask:keep=1+2+3, "
                                    "yarn:factor=4,original=17, temperature:form=llama4,floor_scale=8192,attn_scale=0.1, "
                                    "none (repeatable: one measurement each; the tables' intervention column; "
                                    "docs/interventions.md)")) -> None:
    """``--intervene SPEC`` (repeatable) and (``layers``) ``--layers L[,L…]`` of every measuring verb
    (docs/interventions.md); the verb parses and checks them (posym.interventions.plan_interventions)
    before any work, so building the parser imports no torch."""
    from posym.cli.types import int_list

    p.add_argument("--intervene", action="append", default=SUPPRESS, metavar=metavar, help=help)
    if layers:
        p.add_argument("--layers", type=int_list, default=SUPPRESS, metavar="L[,L...]",
                       help="layers the temperature / freq-mask interventions act on (default: all)")


def add_swap_exclude(p: argparse.ArgumentParser, help: str) -> None:
    """``--swap-exclude none|bos|first:K`` (posym.heads.swaps.parse_swap_exclude; SPEC §3)."""
    p.add_argument("--swap-exclude", default=SUPPRESS, metavar="none|bos|first:K", help=help)


def add_llm_model_options(p: argparse.ArgumentParser, *, out_help: str, batch_help: str = "prompts per forward",
                          device_help: str = "cpu or cuda (default: cuda when available)",
                          threads_help: str | None = "torch CPU threads") -> None:
    """The LLM model options of ``llm eval``, ``llm heads`` and ``head-types``: ``--model``, ``--gguf``,
    ``--device``, ``--dtype``, ``--batch-size``, ``--threads``, ``--quiet``, ``--out`` (SPEC §1.5,
    posym.model.llm.load_llm)."""
    from posym.cli.types import device_type, positive_int, threads_type

    p.add_argument("--model", default=SUPPRESS, help=LLM_MODEL_HELP)
    p.add_argument("--gguf", default=SUPPRESS, help="GGUF file inside --model")
    p.add_argument("--device", type=device_type, default=SUPPRESS, help=device_help)
    p.add_argument("--dtype", default=SUPPRESS, help="float32, bfloat16, float16 or auto (default: fp32 on CPU)")
    p.add_argument("--batch-size", type=positive_int, default=SUPPRESS, help=batch_help)
    p.add_argument("--threads", type=threads_type, default=SUPPRESS, help=threads_help)
    add_quiet(p)
    p.add_argument("--out", default=SUPPRESS, help=out_help)


#: ``slurm_options`` parameter -> option dest (posym.launch.slurm.slurm_options).
SLURM = {"partition": "slurm_partition", "time": "slurm_time", "gpus": "slurm_gpus", "cpus": "slurm_cpus",
         "opts": "slurm_opt", "config": "launcher_config"}


def add_launcher_options(p: argparse.ArgumentParser, *, launcher_help: str) -> None:
    """``--launcher {local,slurm}`` and the Slurm options of every fan-out verb (``reproduce``, the
    studies, ``lengthgen``; posym.launch.slurm.slurm_options, docs/cluster.md)."""
    from posym.cli.types import nonneg_int, positive_int

    p.add_argument("--launcher", default=SUPPRESS, choices=["local", "slurm"], help=launcher_help)
    p.add_argument("--slurm-partition", default=SUPPRESS, metavar="NAME", help="partition of every job")
    p.add_argument("--slurm-time", default=SUPPRESS, metavar="TIME", help="time limit of every job, e.g. 2:00:00")
    p.add_argument("--slurm-gpus", type=nonneg_int, default=SUPPRESS, metavar="N", help="GPUs per job (--gres=gpu:N)")
    p.add_argument("--slurm-cpus", type=positive_int, default=SUPPRESS, metavar="N",
                   help="CPUs per job (--cpus-per-task; also the job's torch threads)")
    p.add_argument("--slurm-opt", action="append", default=SUPPRESS, metavar="KEY=VALUE",
                   help="a further sbatch option (repeatable), e.g. account=lab, qos=normal")
    p.add_argument("--launcher-config", default=SUPPRESS, metavar="FILE",
                   help="the slurm options as a .toml or .json file (keys partition, time, gpus, cpus, opts, "
                        "setup, python); options given here win")


def launcher_options(args: argparse.Namespace) -> dict[str, Any]:
    """``launcher`` and ``slurm_options`` (checked :class:`~posym.launch.slurm.SlurmOptions`, only when a
    Slurm option was given) of a verb, from :func:`add_launcher_options`' options."""
    from posym.launch.slurm import slurm_options

    slurm = given(args, **SLURM)
    return {**given(args, "launcher"), **({"slurm_options": slurm_options(**slurm)} if slurm else {})}


#: The LLM model options as the verbs name them (``model``, ``gguf`` positional-or-keyword there).
LLM_MODEL_OPTIONS = ("model", "gguf", "device", "dtype", "batch_size", "threads", "out")


__all__ = ["LLM_MODEL_OPTIONS", "MODEL_HELP", "OWN_DEFAULTS", "OneLineParser", "SLURM", "STEP_HELP", "SUPPRESS",
           "TASK_CHOICES", "TASK_HELP", "add_force", "add_intervene_args", "add_launcher_options",
           "add_llm_model_options", "add_quiet", "add_swap_exclude", "call", "given", "launcher_options", "not_",
           "show", "verb_default"]
