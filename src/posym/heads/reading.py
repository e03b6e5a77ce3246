"""How to read s_POS and s_SYM (SPEC §3): the one text that posym prints with its scores, shows in
``--help``, puts in the report, and that the README and ``docs/llm.md`` quote (a test keeps them equal).
"""

from __future__ import annotations

#: The short reading of the scores (plain text, one paragraph per point).
HOW_TO_READ = """\
How to read the scores (SPEC §3). Each score swaps two keys the query attends to (two tokens, or two
blocks of tokens) and asks where the head's attention goes. s_POS near 1: the attention stays at the
position (a positional head, e.g. a previous-token head). s_SYM near 1: it follows the moved content (a
symbolic head, e.g. an induction or duplicate-token head). A head is pure at tolerance g (default 0.1)
when one score is >= 1-g and the other <= g.
- Uniform or very diffuse attention scores (1, 1): a cloud of heads near (1, 1) means "too diffuse to
  tell", not "both". The entropy column (1 = uniform) tells which heads these are.
- A head with almost no attention on the swapped keys (small swap_mass / block_mass, e.g. an attention
  sink on the first token) is scored on almost nothing: filter on the mass first (real LLMs: >= 0.01).
- A mean over prompts is a fraction of prompts, not a degree: a mean s_POS of 0.5 is usually a head that
  is positional on half of the prompts. Per-prompt scores (--per-prompt) show it.
- A freshly initialised model has near-uniform attention and scores about (1, 1); a family that sharpens
  attention from the start (e.g. QK-norm) can start elsewhere. Compare checkpoints, not absolute values."""


__all__ = ["HOW_TO_READ"]
