"""The head-types study (``posym head-types``; SPEC §7, "Classic head detectors and per-prompt readings";
docs/llm.md, "Head types side by side"): does a real LLM's positional/symbolic typing (SPEC §3) agree with
the classic head detectors (previous-token, duplicate-token, induction, first-token)? Every head scored
on each prompt source, joined with the detectors, Spearman correlations with bootstrap CIs and a null,
the classic × posym contingency table and the (s_POS, s_SYM) planes.

``run.py`` the verb, ``study.py`` the prompt sources and defaults, ``tables.py`` the printed summary,
``figures.py`` / ``panels.py`` the planes.
"""

from posym.studies.head_types.run import head_types, head_types_out, parse_sources
from posym.studies.head_types.study import (DEFAULT_REPEAT_LENGTH, DEFAULT_SWAP_EXCLUDE, HEAD_TYPES_OUT_ROOT,
                                            PROMPT_SOURCES, WIDTH)
from posym.studies.head_types.tables import headline_rho

__all__ = ["DEFAULT_REPEAT_LENGTH", "DEFAULT_SWAP_EXCLUDE", "HEAD_TYPES_OUT_ROOT", "PROMPT_SOURCES", "WIDTH",
           "head_types", "head_types_out", "headline_rho", "parse_sources"]
