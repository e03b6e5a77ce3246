"""The number (positional) and letter (symbolic) multi-hop tasks (SPEC §1). Numpy only.

Main entry points: :func:`generate` (samples of a seed stream, per-index deterministic and
balanced), :func:`make_split` / :func:`make_splits` (train / val / test), :func:`solve` (independent
reference solver), :func:`export_jsonl` / :func:`read_jsonl` / :func:`format_examples`.
"""

from posym.tasks.dataset import (
    DEFAULT_HOPS,
    N_TOTAL,
    SPLIT_SIZES,
    SPLITS,
    TaskBatch,
    generate,
    make_split,
    make_splits,
    split_seed,
    tuple_count,
)
from posym.tasks.export import (batch_records, export_jsonl, format_example, format_examples, read_jsonl,
                               vocab_json)
from posym.tasks.solver import solve, solve_batch, verify_batch
from posym.constants import TASKS
from posym.tasks.vocab import LETTER_VOCAB, NUMBER_VOCAB, PAD, Vocab, get_vocab

__all__ = [
    "DEFAULT_HOPS",
    "LETTER_VOCAB",
    "NUMBER_VOCAB",
    "N_TOTAL",
    "PAD",
    "SPLITS",
    "SPLIT_SIZES",
    "TASKS",
    "TaskBatch",
    "Vocab",
    "batch_records",
    "export_jsonl",
    "vocab_json",
    "format_example",
    "format_examples",
    "generate",
    "get_vocab",
    "make_split",
    "make_splits",
    "read_jsonl",
    "solve",
    "solve_batch",
    "split_seed",
    "tuple_count",
    "verify_batch",
]
