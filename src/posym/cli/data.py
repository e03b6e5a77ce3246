"""``posym data export`` / ``posym data show``: task data as JSONL or decoded examples (SPEC §1)."""

from __future__ import annotations

import argparse

from posym.cli.common import SUPPRESS, TASK_CHOICES, OneLineParser, add_force, call, show
from posym.cli.types import nonneg_int, positive_int, positive_int_list, str_list


def _cmd_data_export(a: argparse.Namespace) -> None:
    from posym.verbs.data import export
    show(call(export, a, "task", "split", "n", "out", names=("seed", "extra_tokens", "ids", "format", "llm",
                                                                     "lengths", "runs", "force")))


def _cmd_data_show(a: argparse.Namespace) -> None:
    from posym.verbs.data import show as show_data
    show(call(show_data, a, "task", names=("split", "n", "seed", "extra_tokens")))


def _cmd_export_lm_eval(a: argparse.Namespace) -> None:
    from posym.verbs.export import export_lm_eval
    show(call(export_lm_eval, a, "out", names=("tasks", "lengths", "runs", "n", "n_examples", "force")))


def add_parsers(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="posym's tasks for other tools (lm-evaluation-harness; docs/llm.md)")
    exsub = ex.add_subparsers(dest="export_verb", required=True, parser_class=OneLineParser)
    le = exsub.add_parser("lm-eval", help="the 1-hop LLM prompts as an lm-eval task pack (SPEC §1.5)")
    le.add_argument("--out", required=True, help="folder for the task YAMLs and their JSONL data")
    le.add_argument("--tasks", type=str_list(TASK_CHOICES), default=SUPPRESS, help="number,letter (default: both)")
    le.add_argument("--lengths", type=positive_int_list, default=SUPPRESS, help="target-window sizes (default: SPEC §1.5's)")
    le.add_argument("--runs", type=positive_int, default=SUPPRESS, help="datasets per length (run seeds 0..R-1)")
    le.add_argument("--n", type=positive_int, default=SUPPRESS, help="samples per run and length")
    le.add_argument("--n-examples", type=nonneg_int, default=SUPPRESS, help="worked examples in each prompt")
    add_force(le)
    le.set_defaults(func=_cmd_export_lm_eval)
    data = sub.add_parser("data", help="generate, export and inspect task data (SPEC §1)")
    dsub = data.add_subparsers(dest="data_verb", required=True, parser_class=OneLineParser)
    for name, fn, helptext in [("export", _cmd_data_export, "write samples as JSONL or a datasets folder (--format hf)"),
                               ("show", _cmd_data_show, "print decoded examples")]:
        export = name == "export"
        d = dsub.add_parser(name, help=helptext)
        d.add_argument("--task", required=True, choices=TASK_CHOICES)
        # the export verb takes split and n as required arguments: the CLI's own defaults (OWN_DEFAULTS)
        d.add_argument("--split", default="train" if export else SUPPRESS, choices=["train", "val", "test"])
        d.add_argument("--n", type=nonneg_int, default=1000 if export else SUPPRESS, help="number of samples")
        d.add_argument("--extra-tokens", type=nonneg_int, default=SUPPRESS, help="extra target-window tokens (SPEC §1.4)")
        d.add_argument("--seed", type=nonneg_int, default=SUPPRESS, help="data seed (splits derive from it)")
        if export:
            d.add_argument("--out", required=True, help="output .jsonl file (--format hf: a folder)")
            d.add_argument("--ids", action="store_true", default=SUPPRESS,
                           help="also write token ids (input_ids, label_id) and the vocabulary OUT_STEM.vocab.json")
            d.add_argument("--format", choices=["jsonl", "hf"], default=SUPPRESS,
                           help="jsonl, or hf: a datasets.load_dataset folder (Parquet splits train/val/test of "
                                "--n samples each, ids included, dataset card; docs/runs.md)")
            d.add_argument("--llm", action="store_true", default=SUPPRESS,
                           help="with --format hf: the 1-hop LLM prompts (SPEC §1.5), one split per length, "
                                "--runs x --n samples each")
            d.add_argument("--lengths", type=positive_int_list, default=SUPPRESS,
                           help="with --llm: target-window sizes (default: SPEC §1.5's)")
            d.add_argument("--runs", type=positive_int, default=SUPPRESS, help="with --llm: datasets per length (run seeds 0..R-1)")
            add_force(d)
        d.set_defaults(func=fn)
