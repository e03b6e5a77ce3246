"""The HF RoPE decoder families posym reads (SPEC §3; the list and its quirks: docs/models.md).

One :class:`Family` per ``config.model_type`` says how that family lays out its attention, so one
adapter (:class:`posym.model.adapters.HFRopeAdapter`) serves them all. Everything else (head
counts, head dim, ``scaling``, soft-cap, sliding windows, the rotary module and its per-layer
variants, q/k norms) is read from the loaded model itself. Each family listed here has a contract
test (``tests/model/test_families.py``): the recomputed attention equals the model's eager
attention to 1e-5, per layer and head.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Layouts of the q/k projections.
QKV_LAYOUTS = ("separate", "fused", "per_head")


@dataclass(frozen=True)
class Family:
    """How one HF family lays out its RoPE attention.

    ``qkv``: ``"separate"`` (``q_proj`` / ``k_proj``), ``"fused"`` (``qkv_proj`` = ``[q (H·hd) | k
    (Hkv·hd) | v]``, Phi-3) or ``"per_head"`` (``query_key_value`` = per head ``[q | k | v]``,
    GPT-NeoX, Persimmon). ``pairs``: the pair convention of the rotation (``"half"`` |
    ``"interleaved"``). ``table``: the layout of the rotary module's cos/sin when it differs from
    ``pairs`` (Helium, GLM: a half-split table applied to interleaved pairs). ``norm_heads_first``: a
    4-D q/k-norm output is ``[B, H, T, hd]`` (else ``[B, T, H, hd]``); read from the shape, this
    decides only when ``H == T``. ``window_from_config``: the attention passes
    ``config.sliding_window`` (Mistral, Phi-3) instead of an attribute of its own. ``nope``: how a
    layer without rotary (NoPE) shows — ``"unwindowed"`` (layers without a sliding window and
    without ``force_rope``: Cohere2), ``"global"`` (the same, but only when the model has a sliding
    window at all: EXAONE-4), or the name of the attention's flag that is true on rotary layers
    (``"use_rope"``: SmolLM3; ``"is_local_attention"``: AFMoE). ``position_cap``: the
    ``rope_parameters`` key beyond which the family rescales queries by position (Ministral-3's
    Llama-4 attention scaling), so posym stops there.
    """

    qkv: str = "separate"
    pairs: str = "half"
    table: str | None = None
    norm_heads_first: bool = False
    window_from_config: bool = False
    nope: str | None = None
    position_cap: str | None = None


_LLAMA = Family()
_HEADS_FIRST = Family(norm_heads_first=True)
_WINDOW = Family(window_from_config=True)
_HALF_TABLE = Family(pairs="interleaved", table="half")

#: ``config.model_type`` -> :class:`Family`, for every family posym supports besides GPT-J.
FAMILIES: dict[str, Family] = {
    # dense decoders
    "llama": _LLAMA,
    "mistral": _WINDOW,
    "ministral": _LLAMA,
    "ministral3": Family(window_from_config=True, position_cap="original_max_position_embeddings"),
    "qwen2": _LLAMA,
    "qwen3": _LLAMA,
    "gemma": _LLAMA,
    "gemma2": _LLAMA,
    "gemma3_text": _HEADS_FIRST,
    "vaultgemma": _LLAMA,
    "olmo": _LLAMA,
    "olmo2": _LLAMA,
    "olmo3": _LLAMA,
    "granite": _LLAMA,
    "phi": _HEADS_FIRST,
    "phi3": Family(qkv="fused", window_from_config=True),
    "stablelm": _HEADS_FIRST,
    "persimmon": Family(qkv="per_head"),
    "gpt_neox": Family(qkv="per_head"),
    "cohere": Family(pairs="interleaved"),
    "cohere2": Family(pairs="interleaved", nope="unwindowed"),
    "starcoder2": _WINDOW,
    "smollm3": Family(nope="use_rope"),
    "helium": _HALF_TABLE,
    "glm": _HALF_TABLE,
    "glm4": _HALF_TABLE,
    "nemotron": _LLAMA,
    "apertus": _LLAMA,
    "arcee": _LLAMA,
    "ernie4_5": _HALF_TABLE,
    "exaone": _LLAMA,  # EXAONE 3.x, loads as LlamaForCausalLM
    "exaone4": Family(nope="global"),
    "seed_oss": _LLAMA,
    "cwm": _LLAMA,
    "bitnet": _LLAMA,
    "jais2": _LLAMA,
    "hyperclovax": _LLAMA,
    "internlm3": _LLAMA,  # loads as LlamaForCausalLM
    "iquestcoder": _LLAMA,  # loads as LlamaForCausalLM
    # mixture-of-experts MLPs around one of the attentions above
    "mixtral": _WINDOW,
    "phimoe": _WINDOW,
    "qwen2_moe": _LLAMA,
    "qwen3_moe": _LLAMA,
    "olmoe": _LLAMA,
    "flex_olmo": _LLAMA,
    "granitemoe": _LLAMA,
    "granitemoeshared": _LLAMA,
    "glm4_moe": _LLAMA,
    "sarvam_moe": _LLAMA,  # loads as Glm4MoeForCausalLM
    "ernie4_5_moe": _HALF_TABLE,
    "minimax_m2": _LLAMA,
    "solar_open": _LLAMA,
    "mellum": _LLAMA,
    "hy_v3": _LLAMA,
    "exaone_moe": Family(nope="global"),
    "kolibri1": Family(nope="global"),
    "cohere2_moe": Family(pairs="interleaved", nope="unwindowed"),
    "afmoe": Family(nope="is_local_attention"),
    # text decoders of multimodal models (their own *ForCausalLM)
    "apertus1p5_text": _LLAMA,
    "aria_text": _LLAMA,
    "minimax_m3_vl_text": _LLAMA,
}


__all__ = ["FAMILIES", "Family", "QKV_LAYOUTS"]
