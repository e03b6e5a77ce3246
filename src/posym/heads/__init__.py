"""Head analysis (SPEC §3): positional/symbolic scores (fast exact path and literal reference)."""

from posym.heads.scores import (
    DEFAULT_BLOCKS,
    DEFAULT_TAU,
    HeadScores,
    SwapAttention,
    combine_scores,
    head_scores,
    normalised_entropy,
    pair_cos,
    position_content_logits,
    scores_blocks_fast,
    scores_blocks_reference,
    scores_fast,
    scores_reference,
    swap_attention,
)

__all__ = [
    "DEFAULT_BLOCKS",
    "DEFAULT_TAU",
    "HeadScores",
    "SwapAttention",
    "combine_scores",
    "head_scores",
    "normalised_entropy",
    "pair_cos",
    "position_content_logits",
    "scores_blocks_fast",
    "scores_blocks_reference",
    "scores_fast",
    "scores_reference",
    "swap_attention",
]
