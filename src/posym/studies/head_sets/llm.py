"""The LLM path of ``posym head-sets`` (docs/head_sets.md, issue 37 point 5): per-prompt outcomes of an
offline LLM (SmolLM2, Gemma-3-270M or a model folder with its tokenizer) under each intervention, through
the ``choice`` protocol of SPEC §1.5 — the same prompts, scorer and records as ``posym llm eval
--protocol choice``, in process.

For each (intervention, target-window length): the ``n`` samples ``make_samples(task, length, run, n)``
(``run`` = ``--llm-seed``), their messages with ``n_examples`` worked examples, every distinct
target-window token scored by :class:`posym.lengthgen.hf_llm.HFChoice` (one prompt per call; with a KV
cache where the intervention is exact under one, full forwards otherwise, as ``llm eval`` decides with
:func:`posym.interventions.holds_under_kv_cache`) inside :func:`posym.interventions.intervened`; the
records are ``llm eval``'s (:func:`posym.lengthgen.llm_answers.answer_record`), read as ``correct`` and
the normalised ``rank`` by :func:`posym.lengthgen.outcomes.choice_outcomes`.

**The head readout under the ablation** (issue 37 point 2; :func:`readout_prompts`, :func:`repeated_head_reader`,
:func:`cached_llm_readout`): every scored head's s_POS, s_SYM (SPEC §3, the fast exact path
:func:`posym.heads.scores.scores_fast`, query = the last token, mean over prompts) on ``posym head-types``'
``repeated`` prompts (SPEC §7: ``[bos] x x``, :func:`posym.tasks.repeated.repeated_ids`) with the readout's own
settings (its ``head_types.json``: repeat length, seed, τ, swap exclusion), ``readout_n`` of them, computed inside
:func:`posym.interventions.intervened` — the same engine and prompts as ``posym head-types``, so the untouched
readout equals its numbers when ``readout_n`` is its ``n`` (the first ``readout_n`` of its prompts otherwise).
Only the layers of the intervention's ``heads=`` are scored (the untouched model: the layers of every typed set);
the readout does not depend on the cell's target-window length, so it is measured once per intervention.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from posym.constants import DEFAULT_REPEAT_LENGTH, DEFAULT_SWAP_EXCLUDE
from posym.errors import PosymError
from posym.heads.scores import DEFAULT_TAU
from posym.interventions import describe, holds_under_kv_cache, intervened, parse_intervention
from posym.lengthgen.llm_answers import answer_record
from posym.lengthgen.outcomes import choice_outcomes
from posym.runs import layout
from posym.studies.head_sets.cache import OutcomeCache
from posym.studies.head_sets.tables import Evaluate, ReadHeads
from posym.tasks.prompts import build_messages, candidates, make_samples, prompt_digest

#: The worked examples of each prompt (``posym llm eval``'s default ``--n-examples``).
N_EXAMPLES = 3
#: Default ``--readout-n`` of the LLM path: prompts of the head readout under each dose (docs/head_sets.md,
#: "The LLM path": its cost on SmolLM2-135M).
LLM_READOUT_N = 8
#: The prompt source of the LLM readout (``posym head-types --prompts repeated``).
REPEATED = "repeated"
#: ``posym head-types``' defaults, used when the readout has no ``head_types.json`` beside it: repeat length
#: (``1 + 2·64`` tokens), seed, τ (SPEC §3), swap exclusion (docs/llm.md). A test keeps them equal to the verb's.
HEAD_TYPES_DEFAULTS: dict[str, Any] = {"repeat_length": DEFAULT_REPEAT_LENGTH, "seed": 0, "tau": DEFAULT_TAU,
                                       "swap_exclude": DEFAULT_SWAP_EXCLUDE}
#: The readout's records in the cache do not depend on the cell's length: stored under this ``extra_tokens``.
READOUT_LENGTH = 0


def load_offline_llm(llm: str | os.PathLike, device: str | None = None) -> tuple[Any, Any, str]:
    """``(model, tokenizer, label)`` of an offline LLM (``smollm2``, ``gemma3-270m`` or a folder;
    :func:`posym.model.llm.load_llm`, nothing downloaded); ``label`` is ``llm eval``'s cache identity."""
    from posym.model.llm import load_llm, model_label

    lm, tok = load_llm(llm, device=device)
    return lm.eval(), tok, model_label(llm)


def choice_evaluator(lm: Any, tok: Any, label: str, task: str, n: int, run: int = 0,
                     n_examples: int = N_EXAMPLES) -> Evaluate:
    """``evaluate(intervention, length)`` -> per-prompt outcomes (``prompt, correct, rank, n_candidates``;
    ``n`` rows) of ``lm`` on the ``choice`` protocol's samples of ``task`` at target-window ``length``
    (module doc). ``length`` ≥ 1 (SPEC §1.5)."""
    from posym.lengthgen.hf_llm import HFChoice

    cached, full = HFChoice(lm, tok), HFChoice(lm, tok, cache=False)

    def evaluate(intervention: str, length: int) -> pd.DataFrame:
        if int(length) < 1:
            raise PosymError(f"--lengths: {length} is not a target-window length of the 1-hop prompts (SPEC §1.5); "
                             "give lengths >= 1, e.g. 32")
        spec = parse_intervention(intervention)
        canon = describe(spec)
        scorer = cached if holds_under_kv_cache(spec) else full
        records = []
        with intervened(lm, canon):
            for sample in make_samples(task, int(length), int(run), int(n)):
                msgs = build_messages(sample, n_examples)
                t = time.perf_counter()
                out = scorer([msgs], [candidates(sample)])[0]
                records.append(answer_record("choice", label, prompt_digest(msgs), sample, out,
                                             round(time.perf_counter() - t, 4), canon))
        return choice_outcomes(records, intervention=canon, task=task, length=int(length))

    return evaluate


@dataclass(frozen=True)
class ReadoutPrompts:
    """The prompts of an LLM head readout: ``source`` (the readout's prompt source; only ``repeated`` is read
    here), ``n`` prompts of ``1 + 2·repeat_length`` tokens drawn with ``seed``, scored with ``tau`` and the
    swap exclusion ``swap_exclude`` (``bos`` | ``none`` | ``first:K``); ``from_file``: read from the readout's
    ``head_types.json`` (else posym head-types' defaults, :data:`HEAD_TYPES_DEFAULTS`)."""

    source: str
    n: int
    repeat_length: int
    seed: int
    tau: float
    swap_exclude: str
    from_file: bool = False

    def key(self) -> dict[str, Any]:
        """The cache key fields of these prompts (with the model's label: the readout's identity)."""
        return {"prompts": self.source, "n": self.n, "repeat_length": self.repeat_length, "data_seed": self.seed,
                "tau": self.tau, "swap_exclude": self.swap_exclude}


def readout_prompts(readout: str | os.PathLike, table: pd.DataFrame, n: int) -> ReadoutPrompts:
    """The prompt settings the head readout ``readout`` (a ``posym head-types`` table, ``table`` its rows)
    was made with: its ``head_types.json`` beside it when present (``repeat_length``, ``seed``, ``tau``,
    ``swap_exclude``; the source: the table's ``prompt_set``, else the json's one prompt source), else
    :data:`HEAD_TYPES_DEFAULTS` with source ``repeated``; ``n`` prompts (``--readout-n``). One-line
    PosymError for an unreadable json."""
    meta_path = Path(readout).with_name(layout.HEAD_TYPES_JSON)
    meta: dict[str, Any] = {}
    if meta_path.is_file():
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise PosymError(f"--readout: cannot read {meta_path} ({type(e).__name__}); give a readout written by "
                             "posym head-types, or remove the broken json to use head-types' defaults") from None
    sources = sorted(set(table["prompt_set"].astype(str))) if "prompt_set" in table.columns else \
        [str(x) for x in meta.get("prompts", [REPEATED])]
    got = {k: meta.get(k, v) for k, v in HEAD_TYPES_DEFAULTS.items()}
    return ReadoutPrompts(source=",".join(sources) or REPEATED, n=int(n), repeat_length=int(got["repeat_length"]),
                          seed=int(got["seed"]), tau=float(got["tau"]), swap_exclude=str(got["swap_exclude"]),
                          from_file=bool(meta))


def repeated_head_reader(lm: Any, tok: Any, prompts: ReadoutPrompts,
                         batch_size: int = 8) -> Callable[[str, Sequence[int]], pd.DataFrame]:
    """``read(intervention, layers)`` -> one row per head of ``layers`` (``layer, head, s_pos, s_sym``: SPEC §3,
    the mean over ``prompts.n`` repeated prompts [n, 1 + 2·repeat_length], fast exact path, query = the last
    token) of ``lm`` inside :func:`posym.interventions.intervened` — ``posym head-types``' engine and prompts
    (module doc). The prompts are drawn once, here."""
    import torch

    from posym.heads.scores import scores_fast, vocab_size
    from posym.heads.swaps import parse_swap_exclude
    from posym.tasks.repeated import repeated_ids

    if prompts.source != REPEATED:
        raise PosymError(f"--readout: made on {prompts.source} prompts; the LLM readout under the ablation reads "
                         "repeated prompts (posym head-types --prompts repeated)")
    ids = repeated_ids(tok, vocab_size(lm) or len(tok), prompts.n, prompts.repeat_length, prompts.seed)
    exclude = parse_swap_exclude(prompts.swap_exclude, ids)
    batch = torch.as_tensor(ids, device=next(lm.parameters()).device)

    def read(intervention: str, layers: Sequence[int]) -> pd.DataFrame:
        with torch.no_grad(), intervened(lm, intervention):
            sc = scores_fast(lm, batch, prompts.tau, layers=sorted(int(x) for x in layers), batch_size=batch_size,
                             exclude_keys=exclude)
        return sc.to_frame()[["layer", "head", "s_pos", "s_sym"]].reset_index(drop=True)

    return read


def cached_llm_readout(read: Callable[[str, Sequence[int]], pd.DataFrame], cache: OutcomeCache,
                       layers: Sequence[int], on_measure: Callable[[str], None] = lambda canon: None) -> ReadHeads:
    """``read_heads(intervention, length)`` of the study (:data:`~posym.studies.head_sets.tables.ReadHeads`)
    through ``cache``: the layers of the intervention's ``heads=`` (none given — the untouched model —:
    ``layers``, those of every typed set) scored once per intervention, whatever the cell's length (stored
    under :data:`READOUT_LENGTH`); a cached readout lacking a needed layer is measured again. ``on_measure``
    is called with each intervention measured."""
    def read_heads(intervention: str, length: int) -> pd.DataFrame:
        spec = parse_intervention(intervention)
        canon = describe(spec)
        heads = getattr(spec, "heads", None)
        need = sorted({int(a) for a, _ in heads}) if heads else sorted({int(x) for x in layers})
        got = cache.get(canon, READOUT_LENGTH)
        if got is None or not set(need) <= set(int(x) for x in got["layer"]):
            got = read(canon, need)
            cache.put(canon, READOUT_LENGTH, got)
            on_measure(canon)
        return got

    return read_heads


__all__ = ["HEAD_TYPES_DEFAULTS", "LLM_READOUT_N", "N_EXAMPLES", "READOUT_LENGTH", "REPEATED", "ReadoutPrompts",
           "cached_llm_readout", "choice_evaluator", "load_offline_llm", "readout_prompts", "repeated_head_reader"]
