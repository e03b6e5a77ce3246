"""The paper's fixed numbers and posym's named conventions, each defined once (SPEC):
the tasks, Paper A's purity tolerance γ, the accuracy threshold of "reach", and the data-seed offsets
that keep test, length-generalization and head-readout data apart from training data."""

from __future__ import annotations

#: The two tasks of Paper A (SPEC §1): positional ("number") and symbolic ("letter") reasoning.
TASKS: tuple[str, ...] = ("number", "letter")

#: Paper A's purity tolerance γ (SPEC §3): a head is purely positional when s_POS > 1 − γ and
#: s_SYM < γ (symbolic: the mirror image).
GAMMA: float = 0.1

#: The accuracy of 0.9 at which Paper A reads a hop as learnt (Fig. 2: the first step with accuracy ≥ it)
#: and an added length as reached (Fig. 5B: the reach is the largest added length with accuracy ≥ it);
#: SPEC §5.
REACH_THRESHOLD: float = 0.9

#: The data seed of the test-layout samples of training seed ``s`` is ``TEST_SEED_OFFSET + s``
#: (length generalization and the discrepancy of trained heads; SPEC §1.4).
TEST_SEED_OFFSET: int = 1_000_000

#: The data seed of the interventions study's head readouts is ``READOUT_SEED_OFFSET + seed``.
READOUT_SEED_OFFSET: int = 2_000_000

#: ``posym head-types``' default swap exclusion on real LLMs and the length of the random sequence each of its
#: ``repeated`` prompts repeats (``1 + 2·64`` tokens); docs/llm.md, "Head types side by side". Here, not in the
#: study, because the head-set study reads an LLM's heads on the same prompts.
DEFAULT_SWAP_EXCLUDE: str = "bos"
DEFAULT_REPEAT_LENGTH: int = 64

__all__ = ["DEFAULT_REPEAT_LENGTH", "DEFAULT_SWAP_EXCLUDE", "GAMMA", "READOUT_SEED_OFFSET", "REACH_THRESHOLD", "TASKS",
           "TEST_SEED_OFFSET"]
