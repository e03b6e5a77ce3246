"""``posym llm eval`` / ``posym llm heads``: real pretrained LLMs (SPEC §1.5; Paper A Table 3, Paper B §5)."""

from __future__ import annotations

import argparse

from posym.cli.common import (LLM_MODEL_OPTIONS, SUPPRESS, TASK_CHOICES, OneLineParser, add_force, add_intervene_args,
                              add_llm_model_options, add_swap_exclude, call, not_, show)
from posym.cli.types import (bounded_int, finite_float, nonneg_int, positive_float, positive_int,
                             positive_int_list, str_list)

#: Options of ``posym llm heads`` and ``posym head-types`` that take prompts (posym.heads.llm_heads).
PROMPT_OPTIONS = ("prompts", "n", "seed", "length", "n_examples", "tau", "min_mass", "swap_exclude")


def _cmd_llm_eval(a: argparse.Namespace) -> None:
    from posym.verbs.llm import llm_eval
    show(call(llm_eval, a, progress=("quiet", not_), names=(
        *LLM_MODEL_OPTIONS, "api_base", "api_model", "api_key_env", "lengths", "n", "tasks", "runs", "max_per_second",
        "max_per_minute", "concurrency", "max_retries", "timeout", "device_map", "max_new_tokens", "n_examples",
        "offload_folder", "protocol", "intervene", "layers")))


def _cmd_llm_heads(a: argparse.Namespace) -> None:
    from posym.verbs.llm import llm_heads
    show(call(llm_heads, a, n_entities="entities", progress=("quiet", not_),
              names=(*LLM_MODEL_OPTIONS, *PROMPT_OPTIONS, "centred", "force", "intervene", "layers")))


def add_min_mass(p: argparse.ArgumentParser, help: str) -> None:
    """``--min-mass`` (posym.reading.MIN_MASS, the default of the verbs: docs/llm.md); ``help`` may say
    ``{min_mass}``."""
    from posym.reading import MIN_MASS

    p.add_argument("--min-mass", type=finite_float, default=SUPPRESS, help=help.format(min_mass=f"{MIN_MASS:g}"))


def add_entities(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--entities", type=bounded_int(2, "entities"), default=SUPPRESS, help=help)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from posym.reading import HEADS_RECIPE, HOW_TO_READ

    llm = sub.add_parser("llm", help="real pretrained LLMs (SPEC §1.5)")
    lsub = llm.add_subparsers(dest="llm_verb", required=True, parser_class=OneLineParser)
    le = lsub.add_parser("eval", help="1-hop number/letter prompts vs target-window length (Table 3)")
    add_llm_model_options(le, device_help="cpu or cuda (without --device-map)", batch_help="prompts per forward (local)",
                          threads_help=None,
                          out_help="output directory (answers are cached there; reruns resume; "
                                   "a folder holding the other protocol's tables is refused)")
    le.add_argument("--api-base", default=SUPPRESS, help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1")
    le.add_argument("--api-model", default=SUPPRESS)
    le.add_argument("--api-key-env", default=SUPPRESS, help="environment variable holding the API key")
    le.add_argument("--lengths", type=positive_int_list, default=SUPPRESS,
                    help="target-window sizes, e.g. 12,32,100 (default: SPEC §1.5)")
    le.add_argument("--runs", type=positive_int, default=SUPPRESS)
    le.add_argument("--n", type=positive_int, default=SUPPRESS, help="prompts per (task, length, run)")
    le.add_argument("--tasks", type=str_list(TASK_CHOICES), default=SUPPRESS, help="number,letter (default: both)")
    le.add_argument("--protocol", choices=("generate", "choice"), default=SUPPRESS,
                    help="generate: greedy reply, parsed; choice: argmax log-likelihood of the distinct window "
                         "tokens, with chance level (local models only; default out runs/llm/<model>-choice)")
    le.add_argument("--max-per-second", type=positive_float, default=SUPPRESS,
                    help="API rate limit (requests per second)")
    le.add_argument("--max-per-minute", type=positive_float, default=SUPPRESS,
                    help="API rate limit (requests per minute)")
    le.add_argument("--concurrency", type=positive_int, default=SUPPRESS, help="parallel API requests")
    le.add_argument("--max-retries", type=nonneg_int, default=SUPPRESS, help="API retries on 429/5xx/timeouts")
    le.add_argument("--timeout", type=positive_float, default=SUPPRESS, help="API request timeout in seconds")
    le.add_argument("--device-map", default=SUPPRESS, help="'auto' shards a large local model over GPUs/CPU (accelerate)")
    le.add_argument("--offload-folder", default=SUPPRESS, help="disk offload folder for --device-map auto")
    le.add_argument("--max-new-tokens", type=positive_int, default=SUPPRESS)
    le.add_argument("--n-examples", type=nonneg_int, default=SUPPRESS, help="worked examples in each prompt")
    add_intervene_args(le)
    le.set_defaults(func=_cmd_llm_eval)

    lh = lsub.add_parser("heads", help="s_POS/s_SYM (block swaps), entropy, frequency use of every head (SPEC §3, §6)",
                         epilog=f"{HOW_TO_READ}\n\n{HEADS_RECIPE}", formatter_class=argparse.RawDescriptionHelpFormatter)
    add_llm_model_options(lh, out_help="output directory (default: runs/llm-heads/<model>/ under the current folder)")
    lh.add_argument("--prompts", type=str_list(("all", "binding", "number", "letter")), default=SUPPRESS,
                    help="all, binding, number, letter or a comma list")
    lh.add_argument("--n", type=positive_int, default=SUPPRESS, help="prompts per set")
    lh.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed (1-hop: the run number)")
    lh.add_argument("--length", type=positive_int, default=SUPPRESS, help="target-window length of the 1-hop prompts")
    add_entities(lh, "entity-attribute facts per binding prompt")
    lh.add_argument("--n-examples", type=nonneg_int, default=SUPPRESS, help="worked examples in each 1-hop prompt")
    lh.add_argument("--tau", type=positive_float, default=SUPPRESS, help="softmax temperature of the swap weights")
    lh.add_argument("--centred", action="store_true", default=SUPPRESS,
                    help="cosines on attention minus the mass-matched uniform row (uniform heads score 0, not 1)")
    add_swap_exclude(lh, "key positions kept out of the swaps (their attention stays in the softmax): none = SPEC §3, "
                         "every key before the query (default); bos = position 0 (an attention sink); first:K = "
                         "positions 0..K-1; printed with the results")
    add_min_mass(lh, "summaries leave out heads with block_mass below this (0..1; default {min_mass}; "
                     "0 keeps every head)")
    add_intervene_args(lh)
    add_force(lh)
    lh.set_defaults(func=_cmd_llm_heads)
