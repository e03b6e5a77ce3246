"""The tasks as Hugging Face ``datasets`` folders: Parquet splits and a dataset card (SPEC §1, §1.4, §1.5).

:func:`write_task_dataset` writes the training task of SPEC §1 (optionally lengthened, SPEC §1.4): the
splits ``train`` / ``val`` / ``test``, each the first ``n`` samples (at most the split's size) of the
split's stream (:func:`posym.tasks.make_split`), with the columns of ``posym data export --ids``
(:func:`posym.tasks.export.batch_records`): ``task``, ``index``, ``tokens`` (input token strings, query
last, label excluded), ``label``, ``hops``, ``answer_pos``, ``input_ids`` and ``label_id`` (ids in the
task vocabulary, ``vocab.json`` beside the card; ``<PAD>`` = 0).

:func:`write_prompt_dataset` writes the 1-hop LLM prompts (SPEC §1.5): one split per target-window
length, ``L12`` … ``L300``, holding runs ``0..runs-1`` × samples ``0..n-1`` of
:func:`posym.tasks.prompts.make_sample` (the grid ``posym llm eval --runs R --n N`` asks) with the
columns ``task``, ``length``, ``run``, ``index``, ``sequence``, ``tokens``, ``answer``, ``answer_pos``,
``choices`` (:func:`~posym.tasks.prompts.candidates`) and ``chance``.

Layout (what ``datasets.load_dataset(DIR)`` reads): ``data/<split>-00000-of-00001.parquet`` and a
``README.md`` whose YAML front matter maps each split to its file (``configs``) and lists the features
(``dataset_info``); its body records the generator's settings. Needs pyarrow (``posym[parquet]``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from posym.errors import PosymError
from posym.files import write_atomic
from posym.tasks.dataset import DEFAULT_HOPS, SPLIT_SIZES, SPLITS, generate, make_split, split_seed
from posym.tasks.export import vocab_json
from posym.tasks.vocab import check_task

_CHUNK = 50_000  # rows generated and written at a time
#: the columns of each kind of data set, in order, with their ``datasets`` feature
TASK_FEATURES: dict[str, str] = {"task": "string", "index": "int64", "tokens": "list:string", "label": "string",
                                 "hops": "int64", "answer_pos": "int64", "input_ids": "list:int64",
                                 "label_id": "int64"}
PROMPT_FEATURES: dict[str, str] = {"task": "string", "length": "int64", "run": "int64", "index": "int64",
                                   "sequence": "string", "tokens": "list:string", "answer": "string",
                                   "answer_pos": "int64", "choices": "list:string", "chance": "float64"}


def split_file(split: str) -> str:
    """The Parquet file of a split, relative to the folder (``data/<split>-00000-of-00001.parquet``)."""
    return f"data/{split}-00000-of-00001.parquet"


def prompt_split(length: int) -> str:
    """The split name of one target-window length of the LLM prompts, e.g. ``L32``."""
    return f"L{int(length)}"


def task_files(out: str | os.PathLike) -> list[Path]:
    """Every file :func:`write_task_dataset` writes under ``out`` (checked before any work)."""
    root = Path(out)
    return [root / "README.md", root / "vocab.json"] + [root / split_file(s) for s in SPLITS]


def prompt_files(out: str | os.PathLike, lengths: Sequence[int]) -> list[Path]:
    """Every file :func:`write_prompt_dataset` writes under ``out``."""
    root = Path(out)
    return [root / "README.md"] + [root / split_file(prompt_split(x)) for x in lengths]


def _pa() -> Any:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise PosymError("--format hf needs pyarrow: pip install 'posym[parquet]'") from None
    return pyarrow


def _schema(features: dict[str, str]) -> Any:
    pa = _pa()
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    return pa.schema([(k, pa.list_(types[v[5:]]) if v.startswith("list:") else types[v]) for k, v in features.items()])


def _write_parquet(path: Path, features: dict[str, str], chunks: Any) -> int:
    """Write the column dicts of ``chunks`` to ``path`` atomically; returns the Arrow bytes written."""
    pa = _pa()
    import pyarrow.parquet as pq

    schema = _schema(features)
    nbytes = 0

    def write(tmp: Path) -> None:
        nonlocal nbytes
        with pq.ParquetWriter(tmp, schema) as writer:
            for cols in chunks:
                table = pa.table({k: pa.array(cols[k], schema.field(k).type) for k in features}, schema=schema)
                nbytes += table.nbytes
                writer.write_table(table)

    write_atomic(path, write)
    return nbytes


def _task_chunks(task: str, split: str, size: int, seed: int, extra_tokens: int):
    for lo in range(0, size, _CHUNK):
        b = generate(task, min(size, lo + _CHUNK) - lo, split_seed(seed, split), extra_tokens=extra_tokens, start_index=lo)
        table = b.vocab.token_array()
        yield {"task": [task] * len(b), "index": b.index, "tokens": table[b.input_ids].tolist(),
               "label": table[b.labels].tolist(), "hops": b.hops, "answer_pos": b.answer_pos,
               "input_ids": b.input_ids.tolist(), "label_id": b.labels}


def split_sizes(n: int) -> dict[str, int]:
    """Rows per split of a task export: the first ``n`` samples, at most the split's size (SPEC §1.3)."""
    return {s: min(int(n), SPLIT_SIZES[s]) for s in SPLITS}


def write_task_dataset(out: str | os.PathLike, task: str, n: int, *, seed: int = 0,
                       extra_tokens: int = 0) -> list[Path]:
    """Write the training task as a ``datasets`` folder (module docstring; SPEC §1, §1.4); returns the files.
    Existing files are replaced: the caller checks them (``posym.verbs.Outputs``)."""
    check_task(task)
    _pa()
    make_split(task, "train", seed, 0, extra_tokens=extra_tokens)  # validates seed and layout
    root = Path(out)
    sizes = split_sizes(n)
    files, nbytes = [], {}
    for split in SPLITS:
        path = root / split_file(split)
        nbytes[split] = _write_parquet(path, TASK_FEATURES, _task_chunks(task, split, sizes[split], seed, extra_tokens))
        files.append(path)
    vocab = root / "vocab.json"
    write_atomic(vocab, lambda p: p.write_text(json.dumps(vocab_json(task), indent=2) + "\n", encoding="utf-8"))
    seeds = {s: split_seed(seed, s) for s in SPLITS}
    b = make_split(task, "train", seed, 0, extra_tokens=extra_tokens)
    settings = {"generator": "posym.tasks.make_split", "task": task, "seed": int(seed), "split_seeds": seeds,
                "split_sizes": sizes, "full_split_sizes": dict(SPLIT_SIZES), "extra_tokens": int(extra_tokens),
                "extra_rule": b.extra_rule, "distractors": b.distractors, "target_len": b.target_len,
                "pretarget_len": b.pretarget_len, "seq_len": b.seq_len, "hops": list(DEFAULT_HOPS),
                "spec": "SPEC §1.4" if extra_tokens else "SPEC §1"}
    title = f"posym {task} task" + (f", lengthened by {extra_tokens} tokens" if extra_tokens else "")
    body = (f"The {task} task of posym (docs/spec.md §1{', §1.4' if extra_tokens else ''}): the first {sizes['train']:,} / "
            f"{sizes['val']:,} / {sizes['test']:,} samples of the train / val / test streams (data seed {seed}), as "
            f"`posym data export --ids` writes them. `tokens` is the input (query last, the answer excluded), "
            f"`label` the answer, `input_ids` / `label_id` their ids in `vocab.json` (`<PAD>` = 0). The same "
            f"settings give the same rows: `posym.tasks.make_split(\"{task}\", split, seed={seed}, "
            f"extra_tokens={extra_tokens})`.")
    readme = root / "README.md"
    write_atomic(readme, lambda p: p.write_text(_card(title, body, TASK_FEATURES, sizes, nbytes, settings), encoding="utf-8"))
    return files + [vocab, readme]


def _prompt_chunk(task: str, length: int, runs: int, n: int) -> dict[str, list]:
    from posym.tasks.prompts import candidates, make_sample, sample_chance_level

    cols: dict[str, list] = {k: [] for k in PROMPT_FEATURES}
    for run in range(runs):
        for i in range(n):
            s = make_sample(task, length, run, i)
            for k, v in (("task", task), ("length", length), ("run", run), ("index", i), ("sequence", s.sequence),
                         ("tokens", list(s.tokens)), ("answer", s.answer), ("answer_pos", s.answer_pos),
                         ("choices", candidates(s)), ("chance", sample_chance_level(s))):
                cols[k].append(v)
    return cols


def write_prompt_dataset(out: str | os.PathLike, task: str, lengths: Sequence[int], runs: int, n: int) -> list[Path]:
    """Write the 1-hop LLM prompts (SPEC §1.5) as a ``datasets`` folder, one split per length (module
    docstring); returns the files. Existing files are replaced: the caller checks them."""
    from posym.tasks.lm_eval_pack import check_grid
    from posym.tasks.prompts import INSTRUCTIONS, PROMPT_VERSION

    lengths = [int(x) for x in lengths]
    check_grid([task], lengths, runs, n, 0)
    _pa()
    root = Path(out)
    files, nbytes = [], {}
    for length in lengths:
        path = root / split_file(prompt_split(length))
        nbytes[prompt_split(length)] = _write_parquet(path, PROMPT_FEATURES, [_prompt_chunk(task, length, runs, n)])
        files.append(path)
    sizes = {prompt_split(x): int(runs) * int(n) for x in lengths}
    settings = {"generator": "posym.tasks.prompts.make_sample", "task": task, "lengths": lengths, "runs": int(runs),
                "n_per_run": int(n), "prompt_version": PROMPT_VERSION, "spec": "SPEC §1.5",
                "instructions": INSTRUCTIONS[task]}
    body = (f"The 1-hop {task} prompts of posym for pretrained LLMs (docs/spec.md §1.5): one split per target-window "
            f"length, runs 0..{runs - 1} × samples 0..{n - 1} of `posym.tasks.prompts.make_sample(\"{task}\", length, "
            f"run, index)` — the prompts `posym llm eval --runs {runs} --n {n}` asks. `sequence` is what the model "
            f"sees after the instructions, `answer` the target, `choices` the distinct window tokens (the choice "
            f"protocol's candidates), `chance` 1 / their number. `posym export lm-eval` renders them as prompts.")
    readme = root / "README.md"
    write_atomic(readme, lambda p: p.write_text(_card(f"posym 1-hop {task} prompts", body, PROMPT_FEATURES, sizes, nbytes,
                                                      settings), encoding="utf-8"))
    return files + [readme]


def _feature_yaml(name: str, kind: str) -> list[str]:
    if kind.startswith("list:"):
        return [f"  - name: {name}", f"    sequence: {kind[5:]}"]
    return [f"  - name: {name}", f"    dtype: {kind}"]


def _card(title: str, body: str, features: dict[str, str], sizes: dict[str, int], nbytes: dict[str, int],
          settings: dict[str, Any]) -> str:
    """The dataset card: YAML front matter (configs, dataset_info) and the settings (values as JSON)."""
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split in sizes:
        lines += [f"  - split: {split}", f"    path: {split_file(split)}"]
    lines += ["dataset_info:", "  features:"]
    for name, kind in features.items():
        lines += _feature_yaml(name, kind)
    lines += ["  splits:"]
    for split, rows in sizes.items():
        lines += [f"  - name: {split}", f"    num_bytes: {int(nbytes[split])}", f"    num_examples: {int(rows)}"]
    lines += ["tags:", "- posym", "- synthetic", "---", "", f"# {title}", "", body, "",
              "```python", "import datasets", "ds = datasets.load_dataset(\"THIS_FOLDER\")",
              f"ds[\"{next(iter(sizes))}\"][0]", "```", "", "## Generator settings", "",
              "| setting | value |", "|---|---|"]
    lines += [f"| {k} | `{json.dumps(v, ensure_ascii=False)}` |" for k, v in settings.items()]
    lines += ["", "## Splits", "", "| split | rows |", "|---|---|"] + [f"| {s} | {r:,} |" for s, r in sizes.items()]
    return "\n".join(lines) + "\n"


__all__ = ["PROMPT_FEATURES", "TASK_FEATURES", "prompt_files", "prompt_split", "split_file", "split_sizes",
           "task_files", "write_prompt_dataset", "write_task_dataset"]
