"""Tiny random models of every RoPE family posym supports (docs/models.md), built from their configs
in the test (no downloads): 4 layers, width 64, 4 query heads over fewer key/value heads where the
family has GQA, head dim 16, and each family's quirks switched on (q/k norms, partial rotary, sliding
windows shorter than the test prompts, soft-capping, per-layer RoPE, NoPE layers)."""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

WINDOW = 5  # sliding window of the windowed families: shorter than the test prompts
S, F = "sliding_attention", "full_attention"

#: name -> (model_type, config overrides). The name is the model_type unless a family has variants.
FAMILY_CONFIGS: dict[str, tuple[str, dict]] = {
    "llama": ("llama", {}),
    "mistral": ("mistral", {"sliding_window": WINDOW}),
    "ministral": ("ministral", {"sliding_window": WINDOW, "layer_types": [S, F, S, F]}),
    "ministral3": ("ministral3", {}),
    "qwen2": ("qwen2", {"use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 2}),
    "qwen3": ("qwen3", {}),
    "gemma": ("gemma", {}),
    "gemma2": ("gemma2", {"sliding_window": WINDOW, "attn_logit_softcapping": 3.0, "query_pre_attn_scalar": 12}),
    # Gemma-3: local/global layers with their own RoPE bases (10k / 1M), one KV head, QK-norm
    "gemma3_text": ("gemma3_text", {"layer_types": [S, F, S, F], "sliding_window": WINDOW, "num_key_value_heads": 1,
                                    "query_pre_attn_scalar": 12}),
    "olmo": ("olmo", {"clip_qkv": 4.0}),
    "olmo2": ("olmo2", {}),
    "olmo3": ("olmo3", {"sliding_window": WINDOW, "rope_parameters": {
        S: {"rope_type": "default", "rope_theta": 10000.0}, F: {"rope_type": "default", "rope_theta": 500000.0}}}),
    "granite": ("granite", {"attention_multiplier": 0.2}),
    "phi": ("phi", {"qk_layernorm": True}),
    "phi3": ("phi3", {"partial_rotary_factor": 0.5, "sliding_window": WINDOW}),
    "stablelm": ("stablelm", {"qk_layernorm": True}),
    "persimmon": ("persimmon", {"qk_layernorm": True}),
    "gpt_neox": ("gpt_neox", {}),
    "cohere": ("cohere", {"use_qk_norm": True}),
    "cohere2": ("cohere2", {"sliding_window": WINDOW}),
    "starcoder2": ("starcoder2", {"sliding_window": WINDOW}),
    "smollm3": ("smollm3", {"no_rope_layers": [1, 1, 0, 1]}),
    "helium": ("helium", {}),
    "glm": ("glm", {}),
    "glm4": ("glm4", {}),
    "nemotron": ("nemotron", {}),
    "apertus": ("apertus", {}),
    "arcee": ("arcee", {}),
    "ernie4_5": ("ernie4_5", {}),
    "exaone4": ("exaone4", {"sliding_window": WINDOW, "layer_types": [S, S, S, F]}),
    "seed_oss": ("seed_oss", {}),
    "vaultgemma": ("vaultgemma", {"sliding_window": WINDOW, "layer_types": [S, F, S, F], "query_pre_attn_scalar": 12}),
    "cwm": ("cwm", {"sliding_window": WINDOW}),
    "mixtral": ("mixtral", {"sliding_window": WINDOW, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "qwen2_moe": ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                "shared_expert_intermediate_size": 64}),
    "qwen3_moe": ("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
    "olmoe": ("olmoe", {"num_experts": 4, "num_experts_per_tok": 2}),
    "flex_olmo": ("flex_olmo", {"num_experts": 4, "num_experts_per_tok": 2}),
    "phimoe": ("phimoe", {"sliding_window": WINDOW, "num_local_experts": 4, "num_experts_per_tok": 2}),
    "granitemoe": ("granitemoe", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "granitemoeshared": ("granitemoeshared", {"num_local_experts": 4, "num_experts_per_tok": 2,
                                              "shared_intermediate_size": 64}),
    "glm4_moe": ("glm4_moe", {"use_qk_norm": True, "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                              "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}),
    "ernie4_5_moe": ("ernie4_5_moe", {"moe_num_experts": 4, "moe_k": 2, "moe_intermediate_size": 32}),
    "minimax_m2": ("minimax_m2", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "solar_open": ("solar_open", {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                  "n_group": 1, "topk_group": 1}),
    "mellum": ("mellum", {"sliding_window": WINDOW, "layer_types": [S, F, S, F], "num_experts": 4,
                          "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
    "bitnet": ("bitnet", {}),
    "jais2": ("jais2", {}),
    "hyperclovax": ("hyperclovax", {}),
    "exaone_moe": ("exaone_moe", {"sliding_window": WINDOW, "layer_types": [S, S, S, F], "num_experts": 4,
                                  "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
    "cohere2_moe": ("cohere2_moe", {"sliding_window": WINDOW, "layer_types": [S, S, S, F], "num_experts": 4,
                                    "num_experts_per_tok": 2}),
    "afmoe": ("afmoe", {"sliding_window": WINDOW, "layer_types": [S, S, S, F], "num_experts": 4,
                        "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
    "apertus1p5_text": ("apertus1p5_text", {}),
    "aria_text": ("aria_text", {"moe_num_experts": 4, "moe_topk": 2}),
    "minimax_m3_vl_text": ("minimax_m3_vl_text", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "internlm3": ("internlm3", {}),
    "iquestcoder": ("iquestcoder", {}),
    "exaone": ("exaone", {}),
    "sarvam_moe": ("sarvam_moe", {"n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                  "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}),
    "hy_v3": ("hy_v3", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
    "kolibri1": ("kolibri1", {"sliding_window": WINDOW, "layer_types": [S, F, S, F], "num_experts": 4,
                              "num_experts_per_tok": 2, "moe_intermediate_size": 32}),
}

#: Families whose tiny test model has sliding-window layers / NoPE layers / per-layer RoPE bases.
WINDOWED = {"mistral", "ministral", "qwen2", "gemma2", "gemma3_text", "olmo3", "phi3", "cohere2", "starcoder2",
            "exaone4", "vaultgemma", "cwm", "mixtral", "phimoe", "mellum",
            "exaone_moe", "cohere2_moe", "afmoe", "kolibri1"}
NOPE = {"cohere2": [3], "smollm3": [2], "exaone4": [3], "exaone_moe": [3], "cohere2_moe": [3], "afmoe": [3],
        "kolibri1": [1, 3]}
PER_LAYER_ROPE = {"gemma3_text", "olmo3", "mellum"}


def build_family(name: str, vocab_size: int = 128, seed: int = 0, std: float = 0.3, **overrides) -> torch.nn.Module:
    """The tiny random eager model of family ``name`` (:data:`FAMILY_CONFIGS`) in eval mode; q/k
    projections re-drawn with ``std`` so attention is far from uniform. Skips the calling test when
    the installed transformers lacks the family. ``overrides``: config fields set on top."""
    model_type, extra = FAMILY_CONFIGS[name]
    extra = {**extra, **overrides}
    if model_type not in CONFIG_MAPPING:  # e.g. a family newer than the installed transformers
        pytest.skip(f"transformers {transformers.__version__} has no {model_type!r}")
    kw = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)
    kw.update(extra)
    cfg = AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith(("q_proj.weight", "k_proj.weight", "qkv_proj.weight", "query_key_value.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


def intervention_models() -> dict:
    """Builders of the tiny models the per-head intervention tests run on: GPT-J (posym's, interleaved pairs,
    partial rotary), Llama with and without GQA, Qwen3 (q/k norms, GQA), Gemma-3 (two bases, one key/value
    head), GPT-NeoX (fused per-head qkv, partial rotary)."""
    from model_state import tiny_gptj

    return {"gptj": tiny_gptj, "llama_mha": lambda: build_family("llama", vocab_size=31, num_key_value_heads=4).eval(),
            **{f: (lambda f=f: build_family(f, vocab_size=31).eval()) for f in ("llama", "qwen3", "gemma3_text")},
            "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}
