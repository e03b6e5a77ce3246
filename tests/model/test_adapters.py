"""RoPE adapters (DESIGN "Real models"): the contract — recomputed attention == the model's eager
``output_attentions`` to 1e-5 — for GPT-J (full and partial rotary), Llama-style (GQA) and GPT-NeoX."""

import pytest
import torch
from transformers import GPTJConfig, GPTJForCausalLM, GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

from posym.errors import PosymError
from posym.model import rope
from posym.model.adapters import get_adapter


def _gptj(rotary_dim, n_head=4, n_embd=64, seed=0):
    torch.manual_seed(seed)
    cfg = GPTJConfig(vocab_size=50, n_positions=64, n_embd=n_embd, n_layer=2, n_head=n_head, rotary_dim=rotary_dim,
                     n_inner=4 * n_embd, attn_implementation="eager")
    return GPTJForCausalLM(cfg).eval()


def _llama(model_type="llama", seed=0, **extra):
    torch.manual_seed(seed)
    kw = dict(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager", **extra)
    if model_type == "llama":
        return LlamaForCausalLM(LlamaConfig(**kw)).eval()
    from transformers import AutoConfig, AutoModelForCausalLM
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kw)).eval()


def _neox(rotary_pct=0.25, seed=0):
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        max_position_embeddings=64, rotary_pct=rotary_pct, attn_implementation="eager")
    return GPTNeoXForCausalLM(cfg).eval()


def _boost(model, std=0.3):
    """Re-draw the q/k projections larger so the attention is far from uniform (a stronger check)."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(s in name for s in ("q_proj.weight", "k_proj.weight", "query_key_value.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model


MODELS = {
    "gptj-full": lambda: _gptj(rotary_dim=16),
    "gptj-partial": lambda: _gptj(rotary_dim=8),
    "llama-gqa": lambda: _llama(),
    "llama-rope-scaled": lambda: _llama(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}),
    "neox-partial": lambda: _neox(0.25),
    "qwen2": lambda: _llama("qwen2"),
    "gemma2-softcap-window": lambda: _llama("gemma2", head_dim=16, sliding_window=5, attn_logit_softcapping=3.0,
                                            query_pre_attn_scalar=12),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_adapter_contract_attention_matches_model(name):
    model = _boost(MODELS[name]())
    ad = get_adapter(model)
    ids = torch.randint(0, 50, (3, 13))
    with torch.no_grad():
        ref = model(ids, output_attentions=True).attentions
        q, k = ad.capture_qk(ids)
    assert q.shape == (ad.n_layers, 3, ad.n_heads, 13, ad.head_dim)
    assert k.shape == (ad.n_layers, 3, ad.n_kv_heads, 13, ad.head_dim)
    for layer in range(ad.n_layers):
        att = ad.attention_from_qk(q, k, layer)
        assert att.shape == ref[layer].shape
        assert (att - ref[layer].float()).abs().max().item() <= 1e-5
    # the attention is not trivially uniform
    assert ref[0][:, :, -1].max().item() > 0.5


def test_adapter_attributes():
    g = get_adapter(_gptj(rotary_dim=8))
    assert (g.family, g.pair_convention, g.n_heads, g.head_dim, g.rotary_dim) == ("gptj", "interleaved", 4, 16, 8)
    assert g.inv_freq.shape == (4,) and g.scaling == pytest.approx(16 ** -0.5)
    assert torch.allclose(g.inv_freq, rope.angles(8))
    l = get_adapter(_llama())
    assert (l.pair_convention, l.n_heads, l.n_kv_heads, l.rotary_dim) == ("half", 4, 2, 16)
    assert [l.kv_head_of(h) for h in range(4)] == [0, 0, 1, 1]
    n = get_adapter(_neox(0.25))
    assert (n.pair_convention, n.rotary_dim, n.head_dim) == ("half", 4, 16)


@pytest.mark.parametrize("name", ["gptj-partial", "llama-gqa", "neox-partial"])
def test_rotate_is_relative_and_transpose_exact(name):
    ad = get_adapter(MODELS[name]())
    g = torch.Generator().manual_seed(0)
    q = torch.randn(ad.head_dim, generator=g, dtype=torch.float64)
    k = torch.randn(ad.head_dim, generator=g, dtype=torch.float64)
    # RoPE logit depends on the offset only
    a = ad.rotate(q[None], [9])[0] @ ad.rotate(k[None], [4])[0]
    b = ad.rotate(q[None], [15])[0] @ ad.rotate(k[None], [10])[0]
    assert a.item() == pytest.approx(b.item(), abs=1e-5)
    # rotate_t is the exact transpose
    lhs = ad.rotate_t(q[None], [7])[0] @ k
    rhs = q @ ad.rotate(k[None], [7])[0]
    assert lhs.item() == pytest.approx(rhs.item(), abs=1e-9)
    # the non-rotary dims pass through
    r = ad.rotary_dim
    assert torch.equal(ad.rotate(q[None], [5])[0, r:], q[r:])


def test_rope_helpers_conventions_and_angles():
    g = rope.angles(8, base=10000.0)
    assert g[0].item() == 1.0 and g[1].item() == pytest.approx(10000 ** (-2 / 8))
    x = torch.randn(3, 10, dtype=torch.float64)
    y = torch.randn(3, 10, dtype=torch.float64)
    inv = rope.angles(8)
    pos = torch.tensor([0, 3, 11])
    logits = {}
    for conv in rope.CONVENTIONS:
        cos, sin = rope.cos_sin(pos, inv, conv)
        xc = x if conv == "interleaved" else rope.convert_convention(x, "interleaved", conv, 8)
        yc = y if conv == "interleaved" else rope.convert_convention(y, "interleaved", conv, 8)
        logits[conv] = (rope.apply_rotary(xc, cos, sin, conv) * rope.apply_rotary(yc, cos, sin, conv)).sum(-1)
        back = rope.convert_convention(xc, conv, "interleaved", 8)
        assert torch.equal(back, x)
    assert torch.allclose(logits["interleaved"], logits["half"], atol=1e-12)
    with pytest.raises(PosymError):
        rope.partner(x, "sideways")
    with pytest.raises(PosymError):
        rope.angles(7)


def test_unsupported_model_and_bad_inputs():
    with pytest.raises(PosymError, match="unsupported model"):
        get_adapter(torch.nn.Linear(2, 2))
    ad = get_adapter(_gptj(rotary_dim=8))
    with pytest.raises(PosymError, match="layer"):
        ad.capture_qk(torch.randint(0, 50, (1, 5)), layers=[7])
    with pytest.raises(PosymError, match="positions"):
        ad.capture_qk(torch.randint(0, 50, (1, 65)))
    with pytest.raises(PosymError, match="head"):
        ad.kv_head_of(4)
