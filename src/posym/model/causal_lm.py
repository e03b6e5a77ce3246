"""Loading a checkpoint of any RoPE family posym reads (SPEC §3; the families: docs/models.md).

Every analysis works on every family :func:`posym.model.adapters.get_adapter` supports, so a small
Llama or Gemma trained on the number task is scored, length-tested, intervened on and ablated the
same way as posym's GPT-J; this is the one loader they share (through
:func:`posym.runs.resolve.resolve_model`).
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


def check_family(directory: str | os.PathLike) -> str | None:
    """The ``model_type`` of a checkpoint folder (None for a GPT-J without one) when posym reads that
    family; a one-line PosymError naming the supported families otherwise (read from ``config.json``
    only, before any weights load)."""
    model_type = checkpoint_model_type(directory)
    if model_type not in (None, "gptj", POSYM_MODEL_TYPE) and model_type not in FAMILIES:
        raise PosymError(f"{directory} holds a {model_type!r} model, which posym cannot read; "
                         f"supported families: {supported_families()} (docs/models.md)")
    return model_type


def load_causal_lm(directory: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """Load an HF causal-LM checkpoint directory of any supported family in eval mode with eager attention.

    GPT-J checkpoints load as :func:`posym.model.gptj.load_model` does; the other families through
    ``AutoModelForCausalLM`` in float32. Missing or unexpected weight tensors are refused
    (:func:`posym.model.gptj.check_loading_info`); an unsupported family is a one-line PosymError
    naming the supported ones.
    """
    model_type = check_family(directory)
    if model_type in (None, "gptj", POSYM_MODEL_TYPE):
        return load_model(directory, device)
    from transformers import AutoModelForCausalLM

    return load_pretrained(AutoModelForCausalLM, directory, device, dtype=torch.float32)


__all__ = ["check_family", "load_causal_lm"]
