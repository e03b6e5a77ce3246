"""Head analysis (SPEC §3): positional/symbolic scores (fast exact path and literal reference)."""

from posym.heads.scores import (
    DEFAULT_BLOCKS,
    DEFAULT_TAU,
    HeadScores,
    SwapAttention,
    attention_entropy,
    combine_scores,
    head_scores,
    pair_cos,
    parse_swap_exclude,
    position_content_logits,
    scores_blocks_fast,
    scores_blocks_reference,
    scores_fast,
    scores_reference,
    swap_attention,
)

from posym.heads.frequencies import (
    frequency_logits,
    frequency_scores,
    frequency_use,
    qk_geometry,
    weighted_frequency_id,
)

__all__ = [
    "frequency_logits",
    "frequency_scores",
    "frequency_use",
    "qk_geometry",
    "weighted_frequency_id",
    "DEFAULT_BLOCKS",
    "DEFAULT_TAU",
    "HeadScores",
    "SwapAttention",
    "attention_entropy",
    "combine_scores",
    "head_scores",
    "pair_cos",
    "parse_swap_exclude",
    "position_content_logits",
    "scores_blocks_fast",
    "scores_blocks_reference",
    "scores_fast",
    "scores_reference",
    "swap_attention",
]
