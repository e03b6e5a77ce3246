"""The training-time encodings study's fixed choices (docs/encodings.md):
its goal (reach ≥ 10 × the ``rope`` variant's with test accuracy ≥ 0.99 on the number task), the
baseline variant and the names of the quantities in its table."""

from __future__ import annotations

from posym.constants import GAMMA, REACH_THRESHOLD
from posym.model.pe import DEFAULT_PE

#: The goal: reach >= GOAL_FACTOR × the rope variant's, with test accuracy >= GOAL_ACCURACY (number task).
GOAL_FACTOR = 10
GOAL_ACCURACY = 0.99
#: The variant the goal compares with (the ``--pe`` value of today's model).
BASELINE_PE = DEFAULT_PE
#: The quantity names of the study table (one home: the table, the goal and the tests read them).
Q_SEEDS = "models (seeds)"
Q_TEST = "test accuracy"
Q_DOMINANT = "dominant frequency IDs (heads)"
Q_DOMINANT_POSITIONAL = "dominant frequency IDs (pure positional heads)"
Q_UNROTATED = "frequency use on angle-0 pairs"
Q_REACH = f"largest added length ≥ {REACH_THRESHOLD:g}"
Q_INTERVENTION = "Fig. 5B and reach: intervention"


def q_milestone(hop: int) -> str:
    """Quantity name of the step at which ``hop``-hop validation accuracy first reaches Paper A's 0.9."""
    return f"first step hop {hop} ≥ {REACH_THRESHOLD:g}"


def q_pure(kind: str) -> str:
    """Quantity name of the number of pure heads of ``kind`` (Paper A's γ) at the end of training."""
    return f"pure {kind} heads (γ = {GAMMA:g})"


def q_accuracy(extra: int) -> str:
    """Quantity name of the accuracy at ``extra`` added tokens (Fig. 5B)."""
    return f"accuracy at +{extra:,}"


#: The columns of the study table (one row per variant, task and quantity; ``cell`` is the text shown).
COLUMNS = ["variant", "pe", "task", "quantity", "mean", "sd", "n", "n_missing", "grid_end", "cell"]

__all__ = ["BASELINE_PE", "COLUMNS", "GOAL_ACCURACY", "GOAL_FACTOR", "Q_DOMINANT", "Q_DOMINANT_POSITIONAL",
           "Q_INTERVENTION", "Q_REACH", "Q_SEEDS", "Q_TEST", "Q_UNROTATED", "q_accuracy", "q_milestone", "q_pure"]
