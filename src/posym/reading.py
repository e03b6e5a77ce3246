"""How to read s_POS and s_SYM (SPEC §3): the one text that posym prints with its scores, shows in
``--help``, puts in the report, and that the README and ``docs/llm.md`` quote (a test keeps them equal).

This module imports nothing (floor 1 of docs/architecture.md), so that the CLI can show the text in ``--help``
without loading torch.
"""

from __future__ import annotations

#: The block/swap-mass filter recommended for real LLMs (``posym llm heads --min-mass``, its default):
#: a head must put at least 1 % of the query's attention on the swapped keys (docs/llm.md).
MIN_MASS = 0.01

#: The short reading of the scores (plain text, one paragraph per point).
HOW_TO_READ = f"""\
How to read the scores (SPEC §3). Each score swaps two keys the query attends to (two tokens, or two
blocks of tokens) and asks where the head's attention goes. s_POS near 1: the attention stays at the
position (a positional head, e.g. a previous-token head). s_SYM near 1: it follows the moved content (a
symbolic head, e.g. an induction or duplicate-token head). A head is pure at tolerance g (default 0.1)
when one score is >= 1-g and the other <= g.
- Uniform or very diffuse attention scores (1, 1): a cloud of heads near (1, 1) means "too diffuse to
  tell", not "both". The entropy column (1 = uniform) tells which heads these are.
- Attention sinks: a head that rests on the first token reads "pure symbolic" when that token may be
  swapped (its attention follows the moved start-token state; 73 of 74 sink heads of SmolLM2). Keep it
  out of the swaps (--swap-exclude bos, the default for --text/--ids and head-types).
- A head with almost no attention on the swapped keys (small swap_mass / block_mass, e.g. a sink head
  with the start token excluded) is scored on almost nothing: filter on the mass first (real LLMs:
  >= {MIN_MASS:g}).
- A mean over prompts is a fraction of prompts, not a degree: a mean s_POS of 0.5 is usually a head that
  is positional on half of the prompts. Per-prompt scores (--per-prompt) and the per-prompt fractions
  of posym head-types (frac_positional, frac_symbolic) show it.
- A freshly initialised model has near-uniform attention and scores about (1, 1) (a tiny Llama: 1.00,
  1.00). QK-norm (e.g. Qwen3) makes the attention logits O(1) from the start, so such a model can start
  elsewhere (a tiny Qwen3: about 0.26, 0.94). Compare checkpoints, not absolute values."""


#: What to do with the scores of a real LLM's heads (``posym llm heads --help``; docs/llm.md, "Reading
#: the heads of your model", spells it out with commands).
HEADS_RECIPE = f"""\
Recipe (docs/llm.md, "Reading the heads of your model"): keep heads with block_mass >= {MIN_MASS:g} (the
default --min-mass); s_POS >= 0.9 and s_SYM <= 0.1: positional; s_SYM >= 0.9 and s_POS <= 0.1:
symbolic; both >= 0.9: too diffuse to tell (check entropy). Then ablate them (posym ablate for posym
models, a zero-ablation hook for HF models) or compare checkpoints (posym scores --series)."""


#: The one line that a printed table of scores ends with.
READ_POINTER = 'How to read s_POS / s_SYM: see this command\'s --help or the README ("How to read the scores").'


__all__ = ["HEADS_RECIPE", "HOW_TO_READ", "MIN_MASS", "READ_POINTER"]
