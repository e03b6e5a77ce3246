"""Known-answer frequency use in each family's own rotary layout (SPEC §4; Paper A Table 1).

For every layout — interleaved pairs (GPT-J; Cohere; GLM, whose rotary module lays cos/sin out
half-split for interleaved pairs, partial), rotate-half (Llama, Qwen3, Gemma-3, GPT-NeoX), partial
rotary (GPT-J ``rotary_dim < head_dim``, GPT-NeoX ``rotary_pct < 1``), per-layer-type bases (Gemma-3
sliding 10k / full 1M), QK-norm (Qwen3, Gemma-3: q/k read after the norm) and GQA (Llama, 2 KV heads
for 4 query heads) — a head is built whose q and k live only on the two head dims of ONE frequency
pair ``k``, written here from each family's convention (not read from posym):

* interleaved (GPT-J): dims ``(2k-2, 2k-1)``; rotate-half: dims ``(k-1, k-1 + r/2)``, ``r`` = rotated dims;
* angle of pair ``k``: ``base^(-2(k-1)/r)``, ``base`` read from the model's config (per layer type for Gemma-3).

Known answers: ``frequency_use`` puts ≥ 0.99 (in fact all) of the head's use on pair ``k``, its
dominant ID is ``k`` and its angle the one above; the per-frequency terms sum to the model's own
eager attention logits (its softmax, not posym's re-implementation). A previous-token head built on
the three fastest pairs with amplitudes ``a = (1, 0.6, 0.4)`` attends to ``t-1`` in the model's own
attention, has dominant ID 1 and use shares ``a² / Σa²`` exactly (each term peaks at ``t-1``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPTJConfig, GPTJForCausalLM

from posym.heads.frequencies import frequency_logits, frequency_use, weighted_frequency_id
from posym.model.adapters import get_adapter

torch.set_num_threads(1)

V, HIDDEN, H, HD, T = 50, 64, 4, 16, 10
S, F = "sliding_attention", "full_attention"


# ------------------------------------------------------------------------------------------------
# tiny models and their q/k weights, in each family's own module layout
# ------------------------------------------------------------------------------------------------
def _hf(model_type: str, n_layer: int = 1, **extra) -> torch.nn.Module:
    kw = dict(vocab_size=V, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=n_layer,
              num_attention_heads=H, num_key_value_heads=H, head_dim=HD, max_position_embeddings=32,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)
    kw.update(extra)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **kw), attn_implementation="eager").eval()


def _gptj(rotary_dim: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=V, n_positions=32, n_embd=HIDDEN, n_layer=1, n_head=H, rotary_dim=rotary_dim,
                     n_inner=2 * HIDDEN, bos_token_id=None, eos_token_id=None, attn_implementation="eager")
    return GPTJForCausalLM(cfg).eval()


#: layout name -> (builder, convention, rotated dims r, QK-norm)
LAYOUTS = {
    "gptj-interleaved": (lambda: _gptj(HD), "interleaved", HD, False),
    "gptj-partial": (lambda: _gptj(8), "interleaved", 8, False),
    "cohere-interleaved": (lambda: _hf("cohere"), "interleaved", HD, False),  # an HF family with GPT-J's pairs
    "glm-interleaved-partial": (lambda: _hf("glm"), "interleaved", 8, False),  # half-split cos/sin on pairs
    "llama-half": (lambda: _hf("llama"), "half", HD, False),
    "llama-gqa": (lambda: _hf("llama", num_key_value_heads=2), "half", HD, False),
    "gpt_neox-partial": (lambda: _hf("gpt_neox", rotary_pct=0.5), "half", 8, False),
    "qwen3-qknorm": (lambda: _hf("qwen3", num_key_value_heads=2), "half", HD, True),
    "gemma3-qknorm": (lambda: _hf("gemma3_text", n_layer=2, layer_types=[S, F], num_key_value_heads=1,
                                  query_pre_attn_scalar=HD), "half", HD, True),
}


def pair_dims(convention: str, k: int, r: int) -> list[int]:
    """The two head dims of frequency pair ``k`` (1 = fastest) in a convention (module doc)."""
    return [2 * k - 2, 2 * k - 1] if convention == "interleaved" else [k - 1, k - 1 + r // 2]


def base_of(model, layer: int) -> float:
    """The RoPE base of ``layer`` from the config (GPT-J: HF's fixed 10,000)."""
    cfg = model.config
    if cfg.model_type == "gptj":
        return 10000.0
    params = cfg.rope_parameters
    if getattr(cfg, "layer_types", None) and cfg.layer_types[layer] in params:
        params = params[cfg.layer_types[layer]]
    return float(params["rope_theta"])


def angle(model, layer: int, k: int, r: int) -> float:
    return base_of(model, layer) ** (-2 * (k - 1) / r)


def qk_linears(model, layer: int):
    """``(q linear, q row of (head, dim), k linear, k row of (kv head, dim))`` of ``layer``."""
    mt = model.config.model_type
    if mt == "gptj":
        a = model.transformer.h[layer].attn
        return a.q_proj, lambda h, d: h * HD + d, a.k_proj, lambda g, d: g * HD + d
    if mt == "gpt_neox":  # per head [q | k | v] in one query_key_value
        qkv = model.gpt_neox.layers[layer].attention.query_key_value
        return qkv, lambda h, d: h * 3 * HD + d, qkv, lambda g, d: g * 3 * HD + HD + d
    a = model.model.layers[layer].self_attn
    return a.q_proj, lambda h, d: h * HD + d, a.k_proj, lambda g, d: g * HD + d


def qk_norms(model, layer: int):
    a = model.model.layers[layer].self_attn
    return a.q_norm, a.k_norm


def _set_rows(lin, row, head: int, dims, gen, x: torch.Tensor | None = None, target: torch.Tensor | None = None):
    """Rows of ``head`` in ``lin``: random on ``dims`` and 0 elsewhere; or, with ``x`` and ``target``
    [HD], the rank-one map sending the (constant) input ``x`` to ``target``. Bias rows zeroed."""
    with torch.no_grad():
        for d in range(HD):
            if target is not None:
                lin.weight[row(head, d)] = (target[d] * x / x.dot(x)).float()
            else:
                lin.weight[row(head, d)] = 0.3 * torch.randn(lin.in_features, generator=gen) if d in dims else 0.0
            if lin.bias is not None:
                lin.bias[row(head, d)] = 0.0


def single_pair_head(model, layer: int, k: int, convention: str, r: int, qk_norm: bool, head: int = 0,
                     seed: int = 1) -> None:
    """Make query head ``head`` (and the KV head it reads) of ``layer`` use only pair ``k``.

    QK-norm families: q/k projections stay random on every dim; the norm weights are 0 outside the
    pair (Qwen3: ``w``; Gemma-3: ``1 + w``), so only q/k *after* the norm live on the pair (and every
    head of the layer uses pair ``k`` only)."""
    dims = pair_dims(convention, k, r)
    gen = torch.Generator().manual_seed(seed)
    if qk_norm:
        off = -1.0 if model.config.model_type == "gemma3_text" else 0.0
        with torch.no_grad():
            for norm in qk_norms(model, layer):
                w = torch.full((HD,), off)
                w[dims] = off + 1.0 + torch.rand(2, generator=gen)  # a positive, non-uniform scale on the pair
                norm.weight.copy_(w)
        return
    ql, qrow, kl, krow = qk_linears(model, layer)
    kv = head // (H // get_adapter(model).n_kv_heads)  # HF repeat_kv
    _set_rows(ql, qrow, head, dims, gen)
    _set_rows(kl, krow, kv, dims, gen)


def _ids(n: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, V, (n, T), generator=torch.Generator().manual_seed(seed))


def _check_terms_against_model(model, ids, layer: int) -> None:
    """The terms of the last query sum to the model's own eager logits (up to the softmax's constant)."""
    terms = frequency_logits(model, ids, layers=[layer])[0].sum(2)  # [B, H, T]
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True, use_cache=False).attentions[layer][:, :, -1].double()
    mine = torch.log_softmax(terms, dim=-1)
    ok = att > 1e-20  # keys inside any window (and not underflowed)
    assert ok.sum(-1).min() >= 4
    assert (mine[ok] - att[ok].log()).abs().max() <= 1e-4


def _row(table, layer: int, head: int):
    return table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]


# ------------------------------------------------------------------------------------------------
# one pair per head: every layout
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(LAYOUTS))
def test_single_pair_head_uses_that_pair(name):
    build, conv, r, qk_norm = LAYOUTS[name]
    ids = _ids()
    for k in (1, 2, r // 2):
        model = build()
        ad = get_adapter(model)
        assert (ad.pair_convention, ad.rotary_dim, ad.head_dim) == (conv, r, HD)
        head = 3
        single_pair_head(model, 0, k, conv, r, qk_norm, head=head)
        use = frequency_use(model, ids, layers=[0])
        mine = use[use["head"] == head].set_index("freq_id")
        assert mine.loc[k, "use_frac"] >= 0.99, (name, k, mine["use_frac"].round(3).tolist())
        assert mine.loc[k, "use"] > 0 and mine["use"].drop(k).abs().max() <= 1e-6 * mine.loc[k, "use"]
        row = _row(weighted_frequency_id(use), 0, head)
        assert row["dominant_id"] == k and row["weighted_id"] == pytest.approx(k)
        assert row["dominant_angle"] == pytest.approx(angle(model, 0, k, r), rel=1e-6)
        assert row["nonrotary_share"] == 0.0
        _check_terms_against_model(model, ids, 0)


def test_partial_rotary_nonrotary_head():
    """q/k only on the dims past ``rotary_dim``: all use on the non-rotary term, no rotary ID."""
    ids = _ids()
    for name in ("gptj-partial", "gpt_neox-partial"):
        build, conv, r, _ = LAYOUTS[name]
        model = build()
        ql, qrow, kl, krow = qk_linears(model, 0)
        gen = torch.Generator().manual_seed(3)
        _set_rows(ql, qrow, 1, range(r, HD), gen)
        _set_rows(kl, krow, 1, range(r, HD), gen)
        use = frequency_use(model, ids, layers=[0])
        row = _row(weighted_frequency_id(use), 0, 1)
        assert row["nonrotary_share"] == 1.0 and math.isnan(row["weighted_id"]) and row["dominant_id"] == -1
        nr = use[(use["head"] == 1) & ~use["rotary"]]
        assert len(nr) == 1 and nr["freq_id"].item() == r // 2 + 1 and nr["angle"].item() == 0.0
        _check_terms_against_model(model, ids, 0)


def test_gqa_key_head_decides_the_pair():
    """Llama, 4 query heads over 2 KV heads: keys of KV head 1 only on pair 3, queries random; the
    query heads reading KV head 1 under HF's ``repeat_kv`` (2 and 3) use pair 3 alone, heads 0–1 do not."""
    build, conv, r, _ = LAYOUTS["llama-gqa"]
    model = build()
    _, _, kl, krow = qk_linears(model, 0)
    _set_rows(kl, krow, 1, pair_dims(conv, 3, r), torch.Generator().manual_seed(5))
    use = frequency_use(model, _ids(), layers=[0])
    share = use[use["freq_id"] == 3].set_index("head")["use_frac"]
    assert share[2] >= 0.99 and share[3] >= 0.99
    assert share[0] < 0.9 and share[1] < 0.9
    tab = weighted_frequency_id(use).set_index("head")
    assert list(tab.loc[[2, 3], "dominant_id"]) == [3, 3]


def test_qk_norm_is_read_after_the_norm():
    """Qwen3 / Gemma-3 with random projections and norm weights 0 outside pair k: the q/k posym reads
    are 0 outside the pair (post-norm), the projections' outputs are not."""
    ids = _ids(n=2)
    for name in ("qwen3-qknorm", "gemma3-qknorm"):
        build, conv, r, _ = LAYOUTS[name]
        model = build()
        single_pair_head(model, 0, 2, conv, r, True)
        q, k = get_adapter(model).capture_qk(ids, [0])
        off = [d for d in range(HD) if d not in pair_dims(conv, 2, r)]
        assert q[..., off].abs().max() == 0 and k[..., off].abs().max() == 0
        seen = {}
        hook = qk_linears(model, 0)[0].register_forward_hook(lambda m, a, out: seen.setdefault("q", out.detach()))
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
        hook.remove()
        assert seen["q"].reshape(*ids.shape, H, HD)[..., off].abs().max() > 0.1  # pre-norm: every dim
        use = frequency_use(model, ids, layers=[0])
        assert (use.loc[use["freq_id"] == 2, "use_frac"] >= 0.99).all()  # every head: the norm is shared


def test_gemma3_per_layer_bases():
    """Gemma-3, layer 0 sliding (base 10k), layer 1 full (base 1M): pair 2 on layer 0, pair 5 on
    layer 1; ``layer_inv_freq`` and the table's angles are each layer's own."""
    build, conv, r, _ = LAYOUTS["gemma3-qknorm"]
    model = build()
    assert base_of(model, 0) == 1e4 and base_of(model, 1) == 1e6
    ad = get_adapter(model)
    for layer in (0, 1):
        want = np.array([angle(model, layer, k, r) for k in range(1, r // 2 + 1)])
        assert np.allclose(ad.layer_inv_freq(layer).numpy(), want, rtol=1e-6)
    single_pair_head(model, 0, 2, conv, r, True)
    single_pair_head(model, 1, 5, conv, r, True)
    ids = _ids()
    use = frequency_use(model, ids)
    for layer, k in ((0, 2), (1, 5)):
        lu = use[use["layer"] == layer]
        want = np.array([angle(model, layer, j, r) for j in lu["freq_id"]])
        assert np.allclose(lu["angle"].to_numpy(), want, rtol=1e-6)
        assert (lu.loc[lu["freq_id"] == k, "use_frac"] >= 0.99).all()
        tab = weighted_frequency_id(lu)
        assert (tab["dominant_id"] == k).all()
        assert np.allclose(tab["dominant_angle"], angle(model, layer, k, r), rtol=1e-6)
        _check_terms_against_model(model, ids, layer)
    assert angle(model, 1, 5, r) < angle(model, 0, 5, r) / 5  # the global layer's pair 5 is far slower


# ------------------------------------------------------------------------------------------------
# previous-token head: the fastest frequency dominates
# ------------------------------------------------------------------------------------------------
AMPS = (1.0, 0.6, 0.4)


def previous_token_head(model, conv: str, r: int, head: int = 0, offset: int = 1) -> None:
    """Layer 0, query head ``head``: every token gets one embedding (q, k constant over positions);
    post-norm ``k`` = ``a_i`` on the first dim of pairs 1..3 and ``q`` = ``k`` rotated by
    ``-offset·θ_i`` in each pair (dims of :func:`pair_dims`), so the logit at distance ``d`` is
    ``Σ a_i² cos((d - offset) θ_i)`` up to positive factors: peaked at ``d = offset``."""
    emb = model.get_input_embeddings()
    with torch.no_grad():
        emb.weight.copy_(emb.weight[3].expand_as(emb.weight))
    ql, qrow, kl, krow = qk_linears(model, 0)
    seen = {}
    h = ql.register_forward_pre_hook(lambda m, a: seen.setdefault("x", a[0].detach()))
    with torch.no_grad():
        model(input_ids=_ids(n=1), use_cache=False)
    h.remove()
    x = seen["x"][0].double()
    assert torch.allclose(x, x[:1].expand_as(x), atol=1e-6)  # constant over positions
    x = x[0]
    q, k = torch.zeros(HD, dtype=torch.float64), torch.zeros(HD, dtype=torch.float64)
    for i, a in enumerate(AMPS, start=1):
        th = angle(model, 0, i, r) * offset
        da, db = pair_dims(conv, i, r)
        k[da] = a
        q[da], q[db] = a * math.cos(th), -a * math.sin(th)
    kv = head // (H // get_adapter(model).n_kv_heads)
    _set_rows(ql, qrow, head, None, None, x=x, target=q)
    _set_rows(kl, krow, kv, None, None, x=x, target=k)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_previous_token_head_uses_the_fastest_frequency(name):
    build, conv, r, _ = LAYOUTS[name]
    model = build()
    head = 1
    previous_token_head(model, conv, r, head=head)
    ids = _ids()
    with torch.no_grad():
        att = model(input_ids=ids, output_attentions=True, use_cache=False).attentions[0][:, head]  # [B, T, T]
    assert (att[:, 1:].argmax(-1) == torch.arange(T - 1)).all()  # every query t >= 1 attends to t-1
    use = frequency_use(model, ids, layers=[0])
    mine = use[(use["head"] == head) & use["rotary"]].sort_values("freq_id")
    a2 = np.array(AMPS) ** 2
    assert np.allclose(mine["use_frac"].to_numpy()[:3], a2 / a2.sum(), rtol=1e-5)
    assert mine["use_frac"].to_numpy()[3:].max(initial=0) <= 1e-6
    row = _row(weighted_frequency_id(use), 0, head)
    assert row["dominant_id"] == 1 and row["dominant_angle"] == pytest.approx(1.0)
    assert row["weighted_id"] == pytest.approx((a2 * [1, 2, 3]).sum() / a2.sum(), rel=1e-5)
