"""Head analysis (SPEC §3): positional/symbolic scores (fast exact path and literal reference), the
classic head detectors, per-prompt readings and the head-type join (SPEC §7)."""

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

from posym.heads.detectors import DETECTORS, SINK_EPS, detection_patterns, detector_scores
from posym.heads.head_types import (
    CLASSIC_TYPES,
    POSYM_TYPES,
    classic_types,
    contingency,
    join_head_types,
    posym_types,
    type_correlations,
)
from posym.heads.prompt_readings import per_prompt_kinds

__all__ = [
    "CLASSIC_TYPES",
    "DETECTORS",
    "POSYM_TYPES",
    "SINK_EPS",
    "classic_types",
    "contingency",
    "detection_patterns",
    "detector_scores",
    "join_head_types",
    "per_prompt_kinds",
    "posym_types",
    "type_correlations",
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
