"""The 1-hop length-generalisation protocol for pretrained LLMs (SPEC §1.5, Paper A Table 3).

:func:`llm_eval` asks a local Hugging Face model (:mod:`posym.lengthgen.hf_llm`) or an
OpenAI-compatible endpoint (:mod:`posym.lengthgen.api`) every sample of
``tasks × lengths × runs × n`` (:mod:`posym.tasks.prompts`) under one of two protocols:

* ``generate`` — the greedy reply is parsed (:func:`~posym.tasks.prompts.parse_answer`) and compared
  with the target;
* ``choice`` (local models only) — every distinct target-window token is scored by the model's
  log-probability as the reply (:class:`~posym.lengthgen.hf_llm.HFChoice`); the argmax is the
  prediction and ``1 / (number of candidates)`` the sample's chance level.

It writes to ``out``:

* ``answers.jsonl`` — one line per answered sample (protocol, intervention, model, task, length, run,
  index, prompt digest, target, prediction, correct, wall seconds per prompt of its call;
  ``generate``: the raw output; ``choice``: chance, candidate log-probs, the target's rank). It is
  the cache: a rerun (or a resumed, interrupted run) asks only for the samples whose ``(protocol,
  intervention, model, task, length, run, index, prompt digest)`` is not there yet (a record without
  a protocol is a ``generate`` one, without an intervention a ``none`` one); lines are flushed as
  answers arrive, and a torn last line is ignored. One writer per folder: a call holds the lock
  ``.answers.jsonl.lock`` (``posym.runs.lock.DirLock.for_file``) while it asks and tabulates, so a
  second ``llm eval`` into the same ``--out`` is refused in one line (before its model loads when
  ``--out`` is given). A sample recorded twice (by two writers before the lock existed) is kept once
  and the repeat removed from the file; two different answers to one sample are refused, naming both lines.
* ``llm_runs.csv`` — accuracy (and, for ``choice``, chance) per (intervention, task, length, run);
* ``llm_table.csv`` / ``llm_table.md`` — Table 3 style: mean (sd) over runs per (intervention, task, length);
  sd is the sample standard deviation (ddof = 1) of the per-run accuracies; ``choice`` adds the
  chance level (mean over samples of ``1 / candidates``);
* ``llm_interventions.csv`` / ``.md`` — ``choice`` with several interventions only: each
  intervention against ``none`` on the same prompts (:func:`intervention_contrast`): accuracy and the
  answer's normalised rank, their paired differences with standard errors;
* ``llm_eval.json`` — the settings, versions, counts and timings.

Both protocols may share a cache, but the tables have one protocol: a folder whose tables hold the
other protocol is refused (:func:`check_out`) rather than overwritten. The default ``out`` is
``runs/llm/<model>`` (generate) and ``runs/llm/<model>-choice`` (choice).

**Interventions** (docs/interventions.md): ``intervene`` names inference-time changes of a local
model, one measurement each, applied by the ``apply`` context the verb passes in (the analyses of one
floor do not import each other). Under an intervention other than ``none`` that the verb does not name
in ``kv_cache_ok`` (temperature and interpolate read the forward's token indices or length), every
forward is a full sequence from position 0, one prompt at a time, without KV cache or padding:
``generate`` decodes without cache, ``choice`` scores with ``HFChoice(cache=False)`` (the prompt
once, then the candidates' distinct prefixes after it, full forwards batched by length); the others
(rope-base, ntk, freq-mask) use the cached answerers as ``none`` does.

The figure (accuracy vs length) is drawn by :func:`posym.report.llm_figures.plot_llm_lengthgen`
from ``llm_table.csv`` (the report layer reads tables; this module draws nothing).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import pandas as pd

from posym.errors import PosymError
from posym.lengthgen.llm_answers import CacheWriter, answer_key, answer_record, drop_lines, load_cache, read_cache, record_key
from posym.lengthgen.llm_tables import (
    ALL_LENGTHS,
    DEFAULT_OUT_ROOT,
    check_out,
    contrast_markdown,
    default_llm_out,
    intervention_contrast,
    normalised_rank,
    read_llm_table,
    short_label,
    summarize,
    table_markdown,
    table_title,
    tables_protocol,
    write_tables,
)
from posym.runs import layout
from posym.runs.lock import DirLock
from posym.runs.tables import NO_INTERVENTION, parquet_path, write_table
from posym.tasks.prompts import (
    DEFAULT_LENGTHS,
    PROMPT_VERSION,
    TASKS,
    build_messages,
    candidates,
    make_sample,
    prompt_digest,
)

DEFAULT_N = 40  # samples per (task, length, run)
DEFAULT_RUNS = 5
CACHE_NAME = layout.LLM_ANSWERS
PROTOCOLS: tuple[str, ...] = ("generate", "choice")

#: ``generate``: prompts -> raw replies; ``choice``: (prompts, candidates per prompt) -> log-probs.
AnswerFn = Callable[[list[list[dict[str, str]]]], list[str]]
ScoreFn = Callable[[list[list[dict[str, str]]], list[list[str]]], list[list[float]]]


class Measurement(NamedTuple):
    """One intervention of a protocol run: its canonical string, the context that applies it while its
    samples are asked, and the answerer used under it (None: :func:`run_protocol`'s ``answer_fn``)."""

    intervention: str = NO_INTERVENTION
    context: Callable[[], AbstractContextManager] = nullcontext
    answer_fn: AnswerFn | ScoreFn | None = None


@dataclass
class LLMEvalResult:
    """What :func:`llm_eval` / :func:`run_protocol` produced."""

    out_dir: Path
    model: str
    table: pd.DataFrame  # task, length, mean, sd, runs, n (+ chance for the choice protocol)
    runs: pd.DataFrame  # task, length, run, n, correct, accuracy (+ chance)
    n_new: int  # samples answered by the model in this call
    n_cached: int  # samples taken from the cache
    seconds: float
    paths: dict[str, Path] = field(default_factory=dict)
    protocol: str = "generate"


# --- protocol --------------------------------------------------------------------------------------
def _check_grid(tasks: Sequence[str], lengths: Sequence[int], runs: int, n: int, protocol: str) -> None:
    if protocol not in PROTOCOLS:
        raise PosymError(f"unknown protocol {protocol!r}; choose from {', '.join(PROTOCOLS)}")
    bad = [t for t in tasks if t not in TASKS]
    if bad or not tasks:
        raise PosymError(f"unknown task(s) {bad or tasks}; choose from {', '.join(TASKS)}")
    if not lengths or any(int(x) != x or x < 1 for x in lengths):
        raise PosymError(f"lengths must be positive integers, got {list(lengths)}")
    if int(runs) != runs or runs < 1:
        raise PosymError(f"runs must be >= 1, got {runs}")
    if int(n) != n or n < 1:
        raise PosymError(f"n must be >= 1, got {n}")


def run_protocol(answer_fn: AnswerFn | ScoreFn, model: str, out: str | os.PathLike, *,
                 tasks: Sequence[str] = TASKS, lengths: Sequence[int] = DEFAULT_LENGTHS,
                 runs: int = DEFAULT_RUNS, n: int = DEFAULT_N, n_examples: int = 3,
                 batch_size: int = 8, concurrency: int = 1, progress: bool = True,
                 meta: dict[str, Any] | None = None, protocol: str = "generate",
                 measurements: Sequence[Measurement] | None = None) -> LLMEvalResult:
    """Ask ``answer_fn`` every missing sample, cache, and tabulate (SPEC §1.5, Paper A Table 3).

    ``protocol="generate"``: ``answer_fn(prompts) -> raw replies``; ``"choice"``:
    ``answer_fn(prompts, candidates) -> log-probs`` per candidate (the distinct window tokens).
    ``model`` is the cache identity of ``answer_fn``. Consecutive samples of one (task, length, run)
    are sent ``batch_size`` at a time; with ``concurrency > 1`` up to that many calls run in
    threads (API endpoints). Each answer is appended to the cache as soon as its call returns, so
    an interrupted run (Ctrl-C, an API failure) resumes where it stopped. ``measurements``: the
    interventions to run the grid under, in order (default: the untouched model only); each one's
    samples are asked inside its context and cached under its canonical string.
    """
    tasks, lengths = tuple(tasks), tuple(int(x) for x in lengths)
    _check_grid(tasks, lengths, runs, n, protocol)
    plan = [m._replace(answer_fn=m.answer_fn or answer_fn) for m in (measurements or [Measurement()])]
    labels = [m.intervention for m in plan]
    if len(set(labels)) != len(labels):
        raise PosymError(f"an intervention is given twice: {labels}; give each once")
    out_dir = Path(out)
    check_out(out_dir, protocol)
    cache_path = out_dir / CACHE_NAME
    # one writer per answers.jsonl (posym.runs.lock): a second llm eval into this --out is refused in one
    # line, so no sample is asked and recorded twice
    with DirLock.for_file(cache_path, "LLM answers file"):
        return _run_locked(answer_fn, model, out_dir, cache_path, tasks, lengths, runs, n, n_examples, batch_size,
                           concurrency, progress, meta, protocol, plan, labels)


def _run_locked(answer_fn: AnswerFn | ScoreFn, model: str, out_dir: Path, cache_path: Path, tasks: tuple,
                lengths: tuple, runs: int, n: int, n_examples: int, batch_size: int, concurrency: int,
                progress: bool, meta: dict[str, Any] | None, protocol: str, plan: list,
                labels: list[str]) -> LLMEvalResult:
    """:func:`run_protocol` under the lock of ``cache_path``."""
    check_out(out_dir, protocol)  # again under the lock: a writer that finished meanwhile
    cache, repeats = read_cache(cache_path)
    if repeats:  # answers recorded twice (two writers before the lock): keep each sample once
        drop_lines(cache_path, repeats)
    t0, c0 = time.perf_counter(), time.process_time()

    # every sample of the grid under each intervention, grouped into calls of <= batch_size within a
    # (task, length, run)
    keys: list[tuple] = []
    todos: list[list[list[tuple]]] = []
    for label in labels:
        todo: list[list[tuple]] = []
        for task in tasks:
            for length in lengths:
                for run in range(int(runs)):
                    group: list[tuple] = []
                    for i in range(int(n)):
                        sample = make_sample(task, length, run, i)
                        msgs = build_messages(sample, n_examples)
                        key = answer_key(protocol, label, model, task, length, run, i, prompt_digest(msgs))
                        keys.append(key)
                        if key not in cache:
                            group.append((key, sample, msgs))
                    for s in range(0, len(group), max(1, int(batch_size))):
                        todo.append(group[s:s + max(1, int(batch_size))])
        todos.append(todo)
    n_cached = len(keys) - sum(len(b) for todo in todos for b in todo)

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(keys), initial=n_cached, desc=f"llm {protocol} ({short_label(model)})", unit="q",
                   dynamic_ncols=True)

    def ask(batch: list[tuple], fn: AnswerFn | ScoreFn, label: str) -> list[dict]:
        t = time.perf_counter()
        prompts = [m for _, _, m in batch]
        if protocol == "choice":
            outs = fn(prompts, [candidates(s) for _, s, _ in batch])  # type: ignore[call-arg]
        else:
            outs = fn(prompts)  # type: ignore[call-arg]
        secs = round((time.perf_counter() - t) / max(1, len(batch)), 4)
        if len(outs) != len(batch):
            raise PosymError(f"model returned {len(outs)} answers for {len(batch)} prompts")
        return [answer_record(protocol, model, key[-1], sample, o, secs, label) for (key, sample, _), o in zip(batch, outs)]

    writer = CacheWriter(cache_path) if any(todos) else None
    n_new = 0

    def done(recs: list[dict]) -> None:
        nonlocal n_new
        writer.write(recs)  # type: ignore[union-attr]
        for r in recs:
            cache[record_key(r)] = r
        n_new += len(recs)
        if bar is not None:
            bar.update(len(recs))

    def run_all(todo: list[list[tuple]], fn: AnswerFn | ScoreFn, label: str) -> None:
        if int(concurrency) <= 1:
            for batch in todo:
                done(ask(batch, fn, label))
        elif todo:
            pool = ThreadPoolExecutor(max_workers=int(concurrency))

            def drain(finished) -> None:  # record every success first, then raise the first error
                err = None
                for f in finished:
                    try:
                        done(f.result())
                    except BaseException as e:  # noqa: BLE001
                        err = err or e
                if err is not None:
                    raise err

            pending: set = set()
            try:
                for batch in todo:  # keep at most 2*concurrency calls queued
                    pending.add(pool.submit(ask, batch, fn, label))
                    if len(pending) >= 2 * int(concurrency):
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        drain(finished)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    drain(finished)
            except BaseException:
                # drop queued calls, let running ones finish, and keep every answer that arrived
                pool.shutdown(wait=True, cancel_futures=True)
                for f in pending:
                    if f.done() and not f.cancelled() and f.exception() is None:
                        done(f.result())
                raise
            pool.shutdown(wait=True)

    try:
        for m, todo in zip(plan, todos):
            if todo:
                with m.context():
                    run_all(todo, m.answer_fn, m.intervention)
    finally:
        if writer is not None:
            writer.close()
        if bar is not None:
            bar.close()

    records = [cache[k] for k in keys]
    runs_df, table = summarize(records)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    paths = write_tables(out_dir, runs_df, table, model, protocol)
    contrast = intervention_contrast(records) if protocol == "choice" and len(labels) > 1 else None
    contrast_csv = out_dir / layout.LLM_INTERVENTIONS  # derived from answers.jsonl: an earlier call's
    for stale in (contrast_csv, parquet_path(contrast_csv), out_dir / layout.LLM_INTERVENTIONS_MD):  # contrast
        stale.unlink(missing_ok=True)  # must not outlive the tables it was computed with
    if contrast is not None and len(contrast):
        paths["contrast"] = out_dir / layout.LLM_INTERVENTIONS
        write_table(contrast.assign(model=model), paths["contrast"])
        paths["contrast_markdown"] = out_dir / layout.LLM_INTERVENTIONS_MD
        paths["contrast_markdown"].write_text(contrast_markdown(contrast, title=table_title(model, protocol)))
    info = {"protocol": protocol, "model": model, "interventions": labels, "tasks": list(tasks),
            "lengths": list(lengths), "runs": int(runs),
            "n": int(n), "n_examples": int(n_examples), "prompt_version": PROMPT_VERSION,
            "n_new": n_new, "n_cached": n_cached, "seconds": round(seconds, 2),
            "seconds_per_new_answer": round(seconds / n_new, 4) if n_new else None,
            "cpu_seconds": round(cpu, 2),  # process CPU time (all threads): robust to a busy machine
            **(meta or {})}
    paths["meta"] = out_dir / layout.LLM_EVAL_JSON
    paths["meta"].write_text(json.dumps(info, indent=2, default=str) + "\n")
    paths["cache"] = cache_path
    return LLMEvalResult(out_dir, model, table, runs_df, n_new, n_cached, seconds, paths, protocol)


def _check_context(answerer: Any, lm: Any, tasks: Sequence[str], lengths: Sequence[int], n_examples: int,
                   max_new_tokens: int, protocol: str = "generate") -> None:
    """PosymError before any question if the longest prompt plus its answer (``max_new_tokens``, or
    for the choice protocol its longest candidate continuation) exceeds the model's context."""
    limit = getattr(getattr(lm, "config", None), "max_position_embeddings", None)
    if not isinstance(limit, int) or not lengths or not tasks:
        return
    longest = max(int(x) for x in lengths)
    from posym.lengthgen.hf_llm import format_prompts

    need = 0
    for task in tasks:
        sample = make_sample(task, longest, 0, 0)
        msgs = build_messages(sample, n_examples)
        if protocol == "choice":
            prompt, conts = answerer.encode(msgs, candidates(sample))
            need = max(need, len(prompt) + max(len(c) for c in conts))
        else:
            text = format_prompts(answerer.tokenizer, [msgs])[0]
            need = max(need, len(answerer.tokenizer(text)["input_ids"]) + int(max_new_tokens))
    if need > limit:
        raise PosymError(f"a prompt of target-window length {longest} needs {need} tokens, more than the model's "
                         f"context of {limit}; use shorter --lengths")


# --- entry point -----------------------------------------------------------------------------------
def llm_eval(model: str | os.PathLike | None = None, gguf: str | os.PathLike | None = None, *,
             api_base: str | None = None, api_model: str | None = None,
             api_key_env: str = "OPENAI_API_KEY",
             lengths: Sequence[int] = DEFAULT_LENGTHS, runs: int = DEFAULT_RUNS, n: int = DEFAULT_N,
             tasks: Sequence[str] = TASKS, out: str | os.PathLike | None = None,
             n_examples: int = 3, batch_size: int | None = None, max_new_tokens: int = 8,
             device_map: str | dict | None = None, dtype: Any = None, device: str | None = None,
             max_memory: dict | None = None, offload_folder: str | os.PathLike | None = None,
             max_per_second: float | None = None, max_per_minute: float | None = None,
             max_retries: int = 6, backoff: float = 1.0, timeout: float = 60.0, concurrency: int = 1,
             threads: int | None = None, progress: bool = True, protocol: str = "generate",
             intervene: Sequence[str] | None = None,
             apply: Callable[[Any, str], AbstractContextManager] | None = None,
             kv_cache_ok: Sequence[str] = ()) -> LLMEvalResult:
    """Paper A Table 3 protocol (SPEC §1.5) on a local HF model or an OpenAI-compatible API.

    Local: ``model`` (directory / cached hub name / ``.gguf`` file) and/or ``gguf``; with neither
    (and no ``api_base``) the default SmolLM2-135M-Instruct GGUF is used. API: ``api_base`` +
    ``api_model``, key from ``$api_key_env``. ``protocol``: ``"generate"`` (greedy reply, parsed) or
    ``"choice"`` (argmax of the log-probs of the distinct window tokens, local models only).
    ``out`` defaults to ``runs/llm/<model>`` (``runs/llm/<model>-choice`` for the choice protocol);
    answers are cached there, so a rerun or a resumed run only asks for the missing samples.
    ``batch_size`` defaults to 8 prompts per forward (local generate), 1 prompt per call (choice:
    each prompt's candidates are one batch) and 1 (API, where ``concurrency`` requests run in
    parallel under the ``max_per_second`` / ``max_per_minute`` limits). ``intervene``: canonical
    intervention strings (default ``none`` only), one measurement each, applied by ``apply(model,
    text)`` (a context manager: :func:`posym.interventions.intervened`, which the verb passes); each is
    entered once on the loaded model before any question, so one that does not fit fails first;
    ``kv_cache_ok``: those of them exact under a KV cache and padding (the others are measured with
    full forwards, module docstring).
    """
    intervene = list(intervene) if intervene else [NO_INTERVENTION]
    changed = [t for t in intervene if t != NO_INTERVENTION]
    if changed and api_base is not None:
        raise PosymError(f"--intervene {changed[0]} changes a local model's attention; an API model cannot be "
                         "intervened: use --model/--gguf")
    if changed and apply is None:
        raise PosymError("interventions need apply= (posym.interventions.intervened); use posym.verbs.llm.llm_eval")
    if (api_base is None) != (api_model is None):
        raise PosymError("an API run needs both --api-base URL and --api-model NAME")
    if api_base is not None and (model is not None or gguf is not None):
        raise PosymError("give either a local model (--model/--gguf) or an API (--api-base/--api-model), not both")
    _check_grid(tuple(tasks), tuple(lengths), runs, n, protocol)
    if protocol == "choice" and api_base is not None:
        raise PosymError("--protocol choice needs the log-probability of every candidate answer, which "
                         "chat-completions endpoints do not return; use a local model or --protocol generate")
    if threads is not None:
        import torch

        torch.set_num_threads(int(threads))
    meta: dict[str, Any] = ({"scoring": "sum of the log-probs of the candidate's tokens as the reply (no end of turn)"}
                            if protocol == "choice" else {"max_new_tokens": max_new_tokens})
    if out is not None:
        check_out(out, protocol)  # before the model loads
        DirLock.for_file(Path(out) / CACHE_NAME, "LLM answers file").check_free()  # a second writer: refused now
    t_load = time.perf_counter()
    if api_base is not None:
        from posym.lengthgen.api import ChatClient

        client = ChatClient(api_base, str(api_model), api_key_env=api_key_env,
                            max_tokens=max_new_tokens, timeout=timeout, max_retries=max_retries, backoff=backoff,
                            max_per_second=max_per_second, max_per_minute=max_per_minute)
        answer_fn: AnswerFn | ScoreFn = client
        label = client.label
        bs = batch_size or 1
        meta.update(api_base=api_base, api_model=api_model, api_key_env=api_key_env)
    else:
        from posym.lengthgen.hf_llm import HFChat, HFChoice
        from posym.model.llm import load_llm, model_label

        label = model_label(model, gguf)
        lm, tok = load_llm(model, gguf, device_map=device_map, dtype=dtype, device=device,
                           max_memory=max_memory, offload_folder=offload_folder)
        if protocol == "choice":
            answer_fn = HFChoice(lm, tok)
            bs = batch_size or 1
        else:
            answer_fn = HFChat(lm, tok, max_new_tokens=max_new_tokens, batch_size=batch_size or 8)
            bs = batch_size or 8
        _check_context(answer_fn, lm, tasks, lengths, n_examples, max_new_tokens, protocol)
        for text in changed:  # a spec the model does not support: one line before any question
            with apply(lm, text):  # type: ignore[misc]
                pass
        full_for = [t for t in changed if t not in set(kv_cache_ok)]
        full = (HFChoice(lm, tok, cache=False) if protocol == "choice"
                else HFChat(lm, tok, max_new_tokens=max_new_tokens, batch_size=1, cache=False)) if full_for else None
        measurements = [Measurement() if t == NO_INTERVENTION else
                        Measurement(t, (lambda t=t: apply(lm, t)),  # type: ignore[misc]
                                    full if t in full_for else None) for t in intervene]
        concurrency = 1
        meta.update(dtype=str(next(lm.parameters()).dtype), chat_template=answer_fn.chat_template,
                    device_map=getattr(lm, "hf_device_map", None), load_seconds=None)
        meta["load_seconds"] = round(time.perf_counter() - t_load, 2)
        try:
            import transformers
            import torch

            meta.update(transformers=transformers.__version__, torch=torch.__version__,
                        torch_threads=torch.get_num_threads())
        except Exception:  # noqa: BLE001
            pass
    out_dir = Path(out) if out is not None else default_llm_out(label, protocol)
    if api_base is not None:
        measurements = [Measurement()]
    if changed and api_base is None:
        meta["full_forwards"] = full_for  # one prompt at a time, full sequence, no KV cache (docs/interventions.md)
    return run_protocol(answer_fn, label, out_dir, tasks=tasks, lengths=lengths, runs=runs, n=n,
                        n_examples=n_examples, batch_size=bs, concurrency=concurrency,
                        progress=progress, meta=meta, protocol=protocol, measurements=measurements)


__all__ = [
    "ALL_LENGTHS",
    "CACHE_NAME",
    "DEFAULT_N",
    "DEFAULT_OUT_ROOT",
    "DEFAULT_RUNS",
    "PROTOCOLS",
    "AnswerFn",
    "LLMEvalResult",
    "Measurement",
    "ScoreFn",
    "check_out",
    "contrast_markdown",
    "default_llm_out",
    "intervention_contrast",
    "llm_eval",
    "load_cache",
    "normalised_rank",
    "read_llm_table",
    "run_protocol",
    "short_label",
    "summarize",
    "table_markdown",
    "table_title",
    "tables_protocol",
    "write_tables",
]
