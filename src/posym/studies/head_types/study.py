"""The head-types study's fixed choices (SPEC §7; docs/llm.md, "Head types side by side"): the prompt
sources, the default swap exclusion and repeated-sequence length, the default output folder and the
width of the printed summary."""

from __future__ import annotations

from posym.constants import DEFAULT_REPEAT_LENGTH, DEFAULT_SWAP_EXCLUDE  # noqa: F401 (re-exported)

#: Prompt sources of ``posym head-types`` (module doc), in table order.
PROMPT_SOURCES: tuple[str, ...] = ("repeated", "binding", "number", "letter")
#: Root of the default output folders: ``runs/head-types/<model>/``.
HEAD_TYPES_OUT_ROOT = "runs/head-types"
#: Longest line of the printed summary.
WIDTH = 100


__all__ = ["DEFAULT_REPEAT_LENGTH", "DEFAULT_SWAP_EXCLUDE", "HEAD_TYPES_OUT_ROOT", "PROMPT_SOURCES", "WIDTH"]
