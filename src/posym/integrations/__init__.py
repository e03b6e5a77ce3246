"""posym inside other people's training: the HF ``Trainer`` callback and the plain-PyTorch hook
(SPEC §3 scores of every head while a model trains)."""

from posym.integrations.hf import PositionalSymbolicCallback
from posym.integrations.tracker import ScoreTracker, prompt_groups, score_groups, summary_values

__all__ = ["PositionalSymbolicCallback", "ScoreTracker", "prompt_groups", "score_groups", "summary_values"]
