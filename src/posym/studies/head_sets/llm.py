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
"""

from __future__ import annotations

import os
import time
from typing import Any

import pandas as pd

from posym.errors import PosymError
from posym.interventions import describe, holds_under_kv_cache, intervened, parse_intervention
from posym.lengthgen.llm_answers import answer_record
from posym.lengthgen.outcomes import choice_outcomes
from posym.studies.head_sets.tables import Evaluate
from posym.tasks.prompts import build_messages, candidates, make_samples, prompt_digest

#: The worked examples of each prompt (``posym llm eval``'s default ``--n-examples``).
N_EXAMPLES = 3


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


__all__ = ["N_EXAMPLES", "choice_evaluator", "load_offline_llm"]
