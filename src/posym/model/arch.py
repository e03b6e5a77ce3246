"""The paper's tasks on other decoder families (SPEC §2; the builds: docs/models.md "Training other families").

``posym train --arch A`` trains the model of a preset (:data:`posym.model.gptj.PRESETS`) in another
Hugging Face RoPE family at the same shape: layers, heads (no grouped-query attention: as many
key/value heads as query heads), width, head dim, MLP width (``n_inner``), rotary dim, positions,
initialisation, norm epsilon, untied embeddings, pad 0 and no BOS/EOS. What the family's design
fixes stays the family's own (docs/models.md lists it per family):

* ``llama`` — ``LlamaForCausalLM``: RMSNorm, gated SiLU MLP (``intermediate_size = n_inner``), no
  biases, sequential residual, half-split RoPE of base 10,000 over the whole head; dropout:
  ``attention_dropout`` (= ``attn_pdrop``) only.
* ``qwen3`` — ``Qwen3ForCausalLM``: Llama's block plus RMSNorm on each head's queries and keys
  before the rotary (QK-norm); no sliding window; dropout: ``attention_dropout`` only.
* ``gemma3`` — ``Gemma3ForCausalLM`` (``gemma3_text``): RMSNorm ``(1 + w)`` before and after the
  attention and the MLP, gated GeLU-tanh MLP, embeddings scaled by ``sqrt(width)``, QK-norm, logit
  scale ``head_dim**-0.5`` (``query_pre_attn_scalar = head_dim``), no soft-capping; Gemma-3's 5:1
  pattern of sliding-window (local, RoPE base 10,000) and full (global, base 1,000,000) layers with
  a 512-token window (Gemma-3-1B's), longer than the tasks' sequences; dropout:
  ``attention_dropout`` only.
* ``gpt-neox`` — ``GPTNeoXForCausalLM``: GPT-J's parallel residual and GeLU MLP with biases, but a
  LayerNorm per branch, biased fused q/k/v, half-split pairs on the first ``rotary_dim`` dims
  (``partial_rotary_factor``); dropout: ``attention_dropout`` (= ``attn_pdrop``) and
  ``hidden_dropout`` (= ``resid_pdrop``, also on the embeddings, so ``embd_pdrop`` must equal it).

Positional encodings (SPEC §2.1): GPT-J has every variant of :mod:`posym.model.pe`; the other
families take ``rope`` and ``rope-base:θ`` (the family's ``rope_theta``; not Gemma-3, which has two
bases), and refuse the others in one line before any work.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, PretrainedConfig

from posym.errors import PosymError
from posym.model import gptj
from posym.model import pe as pe_mod

#: The families ``posym train --arch`` builds (the first is the default, the paper's model).
ARCHS: tuple[str, ...] = ("gptj", "llama", "qwen3", "gemma3", "gpt-neox")
DEFAULT_ARCH = "gptj"
#: ``config.model_type`` of each arch's checkpoints.
MODEL_TYPES: dict[str, str] = {"gptj": "gptj", "llama": "llama", "qwen3": "qwen3", "gemma3": "gemma3_text",
                               "gpt-neox": "gpt_neox"}
#: Gemma-3's own settings kept by ``--arch gemma3`` (Gemma-3-1B's window; its global base).
GEMMA3_SLIDING_WINDOW = 512
GEMMA3_GLOBAL_BASE = 1_000_000.0
GEMMA3_PATTERN = 6  # every 6th layer is global (5 local : 1 global)
#: The preset (GPT-J) fields an ``--arch`` other than gptj maps; any other override is refused.
MAPPED_KEYS: tuple[str, ...] = ("n_layer", "n_head", "n_embd", "n_inner", "rotary_dim", "n_positions",
                                "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon",
                                "initializer_range")
#: Dropouts of the preset each family has (the rest have no counterpart in it).
_DROPOUTS: dict[str, tuple[str, ...]] = {"llama": ("attn_pdrop",), "qwen3": ("attn_pdrop",),
                                         "gemma3": ("attn_pdrop",),
                                         "gpt-neox": ("attn_pdrop", "resid_pdrop", "embd_pdrop")}
#: Families whose rotary can cover only part of the head (GPT-NeoX's ``partial_rotary_factor``).
_PARTIAL_ROTARY = ("gpt-neox",)
#: ``--pe`` kinds each family takes besides GPT-J (which takes all of :data:`posym.model.pe.PE_KINDS`).
_PE_KINDS: dict[str, tuple[str, ...]] = {"llama": ("rope", "rope-base"), "qwen3": ("rope", "rope-base"),
                                         "gemma3": ("rope",), "gpt-neox": ("rope", "rope-base")}


def check_arch(arch: Any) -> str:
    """``arch`` when it is one of :data:`ARCHS`; a one-line PosymError listing them otherwise (SPEC §2)."""
    if not isinstance(arch, str) or arch not in ARCHS:
        raise PosymError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    return arch


def check_arch_pe(arch: str, pe: "str | pe_mod.PositionalEncoding | None") -> pe_mod.PositionalEncoding:
    """The parsed ``pe`` when ``arch`` can train with it exactly (SPEC §2.1); one-line PosymError otherwise."""
    variant = pe_mod.parse_pe(pe)
    if check_arch(arch) == "gptj" or variant.kind in _PE_KINDS[arch]:
        return variant
    if arch == "gemma3" and variant.kind == "rope-base":
        raise PosymError(f"--pe {variant.name} does not apply to --arch gemma3: it has two RoPE bases "
                         f"(local 10,000, global {GEMMA3_GLOBAL_BASE:,.0f}); use --pe rope")
    raise PosymError(f"--pe {variant.name} applies to --arch gptj only; --arch {arch} takes {' and '.join(_PE_KINDS[arch])}")


def arch_config(arch: str, preset: str, vocab_size: int, pe: str | None = None, **overrides: Any) -> PretrainedConfig:
    """The HF config of the preset's model (SPEC §2) in family ``arch`` (:data:`ARCHS`), eager attention.

    ``gptj`` is :func:`posym.model.gptj.model_config` itself (every ``pe``, every GPTJConfig field).
    The others take the GPT-J-named ``overrides`` of :data:`MAPPED_KEYS` (validated as GPT-J's) and
    ``pe`` ``rope`` / ``rope-base:θ`` (:func:`check_arch_pe`); anything else is a one-line PosymError.
    """
    check_arch(arch)
    if arch == "gptj":
        return gptj.model_config(preset, vocab_size, pe=pe, **overrides)
    variant = check_arch_pe(arch, pe)
    bad = sorted(k for k in overrides if k not in MAPPED_KEYS)
    if bad:
        raise PosymError(f"model override(s) {', '.join(bad)} do not apply to --arch {arch}; "
                         f"it maps {', '.join(MAPPED_KEYS)}")
    lacking = sorted(k for k in overrides if k.endswith("_pdrop") and k not in _DROPOUTS[arch] and overrides[k])
    if lacking:
        raise PosymError(f"{', '.join(lacking)} has no counterpart in --arch {arch} "
                         f"(its dropout: {', '.join(_DROPOUTS[arch])})")
    g = gptj.model_config(preset, vocab_size, **overrides)  # GPT-J's checks of every value
    hd = g.n_embd // g.n_head
    rd = g.rotary_dim or hd
    if rd != hd and arch not in _PARTIAL_ROTARY:
        raise PosymError(f"rotary_dim={rd} != head dim {hd}: --arch {arch} rotates the whole head "
                         f"(partial rotary: --arch {' or '.join(('gptj', *_PARTIAL_ROTARY))})")
    common = dict(vocab_size=vocab_size, hidden_size=g.n_embd, num_hidden_layers=g.n_layer,
                  num_attention_heads=g.n_head, intermediate_size=g.n_inner or 4 * g.n_embd,
                  max_position_embeddings=g.n_positions, initializer_range=g.initializer_range,
                  tie_word_embeddings=False, use_cache=False, pad_token_id=0, bos_token_id=None, eos_token_id=None,
                  attention_dropout=g.attn_pdrop)
    theta = float(variant.theta)
    if arch in ("llama", "qwen3"):
        kw = dict(common, num_key_value_heads=g.n_head, head_dim=hd, hidden_act="silu",
                  rms_norm_eps=g.layer_norm_epsilon, attention_bias=False,
                  rope_parameters={"rope_type": "default", "rope_theta": theta})
        if arch == "qwen3":
            kw.update(use_sliding_window=False, sliding_window=None, max_window_layers=g.n_layer)
        else:
            kw.update(mlp_bias=False)
    elif arch == "gemma3":
        kw = dict(common, num_key_value_heads=g.n_head, head_dim=hd, hidden_activation="gelu_pytorch_tanh",
                  rms_norm_eps=g.layer_norm_epsilon, attention_bias=False, query_pre_attn_scalar=hd,
                  sliding_window=GEMMA3_SLIDING_WINDOW, final_logit_softcapping=None, attn_logit_softcapping=None,
                  layer_types=["full_attention" if (i + 1) % GEMMA3_PATTERN == 0 else "sliding_attention"
                               for i in range(g.n_layer)],
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": theta},
                                   "full_attention": {"rope_type": "default", "rope_theta": GEMMA3_GLOBAL_BASE}})
    else:  # gpt-neox
        if g.embd_pdrop != g.resid_pdrop:
            raise PosymError(f"--arch gpt-neox drops embeddings and residual branches with one rate (hidden_dropout): "
                             f"embd_pdrop={g.embd_pdrop} must equal resid_pdrop={g.resid_pdrop}")
        kw = dict(common, hidden_act=g.activation_function, layer_norm_eps=g.layer_norm_epsilon,
                  hidden_dropout=g.resid_pdrop, use_parallel_residual=True, attention_bias=True,
                  rope_parameters={"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": rd / hd})
    try:
        cfg = AutoConfig.for_model(MODEL_TYPES[arch], **kw)
    except (TypeError, ValueError) as exc:
        raise PosymError(f"--arch {arch}: {str(exc).strip().splitlines()[0]}") from exc
    if arch in _PARTIAL_ROTARY and int(hd * cfg.rope_parameters["partial_rotary_factor"]) != rd:
        raise PosymError(f"rotary_dim={rd} is not a fraction of the head dim {hd} that --arch {arch} represents exactly")
    cfg._attn_implementation = "eager"  # attention weights must be observable (SPEC §3)
    return cfg


def config_arch(config: PretrainedConfig) -> str:
    """The :data:`ARCHS` name of a built or loaded config (by ``model_type``; posym's GPT-J variants are gptj)."""
    model_type = getattr(config, "model_type", None)
    if model_type in ("gptj", pe_mod.POSYM_MODEL_TYPE):
        return "gptj"
    for name, mt in MODEL_TYPES.items():
        if mt == model_type:
            return name
    raise PosymError(f"model_type {model_type!r} is none of the trainable archs ({', '.join(ARCHS)})")


def build_arch_model(config: PretrainedConfig, seed: int = 0) -> nn.Module:
    """A freshly initialised causal LM of ``config`` (:func:`arch_config`) from ``seed``, eager attention.

    GPT-J is :func:`posym.model.gptj.build_model`; the others ``AutoModelForCausalLM.from_config`` with
    the family's HF initialisation (std ``initializer_range``). The global RNG is left as it was."""
    if config_arch(config) == "gptj":
        return gptj.build_model(config, seed=seed)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with gptj.quiet_hf():
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    finally:
        torch.random.set_rng_state(gen_state)
    model.config._attn_implementation = "eager"
    return model


@contextmanager
def attention_implementation(model: nn.Module, implementation: str | None) -> Iterator[nn.Module]:
    """For the duration, ``model`` attends with ``implementation`` (e.g. ``"sdpa"``; None: unchanged),
    then its own again. Only for families other than GPT-J (whose training forward is posym's own)."""
    if implementation is None or config_arch(model.config) == "gptj":
        yield model
        return
    before = model.config._attn_implementation
    model.config._attn_implementation = implementation
    try:
        yield model
    finally:
        model.config._attn_implementation = before


def n_params(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = ["ARCHS", "DEFAULT_ARCH", "GEMMA3_GLOBAL_BASE", "GEMMA3_PATTERN", "GEMMA3_SLIDING_WINDOW", "MAPPED_KEYS",
           "MODEL_TYPES", "arch_config", "attention_implementation", "build_arch_model", "check_arch",
           "check_arch_pe", "config_arch", "n_params"]
