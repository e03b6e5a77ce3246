"""posym.interventions.freq_mask: all IDs kept = bit-identical no-op; dropped IDs are zero in the q and
k the score engine captures; no ID kept with full rotary = uniform causal attention; restored after
exit and after an exception; fast = reference scores under a mask; one-line errors; canonical string."""

from __future__ import annotations

import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import FreqMask, describe, freq_mask, parse_intervention
from posym.model import build_model, model_config
from posym.model.adapters import get_adapter
from posym.model.rope import expand_pairs

from family_models import build_family


def _gptj():
    return build_model(model_config("quick", 31, n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16,
                                    initializer_range=0.3), seed=0).eval()


def _llama():
    return build_family("llama", vocab_size=31).eval()


#: GPT-J and Llama (hooks on q_proj/k_proj), Qwen3 and Gemma-3 (on the q/k norms' outputs).
MODELS = {"gptj": _gptj, "llama": _llama, **{f: (lambda f=f: build_family(f, vocab_size=31).eval())
                                            for f in ("qwen3", "gemma3_text")},
          # GPT-NeoX: one fused per-head q|k|v projection, half its head rotated (4 pairs)
          "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}


def _ids(T=12, B=3):
    return torch.randint(1, 31, (B, T), generator=torch.Generator().manual_seed(1))


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("name", sorted(MODELS))
def test_all_kept_is_bit_identical_and_a_mask_changes_and_restores(name):
    model, ids = MODELS[name](), _ids()
    n_freq = get_adapter(model).rotary_dim // 2
    before = _logits(model, ids)
    with freq_mask(model, range(1, n_freq + 1)):
        assert torch.equal(_logits(model, ids), before)
    with freq_mask(model, [1, 2], layers=[0]):
        assert not torch.allclose(_logits(model, ids), before, atol=1e-4)
    assert torch.equal(_logits(model, ids), before)
    with pytest.raises(RuntimeError, match="inside"):
        with freq_mask(model, []):
            raise RuntimeError("inside")
    assert torch.equal(_logits(model, ids), before)
    assert not any(m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dropped_ids_are_zero_in_captured_q_and_k(name):
    model, ids = MODELS[name](), _ids()
    ad = get_adapter(model)
    keep = [1, 3]
    with freq_mask(model, keep, layers=[1]):
        cap = ad.capture(ids, layers=[0, 1])
    per_pair = torch.tensor([i + 1 in keep for i in range(ad.rotary_dim // 2)])
    kept = expand_pairs(per_pair.float(), ad.pair_convention).bool()
    for t in ("q", "k"):
        rot = cap[1][t][..., : ad.rotary_dim].abs().amax(dim=(0, 1, 2))  # per rotary dim
        assert (rot[kept] > 0).all() and (rot[~kept] == 0).all()
        assert (cap[0][t].abs().amax() > 0)


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma3_text"])
def test_no_id_kept_gives_uniform_causal_attention(name):
    """Full rotary, no ID kept: q·k = 0, so every allowed key gets the same weight (Gemma-3's sliding
    layers: the keys inside the window)."""
    model, ids = MODELS[name](), _ids(T=8)
    ad = get_adapter(model)
    with freq_mask(model, []), torch.no_grad():
        att = model(ids, output_attentions=True).attentions
    T = ids.shape[1]
    diff = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    for layer, a in enumerate(att):
        win = ad.sliding_window(layer)
        allowed = ((diff >= 0) & (diff < (win or T))).float()
        expected = allowed / allowed.sum(-1, keepdim=True)
        assert torch.allclose(a.float(), expected.expand_as(a), atol=1e-6), layer


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_and_reference_scores_agree_under_a_mask(name):
    model, ids = MODELS[name](), _ids(T=10, B=2)
    with freq_mask(model, [1, 2, 3], layers=[0]):
        fast = scores_fast(model, ids, query_pos=8)
        ref = scores_reference(model, ids, query_pos=8)
    for field in ("s_pos", "s_sym"):
        assert torch.allclose(torch.as_tensor(getattr(fast, field)), torch.as_tensor(getattr(ref, field)), atol=1e-5)


def test_bad_masks_are_one_line_errors_and_canonical_strings():
    model = _gptj()
    for keep, layers, msg in [([0], None, "1..8"), ([9], None, "1..8"), (["a"], None, "integer"), ([1], [5], "out of range")]:
        with pytest.raises(PosymError, match=msg) as e:
            with freq_mask(model, keep, layers=layers):
                pass
        assert "\n" not in str(e.value)
    with pytest.raises(PosymError, match="not supported"):
        with freq_mask(build_family("gemma2"), [1]):
            pass
    capped = build_family("gemma3_text")
    capped.config.attn_logit_softcapping = 3.0
    with pytest.raises(PosymError, match="soft-capping") as e:
        with freq_mask(capped, [1]):
            pass
    assert "\n" not in str(e.value)
    assert not any(m._forward_hooks for m in model.modules())
    assert describe(FreqMask((1, 2, 3), (0,))) == "freq-mask:keep=1+2+3,layers=0"
    assert parse_intervention("freq-mask:keep=3+1+2,layers=0") == FreqMask((1, 2, 3), (0,))
    assert parse_intervention("freq-mask:keep=none") == FreqMask(())  # dropping every frequency: said so
    assert describe(FreqMask(())) == "freq-mask:keep=none"
    for text, msg in [("freq-mask:layers=0", "needs keep"), ("freq-mask:keep=0", "start at 1"), ("freq-mask:keep=a", "integers"),
                      ("freq-mask:keep=", "keep=none drops every frequency"), ("freq-mask:keep=1+", "integers")]:
        with pytest.raises(PosymError, match=msg):
            parse_intervention(text)
