"""The adapter contract on every supported RoPE family (SPEC §3; docs/models.md): on a tiny random
model of each family, the attention recomputed from the captured pre-rotary q/k equals the model's
own eager ``output_attentions`` to 1e-5, per layer and head; plus each family's quirks (windows,
per-layer RoPE, NoPE layers, partial rotary) and the one-line refusals."""

import pytest
import torch

from posym.errors import PosymError
from posym.model import rope
from posym.model.adapters import SUPPORTED, get_adapter, hook_handles
from posym.model.families import FAMILIES
from family_models import FAMILY_CONFIGS, NOPE, PER_LAYER_ROPE, WINDOW, WINDOWED, build_family

T = 13  # prompt length (> WINDOW)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def test_every_family_has_a_tiny_model():
    assert set(FAMILIES) == {mt for mt, _ in FAMILY_CONFIGS.values()}
    assert SUPPORTED == ("gptj", *FAMILIES)


@pytest.mark.parametrize("name", list(FAMILY_CONFIGS))
def test_contract_per_layer_and_head(name):
    model = build_family(name)
    ad = get_adapter(model)
    ids = torch.randint(0, 128, (2, T), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(ids, output_attentions=True).attentions
        q, k = ad.capture_qk(ids)
    assert ad.family == FAMILY_CONFIGS[name][0] and len(ref) == ad.n_layers == 4
    assert q.shape == (4, 2, ad.n_heads, T, ad.head_dim) and k.shape == (4, 2, ad.n_kv_heads, T, ad.head_dim)
    for layer in range(ad.n_layers):
        att = ad.attention_from_qk(q, k, layer)
        for h in range(ad.n_heads):
            err = (att[:, h] - ref[layer][:, h].float()).abs().max().item()
            assert err <= 1e-5, f"{name} layer {layer} head {h}: max error {err:.3g}"
    assert max(r[:, :, -1].max().item() for r in ref) > 0.3  # far from uniform (1/13)


@pytest.mark.parametrize("name", list(FAMILY_CONFIGS))
def test_quirks_windows_nope_and_rotary(name):
    model = build_family(name)
    ad = get_adapter(model)
    wins = [ad.sliding_window(l) for l in range(ad.n_layers)]
    assert (WINDOW in wins) == (name in WINDOWED), wins
    assert set(wins) <= {None, WINDOW}
    nope = [l for l in range(ad.n_layers) if not ad.has_rope(l)]
    assert nope == NOPE.get(name, [])
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, ad.head_dim, generator=g, dtype=torch.float64)
    y = torch.randn(3, ad.head_dim, generator=g, dtype=torch.float64)
    for l in range(ad.n_layers):
        inv = ad.layer_inv_freq(l)
        assert inv.shape == (ad.rotary_dim // 2,) and (inv == 0).all() == (l in nope)
        xr = ad.rotate(x, [0, 4, 9], l)
        assert torch.equal(xr[:, ad.rotary_dim:], x[:, ad.rotary_dim:])  # partial rotary passes through
        if l in nope:
            assert torch.equal(xr, x)
        # rotate_t is the exact transpose, and the logit depends on the offset only
        assert torch.allclose((ad.rotate_t(y, [0, 4, 9], l) * x).sum(-1), (y * xr).sum(-1), atol=1e-12)
        a = ad.rotate(x[:1], [9], l) @ ad.rotate(y[:1], [4], l).T
        b = ad.rotate(x[:1], [15], l) @ ad.rotate(y[:1], [10], l).T
        assert a.item() == pytest.approx(b.item(), abs=1e-5)
    if name in PER_LAYER_ROPE or nope:
        with pytest.raises(PosymError, match="pass layer="):
            ad.inv_freq
    else:
        assert torch.equal(ad.inv_freq, ad.layer_inv_freq(0))


def test_gemma3_global_layers_use_their_own_base():
    ad = get_adapter(build_family("gemma3_text"))
    assert (ad.n_kv_heads, ad.scaling, ad.head_dim) == (1, pytest.approx(12 ** -0.5), 16)
    assert [ad.sliding_window(l) for l in range(4)] == [WINDOW, None, WINDOW, None]
    assert torch.allclose(ad.layer_inv_freq(0), rope.angles(16, 10_000.0), rtol=1e-6)  # local layers
    assert torch.allclose(ad.layer_inv_freq(1), rope.angles(16, 1_000_000.0), rtol=1e-6)  # global layers
    x = torch.randn(1, 16, dtype=torch.float64)
    assert not torch.allclose(ad.rotate(x, [7], 0), ad.rotate(x, [7], 1))
    with pytest.raises(PosymError, match="per-layer RoPE"):
        ad.rotate(x, [7])


def test_ministral3_stops_where_its_query_scaling_starts():
    ad = get_adapter(build_family("ministral3"))
    cap = ad.config.rope_parameters["original_max_position_embeddings"]
    assert ad.max_positions == cap  # below it the Llama-4 query scale is exactly 1
    ad.rotate(torch.zeros(1, 16), [cap - 1])
    with pytest.raises(PosymError, match="beyond"):
        ad.rotate(torch.zeros(1, 16), [cap])


def test_partial_rotary_and_conventions():
    dims = {name: get_adapter(build_family(name)) for name in ("phi", "stablelm", "persimmon", "glm", "cohere", "helium")}
    assert {n: a.rotary_dim for n, a in dims.items()} == {"phi": 8, "stablelm": 4, "persimmon": 8, "glm": 8,
                                                          "cohere": 16, "helium": 16}
    assert {n: a.pair_convention for n, a in dims.items()} == {"phi": "half", "stablelm": "half", "persimmon": "half",
                                                               "glm": "interleaved", "cohere": "interleaved",
                                                               "helium": "interleaved"}


def test_unsupported_families_are_refused_in_one_line():
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model("codegen", vocab_size=50, n_embd=32, n_layer=1, n_head=2, rotary_dim=8, n_positions=32)
    with pytest.raises(PosymError) as exc:
        get_adapter(AutoModelForCausalLM.from_config(cfg))
    msg = str(exc.value)
    assert "model_type='codegen'" in msg and "gemma3_text" in msg and "\n" not in msg


def _value_heads(ad, layer: int, store: dict) -> list:
    """Hooks storing ``layer``'s values [B, Hkv, T, hd] in ``store["v"]`` (separate / fused / per-head qkv)."""
    attn = ad.attention_module(layer)
    Hkv, hd, H = ad.n_kv_heads, ad.head_dim, ad.n_heads
    if hasattr(attn, "v_proj"):
        def hook(m, a, out):
            store["v"] = out.reshape(*out.shape[:2], Hkv, hd).transpose(1, 2)
        return [attn.v_proj.register_forward_hook(hook)]
    if hasattr(attn, "qkv_proj"):  # Phi-3: [q | k | v]
        def fused(m, a, out):
            store["v"] = out[..., (H + Hkv) * hd:].reshape(*out.shape[:2], Hkv, hd).transpose(1, 2)
        return [attn.qkv_proj.register_forward_hook(fused)]

    def per_head(m, a, out):  # GPT-NeoX / Persimmon: per head [q | k | v]
        store["v"] = out.reshape(*out.shape[:2], H, 3 * hd)[..., 2 * hd:].transpose(1, 2)
    return [attn.query_key_value.register_forward_hook(per_head)]


#: Families whose output-site input is not ``attn_weights @ v`` of the value projection: AFMoE gates
#: the heads' outputs per element (sigmoid of its ``gate_proj``) before ``o_proj``.
_NOT_PLAIN_AV = {"afmoe"}


@pytest.mark.parametrize("name", list(FAMILY_CONFIGS))
def test_head_output_site_is_attention_times_values(name):
    """The input of :meth:`head_output_site` is ``[B, T, H*hd]``, head h at ``h*hd:(h+1)*hd`` equal to
    ``attn_weights[h] @ v[kv_head_of(h)]`` (GQA: the query head's own output)."""
    model = build_family(name)
    ad = get_adapter(model)
    ids = torch.randint(0, 128, (2, T), generator=torch.Generator().manual_seed(0))
    seen, values = {}, {l: {} for l in range(ad.n_layers)}
    with hook_handles() as handles:
        for layer in range(ad.n_layers):
            handles.append(ad.head_output_site(layer).register_forward_pre_hook(
                lambda m, a, layer=layer: seen.__setitem__(layer, a[0].detach())))
            handles += _value_heads(ad, layer, values[layer])
        with torch.no_grad():
            att = model(ids, output_attentions=True).attentions
    H, hd = ad.n_heads, ad.head_dim
    for layer in range(ad.n_layers):
        x = seen[layer]
        assert x.shape == (2, T, H * hd), (name, layer, tuple(x.shape))
        if name in _NOT_PLAIN_AV:
            continue
        v = values[layer]["v"][:, ad.kv_index]  # [B, H, T, hd]
        want = (att[layer].float() @ v.float()).transpose(1, 2).reshape(2, T, H * hd)
        err = (x.float() - want).abs().max().item()
        assert err <= 1e-5, f"{name} layer {layer}: max error {err:.3g}"


def test_head_output_site_gptj_and_refusal():
    from posym.model import build_model, model_config

    gptj = build_model(model_config("quick", 40, n_layer=2, n_head=2, n_embd=32, n_inner=64, rotary_dim=8), seed=0)
    ad = get_adapter(gptj)
    assert ad.head_output_site(1) is gptj.transformer.h[1].attn.out_proj
    with pytest.raises(PosymError, match="out of range"):
        ad.head_output_site(2)
    model = build_family("llama")
    ad = get_adapter(model)
    assert ad.head_output_site(0) is model.model.layers[0].self_attn.o_proj
    del model.model.layers[0].self_attn.o_proj
    with pytest.raises(PosymError, match="cannot find the output projection") as err:
        ad.head_output_site(0)
    assert "\n" not in str(err.value)
