"""Loading a checkpoint of any RoPE family posym reads (SPEC §3; the families: docs/models.md).

The head scores work on every family :func:`posym.model.adapters.get_adapter` supports, so a small
Llama or Gemma trained on the number task is scored the same way as posym's GPT-J. Verbs that need
posym's own GPT-J (its fast training forward, ablations, length generalisation) keep
:func:`posym.model.gptj.load_model`, which refuses other families.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from posym.errors import PosymError
from posym.model.adapters import supported_families
from posym.model.families import FAMILIES
from posym.model.gptj import checkpoint_model_type, load_model, load_pretrained
from posym.model.pe import POSYM_MODEL_TYPE


def load_causal_lm(directory: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """Load an HF causal-LM checkpoint directory of any supported family in eval mode with eager attention.

    GPT-J checkpoints load as :func:`posym.model.gptj.load_model` does; the other families through
    ``AutoModelForCausalLM`` in float32. Missing or unexpected weight tensors are refused
    (:func:`posym.model.gptj.check_loading_info`); an unsupported family is a one-line PosymError
    naming the supported ones.
    """
    model_type = checkpoint_model_type(directory)
    if model_type in (None, "gptj", POSYM_MODEL_TYPE):
        return load_model(directory, device)
    if model_type not in FAMILIES:
        raise PosymError(f"{directory} holds a {model_type!r} model, which posym cannot read; "
                         f"supported families: {supported_families()} (docs/models.md)")
    from transformers import AutoModelForCausalLM

    return load_pretrained(AutoModelForCausalLM, directory, device, dtype=torch.float32)


__all__ = ["load_causal_lm"]
