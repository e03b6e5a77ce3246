"""posym.interventions.rope_base / ntk: identity (θ′ = θ, κ = 1) bit-identical, another base changes
the logits and matches a model built with that base, every tensor and rotary buffer restored after
exit and after an exception, the fast and reference scores equal under it, one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import RopeBase, describe, interpolate, ntk, ntk_theta, parse_intervention, rope_base
from posym.interventions.rope import model_theta, model_thetas, rotary_dim
from posym.model.adapters import get_adapter

from family_models import build_family
from model_state import tiny_gptj, logits as _logits, same as _same, seeded_ids as _ids, snapshot as _snapshot


_gptj = tiny_gptj


#: GPT-J (rotary table), Llama and Qwen3 (one inv_freq), Gemma-3 (sliding/full layers: bases 10,000 / 1,000,000).
MODELS = {"gptj": _gptj, **{f: (lambda f=f: build_family(f, vocab_size=31).eval())
                            for f in ("llama", "qwen3", "gemma3_text")},
          # GPT-NeoX: one fused per-head q|k|v projection, half its head rotated (4 pairs)
          "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}


def _one_base(model) -> bool:
    return len(set(model_thetas(model).values())) == 1


def _another_base(model, scale: float = 1.0):
    """θ′ = 37 where the model has one base; the NTK rule (κ = 64) on each base where it has several."""
    return rope_base(model, 37.0 * scale) if _one_base(model) else ntk(model, 64.0 * scale)










@pytest.mark.parametrize("name", sorted(MODELS))
def test_identity_base_and_kappa_one_are_bit_identical(name):
    model, ids = MODELS[name](), _ids()
    before, snap = _logits(model, ids), _snapshot(model)
    if _one_base(model):
        with rope_base(model, model_theta(model)):
            assert torch.equal(_logits(model, ids), before)
    with ntk(model, 1.0) as applied:
        assert applied.theta == (model_theta(model) if _one_base(model) else None)
        assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_another_base_changes_the_logits_and_is_restored(name):
    model, ids = MODELS[name](), _ids()
    before, snap = _logits(model, ids), _snapshot(model)
    with _another_base(model):
        changed = _logits(model, ids)
        assert not _same(snap, _snapshot(model))  # a rotary buffer really was replaced
    assert not torch.allclose(changed, before, atol=1e-4)
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))
    with pytest.raises(RuntimeError, match="inside"):
        with ntk(model, 8.0):
            assert not torch.allclose(_logits(model, ids), before, atol=1e-6)
            raise RuntimeError("inside")
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))


def test_llama_base_matches_a_model_built_with_that_base():
    """The rebuilt inv_freq is the one transformers computes for a config with θ′ (same weights)."""
    model = MODELS["llama"]()
    cfg = model.config
    key = "rope_parameters" if isinstance(getattr(cfg, "rope_parameters", None), dict) else None
    other = build_family("llama", vocab_size=31).eval()
    if key:
        other.config.rope_parameters = {**cfg.rope_parameters, "rope_theta": 37.0}
    else:
        other.config.rope_theta = 37.0
    emb = other.model.rotary_emb
    expected = type(emb)(other.config).inv_freq
    with rope_base(model, 37.0):
        assert torch.equal(model.model.rotary_emb.inv_freq, expected)


def test_gemma3_ntk_scales_each_layer_type_base():
    """Gemma-3 under ntk:κ: each layer type's inv_freq is the one transformers builds for a config whose
    base of that type is θ_type·κ^{d/(d−2)}; the adapter (head scores) reads each layer's own."""
    import copy

    model, kappa = MODELS["gemma3_text"](), 4.0
    d = rotary_dim(model)
    thetas = model_thetas(model)
    assert thetas == {"full_attention": 1e6, "sliding_attention": 1e4}
    cfg = copy.deepcopy(model.config)
    cfg.rope_parameters = {lt: {**p, "rope_theta": ntk_theta(p["rope_theta"], kappa, d)}
                           for lt, p in cfg.rope_parameters.items()}
    emb = model.model.rotary_emb
    expected = type(emb)(cfg)
    ad = get_adapter(model)
    with ntk(model, kappa) as applied:
        assert applied == RopeBase(theta=None, kappa=kappa)
        for lt in thetas:
            assert torch.equal(getattr(emb, f"{lt}_inv_freq"), getattr(expected, f"{lt}_inv_freq"))
        for layer, lt in enumerate(model.config.layer_types):
            assert torch.equal(ad.layer_inv_freq(layer), getattr(expected, f"{lt}_inv_freq").double())
    for lt in thetas:  # the original tables are back
        assert torch.equal(getattr(emb, f"{lt}_inv_freq"), getattr(type(emb)(model.config), f"{lt}_inv_freq"))


def test_gemma3_one_theta_for_two_bases_and_other_rope_types_are_refused():
    model = MODELS["gemma3_text"]()
    snap = _snapshot(model)
    with pytest.raises(PosymError, match="2 RoPE bases.*ntk:kappa") as e:
        with rope_base(model, 20000.0):
            pass
    assert "\n" not in str(e.value) and _same(snap, _snapshot(model))
    model.model.rotary_emb.rope_type["full_attention"] = "linear"
    for call in (lambda: ntk(model, 2.0), lambda: interpolate(model, factor=2)):
        with pytest.raises(PosymError, match="rope_type='linear' on full_attention layers") as e:
            with call():
                pass
        assert "\n" not in str(e.value) and _same(snap, _snapshot(model))


def test_a_table_whose_base_is_not_the_configs_is_refused():
    """A rotary table built with another base than the config's rope_theta (as Gemma-3's second module
    on transformers 4.x): its base is unknown, so ntk and rope-base refuse it in one line."""
    model = MODELS["llama"]()
    emb = model.model.rotary_emb
    emb.inv_freq = 1.0 / (500.0 ** (torch.arange(0, 16, 2, dtype=torch.float) / 16))
    snap = _snapshot(model)
    for call in (lambda: ntk(model, 2.0), lambda: rope_base(model, 100.0)):
        with pytest.raises(PosymError, match="does not match the config's rope_theta=10000") as e:
            with call():
                pass
        assert "\n" not in str(e.value) and _same(snap, _snapshot(model))


def test_ntk_rule():
    assert ntk_theta(10000.0, 4.0, 16) == pytest.approx(10000.0 * 4.0 ** (16 / 14))
    assert ntk_theta(10000.0, 1.0, 16) == 10000.0
    assert rotary_dim(_gptj()) == 16


def _score_gap(model, ids) -> float:
    """max |fast − reference| over s_POS and s_SYM under another base, at query 8."""
    with _another_base(model):
        fast = scores_fast(model, ids, query_pos=8)
        ref = scores_reference(model, ids, query_pos=8)
    return max(float(np.abs(np.asarray(getattr(fast, f)) - np.asarray(getattr(ref, f))).max()) for f in ("s_pos", "s_sym"))


#: The float32 bound of the fast/reference gap under a changed base. The two paths do the same
#: arithmetic in a different order (the fast path rotates the captured q/k in float64, the model in
#: float32), so they differ by float32 rounding (eps ≈ 1.2e-7) amplified by the attention: Qwen3's q/k
#: norms make its logits large, and the gap there is 2.2e-5 on an AMD EPYC (transformers 5.17 and
#: 5.25 alike), 4e-8 … 1e-6 for the other families. 1e-4 ≈ 800 eps; the float64 test below is the exact one.
F32_SCORE_ATOL = 1e-4


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_and_reference_scores_agree_under_a_base_change(name):
    model, ids = MODELS[name](), _ids(T=10, B=2)
    plain = scores_fast(model, ids, query_pos=8)
    assert _score_gap(model, ids) < F32_SCORE_ATOL
    with _another_base(model):
        fast = scores_fast(model, ids, query_pos=8)
    assert not torch.allclose(torch.as_tensor(plain.s_pos), torch.as_tensor(fast.s_pos), atol=1e-6)


def _float64_norm(module):
    """``module``'s RMSNorm forward computed in its input's dtype (HF's casts x to float32 first)."""
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    gemma = "Gemma" in type(module).__name__  # Gemma's norm scales by (1 + w), the others by w

    def forward(x):
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return y * ((1.0 + module.weight) if gemma else module.weight)
    return forward


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma3_text"])
def test_in_float64_the_fast_and_reference_scores_agree_to_1e10_under_a_base_change(name, monkeypatch):
    """The float32 gap above is rounding, not a wrong formula: with the model in float64 and HF's
    float32 casts (RMSNorm input, softmax) kept in float64, the two paths agree to ~1e-14 (Qwen3:
    2.2e-5 in float32, 2.3e-6 in float64 with HF's casts, 2e-14 without them)."""
    model, ids = MODELS[name]().double(), _ids(T=10, B=2)
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            monkeypatch.setattr(module, "forward", _float64_norm(module))
    softmax = torch.nn.functional.softmax

    def softmax64(x, dim=None, dtype=None, **kw):
        return softmax(x, dim=dim, dtype=x.dtype if x.dtype == torch.float64 else dtype, **kw)
    monkeypatch.setattr(torch.nn.functional, "softmax", softmax64)
    assert _score_gap(model, ids) < 1e-10


@pytest.mark.parametrize("call, msg", [(lambda m: rope_base(m, 0.0), "> 0"),
                                       (lambda m: rope_base(m, -5), "> 0"),
                                       (lambda m: rope_base(m, math.inf), "finite"),
                                       (lambda m: rope_base(m, 100.0, layers=[5]), "out of range"),
                                       (lambda m: ntk(m, 0.5), ">= 1"),
                                       (lambda m: ntk(m, "x"), "not a number"),
                                       (lambda m: ntk(m, 1e300), "<= 1e"),  # was OverflowError (probe T1)
                                       (lambda m: ntk(m, 1e29), "beyond 1e"),  # θ·κ^(d/(d-2)) past the range
                                       (lambda m: rope_base(m, 1e300), "in \\[1e-30, 1e"),  # was OverflowError
                                       (lambda m: rope_base(m, 1e-300), "in \\[1e-30, 1e"),  # was NaN scores
                                       (lambda m: rope_base(build_family("gemma"), 100.0), "not supported")])
def test_bad_parameters_are_one_line_errors(call, msg):
    model = _gptj()
    snap = _snapshot(model)
    with pytest.raises(PosymError, match=msg) as e:
        with call(model):
            pass
    assert "\n" not in str(e.value) and _same(snap, _snapshot(model))


def test_canonical_strings():
    assert describe(RopeBase(theta=20000.0)) == "rope-base:theta=20000"
    assert describe(RopeBase(theta=20000.0, kappa=4.0)) == "ntk:kappa=4"
    assert parse_intervention("rope-base:theta=20000") == RopeBase(theta=20000.0)
    assert parse_intervention("ntk:kappa=2.5") == RopeBase(kappa=2.5)
    assert describe(RopeBase(theta=1e20)) == "rope-base:theta=1e+20"  # not 21 digits
    assert parse_intervention("rope-base:theta=1e20") == RopeBase(theta=1e20)
    for text, msg in [("ntk:kappa=0.5", ">= 1"), ("rope-base:theta=0", "> 0"), ("ntk:", "needs kappa"),
                      ("ntk:kappa=1e300", "<= 1e"), ("rope-base:theta=1e300", "1e-30"), ("rope-base:theta=1e-300", "1e-30"),
                      ("rope-base:theta=1,beta=2", "unknown key")]:
        with pytest.raises(PosymError, match=msg):
            parse_intervention(text)


@pytest.mark.parametrize("text", ["ntk:kappa=1e300", "rope-base:theta=1e300", "rope-base:theta=1e-300",
                                  "interpolate:factor=1e308", "temperature:beta=1e308", "freq-mask:keep="])
def test_api_intervened_refuses_extreme_values_with_a_posym_error(text):
    """The API raised OverflowError (probe T1) or gave NaN scores (N3, N4) on these."""
    from posym.interventions import intervened

    model = _gptj()
    with pytest.raises(PosymError) as e:
        with intervened(model, text):
            pass
    assert "\n" not in str(e.value)


def test_ntk_within_the_range_builds_a_finite_table():
    model = _gptj()
    ids = torch.randint(1, 31, (2, 9), generator=torch.Generator().manual_seed(0))
    with ntk(model, 1e20), torch.no_grad():
        assert torch.isfinite(model(ids).logits).all()
