"""The tables of a run directory: their schema (columns and units), one writer for every table posym
writes (CSV, plus Parquet beside it when ``pyarrow`` is installed) and :func:`load_run`, which reads a
run's tables back as pandas DataFrames. ``docs/runs.md`` is this schema in prose.

Every CSV table ``x.csv`` is also written as ``x.parquet`` (same columns, same rows) when ``pyarrow``
can be imported (``pip install -e '.[parquet]'``); the CSV stays the primary file, so runs written
with and without pyarrow read the same.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping

import pandas as pd

from posym.constants import TASKS
from posym.errors import PosymError
from posym.files import write_atomic
from posym.runs import layout


@dataclass(frozen=True)
class TableSchema:
    """One table of a run directory: file name (``{gamma}``/``{layer}`` stand for the file's
    parameter), what a row is, its columns (name -> meaning and unit), who writes it, its key and,
    for a table that is resumed, the kind of every column (:data:`KINDS`)."""

    file: str
    row: str
    columns: Mapping[str, str]
    writer: str
    key: tuple[str, ...] = field(default=())
    optional: tuple[str, ...] = field(default=())  # columns a valid file may lack (older writers, variants)
    #: column -> kind of value, for tables that are resumed or appended (:func:`check_rows`)
    kinds: Mapping[str, str] = field(default_factory=dict)


#: The column every measuring verb adds (docs/interventions.md): the canonical string of the
#: inference-time intervention the row was measured under; :data:`NO_INTERVENTION` for the untouched
#: model (also what a table written before the column existed stands for).
INTERVENTION = "intervention"
NO_INTERVENTION = "none"
_INTERVENTION_DOC = "canonical string of the inference-time intervention (`none`: the untouched model; docs/interventions.md)"

def short_intervention(intervention: str) -> str:
    """A canonical string for display: runs of consecutive IDs in ``keep=`` / ``layers=`` lists shown
    as ``a–b`` (``freq-mask:keep=1+2+…+48`` → ``freq-mask:keep=1–48``); tables keep the full string."""
    def runs(values: str) -> str:
        try:
            ids = [int(v) for v in values.split("+")]
        except ValueError:
            return values
        parts, start = [], 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or ids[i] != ids[i - 1] + 1:
                a, b = ids[start], ids[i - 1]
                parts.append(str(a) if a == b else f"{a}+{b}" if b == a + 1 else f"{a}–{b}")
                start = i
        return "+".join(parts)

    name, colon, rest = intervention.partition(":")
    if not colon:
        return intervention
    items = []
    for item in rest.split(","):
        key, eq, value = item.partition("=")
        items.append(f"{key}={runs(value)}" if eq and key in ("keep", "layers") else item)
    return f"{name}:{','.join(items)}"


_HOPS = {f"acc_hop{h}": f"accuracy on {h}-hop samples (fraction)" for h in range(1, 5)}

_SCORE_COLUMNS = {
    "step": "optimizer step of the scored model", "layer": "layer index (0-based)", "head": "head index",
    "tau": "temperature τ of the swap weights", "s_pos": "positional score s_POS in [-1, 1]",
    "s_sym": "symbolic score s_SYM in [-1, 1]", "entropy": "attention entropy H / ln n of the query in [0, 1] (1 = uniform)",
    "swap_mass": "the query's attention on the swapped keys (fraction)", "n_prompts": "prompts averaged",
    INTERVENTION: _INTERVENTION_DOC + "; absent from the tables head tracking, the callback and the hook append "
                  "(the untouched model)"}

#: The tables of a run directory (SPEC §2–§5), by the name :func:`load_run` gives them.
RUN_TABLES: dict[str, TableSchema] = {
    "metrics": TableSchema(layout.METRICS, "evaluation (split `val`) and for the final test (split `test`: the first `n_test` "
                           "sequences of the test split, all 45,600 unless `posym train --n-test N`)", {
        "split": "`val` or `test`", "step": "optimizer step (0 = before training)",
        "train_loss": "mean training loss since the previous evaluation (nats)", "lr": "learning rate",
        "loss": "cross-entropy of the answer token on the split (nats)", "acc": "answer accuracy (fraction)",
        **_HOPS, "time_s": "wall seconds since the start of training"}, "posym train", ("split", "step")),
    "scores": TableSchema(layout.SCORES, "head, step and softmax temperature (SPEC §3)", _SCORE_COLUMNS,
        "head tracking, posym scores, the callback and the hook",
        ("step", "layer", "head", "tau", INTERVENTION), ("swap_mass", "n_prompts", INTERVENTION)),
    "checkpoint_scores": TableSchema(layout.CHECKPOINT_SCORES, "checkpoint of an HF `Trainer` output_dir, head and τ "
                                     "(`posym scores --series OUTPUT_DIR`; the callback's denser table is `scores.csv`)",
                                     _SCORE_COLUMNS, "posym scores --series",
                                     ("step", "layer", "head", "tau", INTERVENTION),
                                     ("swap_mass", "n_prompts", INTERVENTION)),
    "purity": TableSchema("purity_gamma{gamma}.csv", "head: its kind at the last step (SPEC §3 purity rule)", {
        "layer": "layer index", "head": "head index", "kind": "`positional`, `symbolic` or `mixed`",
        "pure_from": "first step from which the head stays pure (empty if mixed)",
        "s_pos_final": "s_POS at the last step", "s_sym_final": "s_SYM at the last step"}, "posym dynamics",
        ("layer", "head")),
    "pure_counts": TableSchema("pure_counts_gamma{gamma}.csv", "step: the number of pure heads (Fig. 2C)", {
        "step": "optimizer step", "positional": "pure positional heads", "symbolic": "pure symbolic heads"},
        "posym dynamics", ("step",)),
    "ablation": TableSchema(layout.ABLATION, "ablated head (or none), on the test split", {
        "step": "step of the analysed checkpoint (empty if unknown)",
        "mode": "`none` (no ablation), `zero` or `mean` ablation", "layer": "layer index", "head": "head index",
        "acc": "answer accuracy after the ablation (fraction)", **_HOPS}, "posym ablate", ("mode", "layer", "head")),
    "freq_use": TableSchema(layout.FREQ_USE, "RoPE frequency of each head (SPEC §4, Fig. 4A)", {
        "step": "step of the analysed checkpoint (empty if unknown)",
        "layer": "layer index", "head": "head index", "freq_id": "frequency index k (1 = fastest)",
        "angle": "rotation per position θ_k (radians)", "rotary": "False for the non-rotary term",
        "use": "u_k: mean over prompts of max_j |λ^(k)_{t,j}| (logit units)", "use_frac": "u_k / Σ_k u_k",
        "n_prompts": "prompts averaged", INTERVENTION: _INTERVENTION_DOC}, "posym freqs",
        ("layer", "head", "freq_id", INTERVENTION), (INTERVENTION,)),
    "freq_table": TableSchema(layout.FREQ_TABLE, "head: its frequency summary (Paper A Table 1)", {
        "step": "step of the analysed checkpoint (empty if unknown)",
        "layer": "layer index", "head": "head index", "weighted_id": "use-weighted mean frequency index",
        "weighted_angle": "use-weighted mean θ (radians)", "dominant_id": "most used frequency index",
        "dominant_angle": "θ of the dominant frequency (radians)",
        "nonrotary_share": "share of the non-rotary term in the use", INTERVENTION: _INTERVENTION_DOC},
        "posym freqs", ("layer", "head", INTERVENTION), (INTERVENTION,)),
    "freq_scores": TableSchema(layout.FREQ_SCORES, "frequency of each head: scores with only that frequency kept (SPEC §4)", {
        "step": "step of the analysed checkpoint (empty if unknown)",
        "layer": "layer index", "head": "head index", "freq_id": "frequency index", "angle": "θ_k (radians)",
        "rotary": "False for the non-rotary term", "tau": "temperature τ", "s_pos": "s_POS", "s_sym": "s_SYM",
        "n_prompts": "prompts averaged", INTERVENTION: _INTERVENTION_DOC}, "posym freqs",
        ("layer", "head", "freq_id", "tau", INTERVENTION), (INTERVENTION,)),
    "qk_geometry": TableSchema("qk_geometry_L{layer}.csv", "query or key point of the Fig. 4B geometry", {
        "step": "step of the analysed checkpoint (empty if unknown)",
        "prompt": "prompt index", "kind": "`query` or `key`", "position": "token position", "token": "token",
        "value": "the token's value", "x": "first coordinate of the rotated 2-D pair",
        "y": "second coordinate of the rotated pair", "x_pre": "x before rotation", "y_pre": "y before rotation",
        "layer": "layer index", "head": "head index", "freq_id": "the frequency plotted", "angle": "θ (radians)",
        INTERVENTION: _INTERVENTION_DOC}, "posym freqs", optional=(INTERVENTION,)),
    "lengthgen": TableSchema(layout.LENGTHGEN, "added length and data seed (Fig. 5B)", {
        "task": "`number` or `letter`", "step": "the evaluated checkpoint's step (empty if unknown)",
        "weights": "digest of the evaluated checkpoint's weights (SHA-256, first 16 hex digits)",
        "extra_rule": "what the added tokens are", "distractors": "the letter task's distractor rule of the data",
        INTERVENTION: _INTERVENTION_DOC,
        "extra_tokens": "added target-window tokens", "seed": "data seed", "n": "samples",
        "acc": "answer accuracy (fraction)", **{h: f"{m} (empty if no such sample)" for h, m in _HOPS.items()},
        "seconds": "wall seconds of the point", "peak_rss_mb": "peak resident memory so far (MB)"},
        "posym lengthgen", (INTERVENTION, "extra_tokens", "seed"), (INTERVENTION,), kinds={
            "task": "task", "step": "count?", "weights": "hex", "extra_rule": "name", "distractors": "name",
            INTERVENTION: "intervention",
            "extra_tokens": "count", "seed": "count", "n": "positive", "acc": "fraction",
            **{h: "fraction?" for h in _HOPS}, "seconds": "nonnegative", "peak_rss_mb": "nonnegative"}),
    "lengthgen_summary": TableSchema(layout.summary_path(layout.LENGTHGEN).name, "added length, over data seeds", {
        INTERVENTION: _INTERVENTION_DOC, "extra_tokens": "added tokens", "acc_mean": "mean accuracy",
        "acc_sd": "sample sd over data seeds",
        **{f"acc_hop{h}_{s}": f"{'mean' if s == 'mean' else 'sd'} accuracy on {h}-hop samples"
           for h in range(1, 5) for s in ("mean", "sd")}, "n_seeds": "data seeds"}, "posym lengthgen",
        (INTERVENTION, "extra_tokens"), (INTERVENTION, *(f"acc_hop{h}_{s}" for h in range(1, 5) for s in ("mean", "sd"))),
        kinds={INTERVENTION: "intervention", "extra_tokens": "count", "acc_mean": "fraction", "acc_sd": "nonnegative?",
               **{f"acc_hop{h}_mean": "fraction?" for h in range(1, 5)},
               **{f"acc_hop{h}_sd": "nonnegative?" for h in range(1, 5)}, "n_seeds": "positive"}),
}


#: What a cell of each kind must hold (a trailing ``?``: or be empty).
KINDS: dict[str, str] = {"task": "`number` or `letter`", "count": "an integer >= 0", "positive": "an integer >= 1",
                         "fraction": "a number in [0, 1]", "nonnegative": "a number >= 0", "hex": "a hex digest",
                         "name": "a name", "intervention": "an intervention's canonical string (`none`, `ntk:kappa=4`, …)",
                         "split": "`val` or `test`", "score": "a score in [-1, 1]"}


def _cell_ok(kind: str, value: str) -> bool:
    if kind.endswith("?"):
        return value.strip().lower() in ("", "nan") or _cell_ok(kind[:-1], value)
    v = value.strip()
    if kind == "task":
        return v in TASKS
    if kind == "split":
        return v in ("val", "test")
    if kind == "hex":
        return bool(v) and all(c in "0123456789abcdef" for c in v)
    if kind == "name":
        return bool(v) and v.replace("_", "").replace("-", "").isalnum()
    if kind == "intervention":
        name, colon, rest = v.partition(":")
        return (v == NO_INTERVENTION or (bool(colon) and name.replace("-", "").isalpha()
                                and all(c.isalnum() or c in "=.,+-_" for c in rest)))
    try:
        x = float(v)
    except ValueError:
        return False
    if kind in ("count", "positive"):
        return x.is_integer() and x >= (1 if kind == "positive" else 0)
    if kind == "fraction":
        return 0.0 <= x <= 1.0
    if kind == "score":  # s_POS / s_SYM, up to float rounding
        return -1.0 - 1e-6 <= x <= 1.0 + 1e-6
    return kind == "nonnegative" and x >= 0.0  # NaN fails every comparison


def _cell_text(value: str) -> str:
    """A cell as compared in a key: ``"6750"``, ``"6750.0"`` and ``" 6750"`` are one value."""
    v = value.strip()
    try:
        x = float(v)
    except ValueError:
        return v
    return str(int(x)) if x.is_integer() else v


def _csv_lines(path: Path, remedy: str) -> tuple[str, list[list[str]]]:
    """``(text, CSV rows)`` of the table at ``path``; PosymError (then ``remedy``) for bytes that are not
    text or an empty file."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise PosymError(f"{path} is not a text table; {remedy}") from None
    lines = list(csv.reader(io.StringIO(text)))
    if not lines:
        raise PosymError(f"{path} is empty; {remedy}")
    return text, lines


def check_rows(path: str | os.PathLike, schema: TableSchema, remedy: str) -> pd.DataFrame:
    """The table at ``path`` read back after checking it against ``schema`` (before it is resumed):
    every column present, no torn or short line, every cell of its kind (``schema.kinds``), no key
    twice. PosymError naming the row and column, followed by ``remedy`` (what the user can do)."""
    path = Path(path)
    text, lines = _csv_lines(path, remedy)
    if not text.endswith("\n"):
        _check_header(path, lines[0], schema, remedy)
        raise PosymError(f"{path} row {len(lines) - 1}: the line is torn (no line end); remove the row, or {remedy}")
    _check_body(path, lines[0], list(enumerate(lines[1:], start=1)), schema, remedy)
    return pd.read_csv(io.StringIO(text)) if len(lines) > 1 else pd.DataFrame(columns=lines[0])


def _check_header(path: Path, header: list[str], schema: TableSchema, remedy: str) -> None:
    missing = [c for c in schema.columns if c not in header and c not in schema.optional]
    if missing:
        raise PosymError(f"{path} lacks the column(s) {', '.join(missing)}; {remedy}")


def _check_body(path: Path, header: list[str], rows: list[tuple[int, list[str]]], schema: TableSchema,
                remedy: str) -> None:
    """The checks of :func:`check_rows` on ``rows`` (file row number, cells) of the table at ``path``:
    columns, cell counts, kinds, unique keys."""
    _check_header(path, header, schema, remedy)
    for i, cells in rows:
        if len(cells) != len(header):
            raise PosymError(f"{path} row {i}: {len(cells)} cells, the header has {len(header)}; fix or remove the "
                             f"row, or {remedy}")
    raw = pd.DataFrame([cells for _, cells in rows], columns=header, dtype=str)
    numbers = [i for i, _ in rows]
    kinds = {c: k for c, k in schema.kinds.items() if c in header}  # an optional column may be absent
    for i, row in zip(numbers, raw[list(kinds)].itertuples(index=False)):
        for (col, kind), v in zip(kinds.items(), row):
            if not _cell_ok(kind, v):
                want = KINDS[kind.rstrip("?")] + (" or empty" if kind.endswith("?") else "")
                raise PosymError(f"{path} row {i}: {col} = {v!r} is not {want}; fix or remove the row, or {remedy}")
    key = [c for c in schema.key if c in header]
    if key and len(raw):
        keys = raw[key].map(_cell_text)
        dup = keys.duplicated(keep=False)
        if dup.any():
            at = dup.to_numpy().nonzero()[0]
            point = ", ".join(f"{k} {raw[k].iloc[at[0]]}" for k in key)
            raise PosymError(f"{path} rows {numbers[at[0]]} and {numbers[at[1]]} repeat the point {point}; remove "
                             f"one, or {remedy}")


# --- resume checks: the tables a resumed training run keeps (train --resume) ---------------------------
#: What a refusal of a corrupt run table on ``train --resume`` tells the user to do.
RESUME_REMEDY = "restore it, or pass --force to start the run over"

#: Kinds of the columns of the tables that ``train --resume`` keeps and appends to (:func:`check_resumed`).
RESUMED_KINDS: dict[str, dict[str, str]] = {
    "metrics": {"split": "split", "step": "count", "train_loss": "nonnegative?", "lr": "nonnegative",
                "loss": "nonnegative?", "acc": "fraction", **{h: "fraction?" for h in _HOPS},
                "time_s": "nonnegative"},
    "scores": {"step": "count", "layer": "count", "head": "count", "tau": "nonnegative", "s_pos": "score?",
               "s_sym": "score?", "entropy": "nonnegative?", "swap_mass": "nonnegative?", "n_prompts": "positive",
               INTERVENTION: "intervention"},
}


def check_resumed(path: str | os.PathLike, name: str, upto_step: int, remedy: str,
                  cover: "Iterable[int] | None" = None, split: str | None = None) -> pd.DataFrame:
    """The rows of the run table ``path`` (:data:`RUN_TABLES` ``name``) that a run resumed from the
    checkpoint at ``upto_step`` keeps (``step <= upto_step``), checked as :func:`check_rows` checks a
    resumed length table: its columns, every kept cell of its kind (:data:`RESUMED_KINDS`), no key twice
    and, with ``cover``, a row for each of those steps (of ``split`` when given: the evaluation steps
    the schedule says were written before the checkpoint). Rows after the checkpoint and a torn last
    line (what a killed writer leaves) are dropped unchecked, as resuming drops them. A missing file
    holds no rows. PosymError naming the file, row and column, then ``remedy``."""
    from dataclasses import replace

    path = Path(path)
    schema = replace(RUN_TABLES[name], kinds=RESUMED_KINDS[name])
    if path.is_file():
        text, lines = _csv_lines(path, remedy)
        header, body = lines[0], list(enumerate(lines[1:], start=1))
        if body and not text.endswith("\n"):
            body = body[:-1]  # torn by a killed writer: after the checkpoint, dropped
        _check_header(path, header, schema, remedy)
        col = header.index("step")
        body = [(i, cells) for i, cells in body
                if not (len(cells) == len(header) and _cell_ok("count", cells[col]) and float(cells[col]) > upto_step)]
        _check_body(path, header, body, schema, remedy)
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([header] + [cells for _, cells in body])
        kept = pd.read_csv(io.StringIO(buf.getvalue())) if body else pd.DataFrame(columns=header)
    else:
        kept = pd.DataFrame(columns=list(schema.columns))
    if cover is not None:
        rows = kept if split is None else kept[kept["split"].astype(str) == split]
        have = {int(s) for s in rows["step"]}
        missing = [s for s in sorted(set(cover)) if s <= upto_step and s not in have]
        if missing:
            shown = ", ".join(map(str, missing[:5])) + (", …" if len(missing) > 5 else "")
            what = f"{split} rows" if split else "rows"
            raise PosymError(f"{path} lacks the {what} of step(s) {shown} (written before the checkpoint of step "
                             f"{upto_step} that is resumed); {remedy}")
    return kept


def with_step(df: pd.DataFrame, step: int | None) -> pd.DataFrame:
    """``df`` with a first column ``step``: the checkpoint step an analysis measured (empty if unknown)."""
    out = df.copy()
    out.insert(0, "step", pd.Series([step] * len(df), index=df.index, dtype="Int64"))
    out.attrs = dict(df.attrs)
    return out


def with_intervention(df: pd.DataFrame, intervention: str) -> pd.DataFrame:
    """``df`` with a last column :data:`INTERVENTION` holding ``intervention`` (a canonical string,
    docs/interventions.md) on every row, so tables measured under several interventions concatenate."""
    out = df.copy()
    out[INTERVENTION] = pd.Series([str(intervention)] * len(df), index=df.index, dtype=object)
    out.attrs = dict(df.attrs)
    return out


def parquet_available() -> bool:
    """True when ``pyarrow`` (pandas' Parquet engine) can be imported."""
    return importlib.util.find_spec("pyarrow") is not None


def parquet_path(csv_path: str | os.PathLike) -> Path:
    """``x.parquet`` beside ``x.csv``."""
    return Path(csv_path).with_suffix(".parquet")


def to_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """``df.to_parquet`` of the rows and columns only (``df.attrs``, e.g. side tables, are not stored)."""
    plain = df.copy(deep=False)
    plain.attrs = {}
    plain.to_parquet(path, index=False)


def write_parquet_copy(df: pd.DataFrame, csv_path: str | os.PathLike) -> Path | None:
    """Write ``df`` as the Parquet sibling of ``csv_path`` (atomically) when pyarrow is installed."""
    if not parquet_available():
        return None
    out = parquet_path(csv_path)
    write_atomic(out, lambda p: to_parquet(df, p), mkdir=False)
    return out


def write_table(df: pd.DataFrame, path: str | os.PathLike) -> list[Path]:
    """Write a table as CSV (atomically) and, with pyarrow, as Parquet beside it; returns the paths."""
    path = Path(path)
    write_atomic(path, lambda p: df.to_csv(p, index=False), mkdir=False)
    pq = write_parquet_copy(df, path)
    return [path] + ([pq] if pq else [])


def append_table(df: pd.DataFrame, path: str | os.PathLike, columns: list[str] | None = None) -> None:
    """Append rows to a CSV table (header on the first write) and refresh its Parquet copy."""
    path = Path(path)
    rows = df if columns is None else df[columns]
    new = not path.exists()
    with path.open("a", newline="") as f:
        rows.to_csv(f, header=new, index=False)
    refresh_parquet(path)


def refresh_parquet(csv_path: str | os.PathLike) -> Path | None:
    """Rewrite the Parquet copy of a CSV table that was changed in place (with pyarrow only)."""
    return write_parquet_copy(pd.read_csv(csv_path), csv_path) if parquet_available() else None


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    """A table by its CSV path (the Parquet copy is not needed to read it back)."""
    path = Path(path)
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise PosymError(f"cannot read {path}: {exc}") from None


def _files(run: Path, schema: TableSchema) -> Iterator[tuple[str, Path]]:
    """(suffix of the table name, path) of every file of ``schema`` in ``run``."""
    if "{" not in schema.file:
        if (run / schema.file).is_file():
            yield "", run / schema.file
        return
    head, tail = schema.file.split("{", 1)
    tail = tail.split("}", 1)[1]
    for p in sorted(run.glob(f"{head}*{tail}")):
        yield p.name[len(head):len(p.name) - len(tail)], p


def check_columns(df: pd.DataFrame, schema: TableSchema, path: str | os.PathLike) -> pd.DataFrame:
    """``df`` (read from ``path``) if it has the documented columns of ``schema``; PosymError naming
    the file and the missing columns otherwise (a ``step`` column may be absent from a scores table
    of one model, and ``posym scores --per-prompt`` adds ``prompt``/``query_pos``)."""
    allowed = set(schema.optional) | ({"step", "n_prompts"} if "prompt" in df.columns else set())
    if schema.file == layout.SCORES and "step" not in df.columns:
        allowed.add("step")
    missing = [c for c in schema.columns if c not in df.columns and c not in allowed]
    if missing:
        raise PosymError(f"{path} is not a valid {Path(schema.file).name} table: it lacks the columns "
                         f"{', '.join(missing)} (docs/runs.md)")
    return df


def check_unique_keys(df: pd.DataFrame, schema: TableSchema, path: str | os.PathLike) -> pd.DataFrame:
    """``df`` if no two rows share the key of ``schema`` (per-prompt rows add ``prompt`` to it);
    PosymError naming the first repeated key otherwise (a table appended twice)."""
    key = [k for k in schema.key if k in df.columns] + (["prompt"] if "prompt" in df.columns else [])
    if not key:
        return df
    dup = df.duplicated(key, keep=False)
    if dup.any():
        first = df.loc[dup, key].iloc[0]
        count = int((df[key] == first.values).all(axis=1).sum())
        where = " ".join(f"{k} {first[k]:g}" if isinstance(first[k], float) else f"{k} {first[k]}" for k in key)
        raise PosymError(f"{path} has {count} rows for {where}; it was written twice into one table "
                         f"(remove the extra rows or score again into a new folder)")
    return df


def read_scores(path: str | os.PathLike, name: str = "scores") -> pd.DataFrame:
    """A ``scores.csv`` table (SPEC §3; ``name``: its :data:`RUN_TABLES` entry) checked against its
    schema and for unique (step, layer, head, tau) keys: what :func:`load_run` and the tracker read."""
    schema = RUN_TABLES[name]
    df = read_table(path)
    return check_unique_keys(check_columns(df, schema, path), schema, path)


def schema_of(path: str | os.PathLike) -> TableSchema | None:
    """The :data:`RUN_TABLES` schema whose file name ``path`` has (``purity_gamma0.1.csv`` is a
    ``purity`` table), or None for a file of no run-table name."""
    name = Path(path).name
    for schema in RUN_TABLES.values():
        head, brace, rest = schema.file.partition("{")
        tail = rest.partition("}")[2]
        if (name == schema.file) if not brace else (name.startswith(head) and name.endswith(tail)
                                                     and len(name) > len(head) + len(tail)):
            return schema
    return None


def read_checked(path: str | os.PathLike, name: str | None = None, key_only: bool = False) -> pd.DataFrame:
    """The run table at ``path``, read and checked against the documented columns of :data:`RUN_TABLES`
    entry ``name`` (default: the entry its file name has; a file of no run-table name is only read), or
    with ``key_only`` against its key columns alone (what identifies a row; for readers that use only
    some columns): PosymError naming the file for a garbage, empty or column-less table."""
    schema = RUN_TABLES[name] if name is not None else schema_of(path)
    df = read_table(path)
    if schema is None:
        return df
    if not key_only:
        return check_columns(df, schema, path)
    missing = [c for c in schema.key if c not in df.columns and c not in schema.optional]
    if missing:
        raise PosymError(f"{path} is not a valid {Path(schema.file).name} table: it lacks the column(s) "
                         f"{', '.join(missing)} (docs/runs.md); restore it, or write it again")
    return df


def _is_tracker_folder(run: Path) -> bool:
    """A folder of the tracker/callback (``scores.csv`` with its ``scores.json``) or an HF
    ``Trainer`` output_dir (``trainer_state.json`` or ``checkpoint-N/``)."""
    return ((run / layout.SCORES_JSON).is_file() or (run / layout.HF_TRAINER_STATE).is_file()
            or any(p.is_dir() and p.name.startswith("checkpoint-") for p in run.iterdir()))


def load_run(run_dir: str | os.PathLike) -> dict[str, pd.DataFrame]:
    """Every table of a run directory as a DataFrame, keyed by :data:`RUN_TABLES` name (``metrics``,
    ``scores``, ``lengthgen``, ...); parameterised files get their parameter appended
    (``purity_gamma0.1``, ``qk_geometry_L0``). Only tables present are returned; ``attrs["meta"]``
    of each frame holds the run's ``posym.json`` (or, for a folder of the tracker or the HF callback,
    its ``scores.json``). Accepts a posym run directory, a ``ScoreTracker`` folder and an HF
    ``Trainer`` output_dir with the callback's tables. Each table is checked against its documented
    columns (and ``scores`` for unique keys): PosymError naming the file otherwise, or if
    ``run_dir`` is none of these folders."""
    run = Path(run_dir)
    if not run.is_dir():
        raise PosymError(f"no such run directory: {run}" if not run.exists() else f"{run} is not a folder")
    posym_run = (run / layout.POSYM_JSON).is_file() or (run / layout.METRICS).is_file()
    if not posym_run and not _is_tracker_folder(run):
        raise PosymError(f"{run} is not a posym run directory (no {layout.POSYM_JSON}), a ScoreTracker folder "
                         f"(no {layout.SCORES_JSON}) or an HF Trainer output_dir (no {layout.HF_TRAINER_STATE})")
    meta = layout.read_meta(run) if posym_run else layout.read_json(run / layout.SCORES_JSON)
    out: dict[str, pd.DataFrame] = {}
    for name, schema in RUN_TABLES.items():
        for suffix, path in _files(run, schema):
            label = schema.file.split("{", 1)[0] + suffix if suffix else name
            df = (read_scores(path, name) if name in ("scores", "checkpoint_scores")
                  else check_columns(read_table(path), schema, path))
            df.attrs["meta"] = meta
            out[label] = df
    return out


def schema_markdown() -> str:
    """:data:`RUN_TABLES` as the Markdown tables of ``docs/runs.md`` (a test keeps the two equal)."""
    lines = []
    for name, t in RUN_TABLES.items():
        lines += [f"### `{t.file}` — `{name}`", "", f"One row per {t.row}; written by `{t.writer}`"
                  + (f"; key: {', '.join(f'`{k}`' for k in t.key)}" if t.key else "") + ".", "",
                  "| column | meaning (unit) |", "|---|---|"]
        lines += [f"| `{c}` | {m} |" for c, m in t.columns.items()]
        lines.append("")
    return "\n".join(lines)


__all__ = ["INTERVENTION", "KINDS", "NO_INTERVENTION", "RESUMED_KINDS", "RESUME_REMEDY", "RUN_TABLES", "TableSchema",
           "append_table", "check_columns", "check_resumed", "check_rows", "check_unique_keys", "load_run",
           "parquet_available", "parquet_path", "read_scores", "read_table", "refresh_parquet", "schema_markdown",
           "short_intervention", "to_parquet", "with_intervention", "with_step", "write_parquet_copy", "write_table"]
