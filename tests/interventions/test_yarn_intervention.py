"""posym.interventions.yarn: the plain model under ``yarn:factor=F,original=N`` gives the logits of the
same weights loaded with transformers' YaRN (``rope_parameters={"rope_type": "yarn", …}``) on inputs
longer than N (Llama, Qwen3, Gemma-3's two layer types, GPT-NeoX's partial rotary; every optional key);
its tables are transformers' bit for bit; the model is restored bit for bit after exit and after an
exception; factor 1 is a bit-identical no-op; GPT-J's table; fast = reference scores; the KV cache; the
theory's per-frequency ratio; canonical strings and one-line errors."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import Yarn, describe, holds_under_kv_cache, intervened, parse_intervention, yarn
from posym.interventions.yarn import yarn_attention_factor, yarn_inv_freq, yarn_ramp
from posym.model.gptj import positions_extended

from family_models import build_family
from model_state import logits as _logits, same as _same, seeded_ids as _ids, snapshot as _snapshot, tiny_gptj

MODELS = {"gptj": tiny_gptj, **{f: (lambda f=f: build_family(f, vocab_size=31).eval())
                                for f in ("llama", "qwen3", "gemma3_text")},
          "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}
HF = ("llama", "qwen3", "gemma3_text", "gpt_neox")
N, T = 16, 40  # the original context and the test inputs' length (> N; the tiny models hold 64 positions)


def _yarn_config(cfg, params: dict):
    """A copy of ``cfg`` with transformers' YaRN: ``rope_parameters`` (transformers 5; per layer type
    where the config has them, Gemma-3) or the 4.x ``rope_scaling``."""
    cfg = copy.deepcopy(cfg)
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict):
        nested = all(isinstance(v, dict) for v in rp.values())
        cfg.rope_parameters = {lt: {**p, **params} for lt, p in rp.items()} if nested else {**rp, **params}
    else:
        cfg.rope_scaling = dict(params)
    return cfg


def _transformers_yarn(model, params: dict):
    """The same weights loaded with transformers' YaRN of ``params``."""
    cfg = _yarn_config(model.config, {"rope_type": "yarn", "original_max_position_embeddings": N, **params})
    ref = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    ref.load_state_dict(model.state_dict())
    return ref


def _tables(model) -> dict:
    """Every rotary inv_freq and attention_scaling of an HF model, by name."""
    emb = model.base_model.rotary_emb
    out = {}
    for name, buf in emb.named_buffers():
        if name.endswith("inv_freq") and "original" not in name:
            out[name] = buf.clone()
            out[name.replace("inv_freq", "attention_scaling")] = getattr(emb, name.replace("inv_freq", "attention_scaling"))
    return out


@pytest.mark.parametrize("name", HF)
def test_parity_with_transformers_yarn_on_inputs_longer_than_the_original_context(name):
    model, ids = MODELS[name](), _ids(T=T, B=2)
    ref = _transformers_yarn(model, {"factor": 4.0})
    expected, before, snap = _logits(ref, ids), _logits(model, ids), _snapshot(model)
    assert not torch.allclose(before, expected, atol=1e-3)  # YaRN really changes these logits
    with intervened(model, "yarn:factor=4,original=16") as canon:
        assert canon == "yarn:factor=4,original=16"
        got = _logits(model, ids)
        theirs, ours = _tables(ref), _tables(model)
        assert theirs.keys() == ours.keys()
        for key, value in theirs.items():  # transformers' tables and factors, bit for bit
            assert torch.equal(ours[key], value) if torch.is_tensor(value) else ours[key] == value
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))


@pytest.mark.parametrize("params, text", [
    ({"factor": 8.0, "beta_fast": 16.0, "beta_slow": 2.0}, "yarn:factor=8,original=16,beta_fast=16,beta_slow=2"),
    ({"factor": 4.0, "truncate": False}, "yarn:factor=4,original=16,truncate=0"),
    ({"factor": 4.0, "attention_factor": 1.5}, "yarn:factor=4,original=16,attention_factor=1.5"),
    ({"factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.5}, "yarn:factor=4,original=16,mscale=1,mscale_all_dim=0.5"),
    ({"factor": 2.5}, "yarn:factor=2.5,original=16")])
def test_parity_for_every_optional_key(params, text):
    model, ids = MODELS["llama"](), _ids(T=T, B=2)
    expected = _logits(_transformers_yarn(model, params), ids)
    with intervened(model, text) as canon:
        assert canon == text
        torch.testing.assert_close(_logits(model, ids), expected, atol=1e-5, rtol=0)


def test_the_tables_are_transformers_own():
    """yarn_inv_freq / yarn_attention_factor equal transformers' _compute_yarn_parameters bit for bit."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = MODELS["llama"]()
    for params in ({"factor": 4.0}, {"factor": 32.0, "beta_fast": 8.0, "truncate": False},
                   {"factor": 3.0, "mscale": 0.7, "mscale_all_dim": 0.9}):
        cfg = _yarn_config(model.config, {"rope_type": "yarn", "original_max_position_embeddings": 300, **params})
        inv, factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, None)
        spec = Yarn(original=300, **params)
        assert torch.equal(yarn_inv_freq(spec, 10000.0, 16), inv) and spec.scaling() == factor


@pytest.mark.parametrize("name", sorted(MODELS))
def test_factor_one_is_bit_identical_and_every_change_is_restored(name):
    model, ids = MODELS[name](), _ids()
    before, snap = _logits(model, ids), _snapshot(model)
    with yarn(model, Yarn(1.0, N)):
        assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))
    with intervened(model, "yarn:factor=8,original=8"):
        assert not torch.allclose(_logits(model, ids), before, atol=1e-4)
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))
    with pytest.raises(RuntimeError, match="inside"):
        with yarn(model, Yarn(4.0, 8)):
            raise RuntimeError("inside")
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))
    if name != "gptj":
        assert all(v == 1.0 for k, v in _tables(model).items() if not torch.is_tensor(v))


def test_gptj_table_is_the_yarn_rotation_times_the_factor_also_when_extended_inside():
    model, ids = tiny_gptj(), _ids(T=T, B=2)
    spec = Yarn(4.0, 8)
    inv = yarn_inv_freq(spec, 10000.0, 16)
    a = yarn_attention_factor(4.0)
    with yarn(model, spec):
        table = model.transformer.h[0].attn.embed_positions if hasattr(model.transformer.h[0].attn, "embed_positions") \
            else model.transformer.rotary_emb.embed_positions
        ang = torch.arange(table.shape[0]).float()[:, None] * inv
        torch.testing.assert_close(table, a * torch.cat((ang.sin(), ang.cos()), 1), atol=1e-6, rtol=0)
        short = _logits(model, ids)
    n = int(table.shape[0]) + 24
    long_ids = _ids(T=n - 2, B=1)
    with positions_extended(model, n), yarn(model, spec):
        first = _logits(model, long_ids)
    with yarn(model, spec), positions_extended(model, n):
        inside = _logits(model, long_ids)
    assert torch.equal(first, inside)
    with yarn(model, spec):
        assert torch.equal(_logits(model, ids), short)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_and_reference_scores_agree_under_yarn(name):
    model, ids = MODELS[name](), _ids(T=10, B=2)
    plain = scores_fast(model, ids, query_pos=8)
    with yarn(model, Yarn(4.0, 4, attention_factor=1.3)):
        fast, ref = scores_fast(model, ids, query_pos=8), scores_reference(model, ids, query_pos=8)
    for f in ("s_pos", "s_sym"):
        assert np.abs(np.asarray(getattr(fast, f)) - np.asarray(getattr(ref, f))).max() < 1e-4
    assert not np.allclose(np.asarray(plain.s_pos), np.asarray(fast.s_pos), atol=1e-6)


def test_exact_under_a_kv_cache():
    model, ids = MODELS["llama"](), _ids(T=T, B=1)
    assert holds_under_kv_cache(Yarn(4.0, N))
    with yarn(model, Yarn(4.0, N)), torch.no_grad():
        full = model(ids).logits[:, -1]
        out = model(ids[:, :-1], use_cache=True)
        step = model(ids[:, -1:], past_key_values=out.past_key_values, use_cache=True).logits[:, -1]
    torch.testing.assert_close(step, full, atol=1e-5, rtol=0)


def test_theory_ratio_is_the_tables_ratio_and_the_logits_scale_by_the_factor_squared():
    from posym.verbs.theory import intervention_effects, rope_frame

    spec = Yarn(4.0, 17)
    d, base = rope_frame()
    effect = intervention_effects(["yarn:factor=4,original=17"])["yarn:factor=4,original=17"]
    default = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ratio = (yarn_inv_freq(spec, base, d).double() / default).numpy()
    got = np.array([effect.freq_ratio(i) for i in range(1, d // 2 + 1)])
    np.testing.assert_allclose(got, ratio, rtol=1e-5)
    assert got[0] == 1.0 and got[-1] == pytest.approx(0.25)  # the fastest kept, the slowest interpolated by F
    assert float(yarn_ramp(spec, base, d)[0]) == 0.0
    np.testing.assert_array_equal(effect.logit_scale(np.array([17, 100])), (0.1 * math.log(4) + 1) ** 2)


def test_canonical_strings_round_trip():
    assert describe(Yarn(4.0, 17)) == "yarn:factor=4,original=17"
    for text in ("yarn:factor=4,original=17", "yarn:factor=2.5,original=4096,beta_fast=16,beta_slow=2,truncate=0",
                 "yarn:factor=4,original=17,attention_factor=1", "yarn:factor=8,original=64,mscale=1,mscale_all_dim=1"):
        spec = parse_intervention(text)
        assert spec.canonical() == text and parse_intervention(spec.canonical()) == spec
    assert parse_intervention("yarn:original=17,factor=4.0,beta_fast=32,truncate=1") == Yarn(4.0, 17)
    assert Yarn("4", 17) == Yarn(4.0, 17)


@pytest.mark.parametrize("text, msg", [
    ("yarn:factor=4", "needs original"), ("yarn:original=17", "needs factor"), ("yarn:factor=0.5,original=17", ">= 1"),
    ("yarn:factor=1e9,original=17", "<= 1e"), ("yarn:factor=4,original=0", ">= 1"), ("yarn:factor=4,original=1.5", "integer"),
    ("yarn:factor=4,original=17,beta_fast=1,beta_slow=2", "beta_fast=1 must be >= beta_slow"),
    ("yarn:factor=4,original=17,beta_slow=0", "> 0"), ("yarn:factor=4,original=17,mscale=1", "together"),
    ("yarn:factor=4,original=17,attention_factor=1,mscale=1,mscale_all_dim=1", "one or the other"),
    ("yarn:factor=4,original=17,truncate=2", "truncate"), ("yarn:factor=nan,original=17", "finite"),
    ("yarn:factor=4,original=17,theta=3", "unknown key")])
def test_bad_strings_are_one_line_errors(text, msg):
    with pytest.raises(PosymError, match=msg) as e:
        parse_intervention(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("make, msg", [(lambda: build_family("gemma", vocab_size=31), "yarn: model_type='gemma' is not supported"),
                                       (lambda: _transformers_yarn(MODELS["llama"](), {"factor": 2.0}), "rope_type='yarn'")])
def test_unsupported_models_are_refused_before_any_change(make, msg):
    model = make()
    snap = _snapshot(model)
    with pytest.raises(PosymError, match=msg) as e:
        with intervened(model, "yarn:factor=4,original=16"):
            pass
    assert "\n" not in str(e.value) and _same(snap, _snapshot(model))
