"""temperature:form=llama4 — Llama-4's attention temperature tuning, ``s(n) = ln(⌊n/floor_scale⌋ + 1)·attn_scale + 1``:

* parity with transformers' ``Llama4TextAttention``: a tiny Llama-4 text model with NoPE layers and
  ``attn_temperature_tuning=True`` gives the logits of the same weights with the tuning off under
  posym's ``temperature:form=llama4,…,layers=<its NoPE layers>``. posym's adapter does not support
  Llama-4 (docs/models.md: complex ``freqs_cis`` rotary, chunked attention), so this test gives
  ``temperature`` the Llama-4 NoPE layers' ``q_proj`` as its q sites (what
  ``posym.interventions.sites.linear_sites`` decides for a supported family); everything else is the
  public path (``intervened``, the canonical string, the scale and the hook);
* on a supported family (Llama): the scale equals transformers' expression bit for bit, queries with
  ``n < floor_scale`` and ``attn_scale=0`` are bit-identical, fast = reference scores, restored;
* canonical strings (the other forms' strings unchanged), one-line errors, the theory's logit scale."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import transformers

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import Temperature, describe, intervened, parse_intervention, temperature_scale

from family_models import build_family
from model_state import logits as _logits, same as _same, seeded_ids as _ids, snapshot as _snapshot

FLOOR_SCALE, ATTN_SCALE, T = 3, 0.7, 20  # the scale moves every 3 positions within the 20-token input
NOPE_LAYERS = (1, 3)
#: The module (``posym.interventions.temperature`` the attribute is the context manager of that name).
temperature_module = importlib.import_module("posym.interventions.temperature")


def _llama4_pair():
    """(tuned, plain): one tiny Llama-4 text model (layers 1 and 3 NoPE, dense MLPs, eager) with
    transformers' temperature tuning on, and the same weights with it off."""
    llama4 = pytest.importorskip("transformers.models.llama4", reason=f"transformers {transformers.__version__} has no Llama-4")
    kw = dict(vocab_size=31, hidden_size=64, intermediate_size=64, intermediate_size_mlp=128, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
              no_rope_layers=[0 if i in NOPE_LAYERS else 1 for i in range(4)], moe_layers=[], num_local_experts=2,
              floor_scale=FLOOR_SCALE, attn_scale=ATTN_SCALE, attention_chunk_size=64, pad_token_id=0, bos_token_id=1,
              eos_token_id=2)
    models = []
    for tuning in (True, False):
        cfg = llama4.Llama4TextConfig(attn_temperature_tuning=tuning, **kw)
        torch.manual_seed(0)
        models.append(transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval())
    tuned, plain = models
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():  # large q/k so attention is far from uniform
        for name, p in tuned.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    plain.load_state_dict(tuned.state_dict())
    for layer in range(4):
        assert bool(plain.model.layers[layer].self_attn.use_rope) == (layer not in NOPE_LAYERS)
    return tuned, plain


def _llama4_sites(model, layers, name):
    """The q sites of a Llama-4 text model's ``layers``: ``q_proj`` ([B, T, H·hd]); in a NoPE layer
    nothing but the temperature acts on q between it and the logit."""
    cfg = model.config
    ad = SimpleNamespace(n_heads=cfg.num_attention_heads, n_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim)
    attn = [model.model.layers[int(l)].self_attn for l in layers]
    assert all(not a.use_rope for a in attn), "the llama4 form is Llama-4's on its NoPE layers"
    return ad, [(int(l), a.q_proj, a.k_proj, False) for l, a in zip(layers, attn)]


def test_parity_with_transformers_llama4_attention_temperature_tuning(monkeypatch):
    tuned, plain = _llama4_pair()
    ids = _ids(T=T, B=2)
    with torch.no_grad():
        expected, before = tuned(ids, use_cache=False).logits, plain(ids, use_cache=False).logits
    assert not torch.allclose(expected, before, atol=1e-3)  # the tuning really changes these logits
    snap = _snapshot(plain)
    monkeypatch.setattr(temperature_module, "linear_sites", _llama4_sites)
    text = f"temperature:form=llama4,floor_scale={FLOOR_SCALE},attn_scale={ATTN_SCALE},layers=1+3"
    with intervened(plain, text) as canon, torch.no_grad():
        assert canon == text
        got = plain(ids, use_cache=False).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert torch.equal(got, expected)  # the same float32 scale and product as transformers': bit for bit here
    with torch.no_grad():
        assert torch.equal(plain(ids, use_cache=False).logits, before) and _same(snap, _snapshot(plain))


def test_the_scale_is_transformers_expression_bit_for_bit():
    positions = torch.arange(5000)
    theirs = torch.log1p(torch.floor((positions.float() + 1.0) / 8192)) * 0.1 + 1.0  # Llama4TextAttention
    ours = temperature_scale(positions + 1, 0.1, 8192, "llama4")
    assert ours.dtype == torch.float64 and torch.equal(ours.float(), theirs)
    theirs = torch.log1p(torch.floor((positions.float() + 1.0) / 7)) * 0.35 + 1.0
    assert torch.equal(temperature_scale(positions + 1, 0.35, 7, "llama4").float(), theirs)
    assert (temperature_scale(positions + 1, 0.1, 8192, "llama4") == 1.0).all()  # n < 8192: exactly 1


def _scale_q_by_hand(model, floor_scale: float, attn_scale: float):
    """Forward hooks multiplying each query of every layer by transformers' Llama-4 expression."""
    def hook(module, args, out):
        n = torch.arange(1, out.shape[1] + 1).float()
        s = torch.log1p(torch.floor(n / floor_scale)) * attn_scale + 1.0
        return out * s.view(1, -1, 1)
    return [layer.self_attn.q_proj.register_forward_hook(hook) for layer in model.model.layers]


def test_on_llama_it_scales_each_query_as_llama4_does():
    model, ids = build_family("llama", vocab_size=31), _ids(T=T, B=2)
    before, snap = _logits(model, ids), _snapshot(model)
    handles = _scale_q_by_hand(model, 4, 0.5)
    expected = _logits(model, ids)
    for h in handles:
        h.remove()
    with intervened(model, "temperature:form=llama4,floor_scale=4,attn_scale=0.5"):
        assert torch.equal(_logits(model, ids), expected)
    assert not torch.allclose(expected, before, atol=1e-4)
    for text in ("temperature:form=llama4,floor_scale=21,attn_scale=0.5", "temperature:form=llama4,floor_scale=2,attn_scale=0"):
        with intervened(model, text):  # every query below floor_scale, or attn_scale 0: exactly 1.0
            assert torch.equal(_logits(model, ids), before)
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))


def test_fast_and_reference_scores_agree_under_the_llama4_form():
    model, ids = build_family("llama", vocab_size=31), _ids(T=10, B=2)
    with intervened(model, "temperature:form=llama4,floor_scale=2,attn_scale=2,layers=0+2"):
        fast, ref = scores_fast(model, ids, query_pos=8), scores_reference(model, ids, query_pos=8)
    for f in ("s_pos", "s_sym"):
        assert np.abs(np.asarray(getattr(fast, f)) - np.asarray(getattr(ref, f))).max() < 1e-4


def test_canonical_strings_and_the_other_forms_unchanged():
    spec = parse_intervention("temperature:form=llama4")  # Llama-4's defaults
    assert spec == Temperature(0.1, 8192, "llama4") and describe(spec) == "temperature:form=llama4,floor_scale=8192,attn_scale=0.1"
    for text in ("temperature:form=llama4,floor_scale=3,attn_scale=0.7,layers=1+3",
                 "temperature:form=llama4,floor_scale=8192,attn_scale=0"):
        assert describe(parse_intervention(text)) == text and parse_intervention(describe(parse_intervention(text))) is not None
    assert parse_intervention("temperature:attn_scale=0.7,floor_scale=3,form=llama4") == Temperature(0.7, 3, "llama4")
    assert "Llama-4" in spec.describe() and "\n" not in spec.describe()
    for text, canon in (("temperature:beta=1", "temperature:beta=1,n_train=17,floor=1"),
                        ("temperature:beta=0.5,floor=0", "temperature:beta=0.5,n_train=17,floor=0"),
                        ("temperature:beta=0.5,n_train=33,form=ssmax,layers=0+2",
                         "temperature:beta=0.5,n_train=33,form=ssmax,layers=0+2")):
        assert describe(parse_intervention(text)) == canon


@pytest.mark.parametrize("text, msg", [
    ("temperature:form=llama4,beta=1", "not beta"), ("temperature:form=llama4,floor=1", "not floor"),
    ("temperature:beta=1,floor_scale=3", "belong to form=llama4"), ("temperature:form=ssmax,attn_scale=1", "belong to form=llama4"),
    ("temperature:form=llama4,floor_scale=0", "floor_scale=0 must be an integer >= 1"),
    ("temperature:form=llama4,floor_scale=2.5", "integers"), ("temperature:form=llama4,attn_scale=-1", "attn_scale"),
    ("temperature:form=llama4,attn_scale=inf", "finite"), ("temperature:form=llama4,attn_scale=1e9", "<= 1000"),
    ("temperature:form=cosine,beta=1", "not one of log, ssmax, llama4")])
def test_bad_strings_are_one_line_errors(text, msg):
    with pytest.raises(PosymError, match=msg) as e:
        parse_intervention(text)
    assert "\n" not in str(e.value)


def test_theory_logit_scale_is_the_form():
    from posym.verbs.theory import intervention_effects

    effect = intervention_effects(["temperature:form=llama4,floor_scale=10,attn_scale=0.5"])
    s = effect["temperature:form=llama4,floor_scale=10,attn_scale=0.5"].logit_scale(np.array([9, 10, 25, 100]))
    np.testing.assert_allclose(s, [1.0, 1 + 0.5 * np.log(2), 1 + 0.5 * np.log(3), 1 + 0.5 * np.log(11)], rtol=1e-6)
