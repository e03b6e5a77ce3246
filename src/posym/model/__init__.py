"""GPT-J models of record (SPEC §2): presets, build/save/load, and the fast training forward."""

from posym.model.gptj import (
    PRESETS,
    build_model,
    load_model,
    model_config,
    save_model,
)
from posym.model.fast import last_token_logits, reference_last_token_logits

__all__ = [
    "PRESETS",
    "build_model",
    "load_model",
    "model_config",
    "save_model",
    "last_token_logits",
    "reference_last_token_logits",
]
