"""GPT-J models of record (SPEC §2): presets, build/save/load, and the fast training forward;
:func:`load_causal_lm` loads a checkpoint of any RoPE family posym reads (docs/models.md)."""

from posym.model.gptj import (
    PRESETS,
    build_model,
    load_model,
    model_config,
    save_model,
)
from posym.model.fast import last_token_logits, reference_last_token_logits
from posym.model.causal_lm import load_causal_lm

__all__ = [
    "PRESETS",
    "build_model",
    "load_model",
    "load_causal_lm",
    "model_config",
    "save_model",
    "last_token_logits",
    "reference_last_token_logits",
]
