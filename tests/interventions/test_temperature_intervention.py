"""posym.interventions.temperature: an exact no-op at β = 0, a per-query scaling of the logits
otherwise, the model restored on exit (also after an exception), the fast and reference head scores
equal under it, one-line errors for bad parameters; the canonical string and its parser."""

from __future__ import annotations

import math

import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import Temperature, describe, parse_intervention, temperature, temperature_scale
from posym.model import build_model, model_config
from posym.model.adapters import get_adapter

from family_models import build_family

N_TRAIN = 5


def _gptj():
    torch.manual_seed(0)
    m = build_model(model_config("quick", 31, n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16,
                                 initializer_range=0.3), seed=0)
    return m.eval()


#: GPT-J and Llama (hooks on q_proj), Qwen3 and Gemma-3 (q/k norms: hooks on the q norm's output;
#: Gemma-3's norm output is [B, H, T, hd], Qwen3's [B, T, H, hd]).
MODELS = {"gptj": _gptj, **{f: (lambda f=f: build_family(f, vocab_size=31).eval())
                            for f in ("llama", "qwen3", "gemma3_text")},
          # GPT-NeoX: one fused per-head q|k|v projection, half its head rotated (4 pairs)
          "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}


def _ids(T=12, B=3, seed=1):
    return torch.randint(1, 31, (B, T), generator=torch.Generator().manual_seed(seed))


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def _attn(model, ids):
    with torch.no_grad():
        return model(ids, output_attentions=True).attentions


@pytest.mark.parametrize("name", sorted(MODELS))
def test_beta_zero_is_a_bit_identical_no_op(name):
    model, ids = MODELS[name](), _ids()
    before = _logits(model, ids)
    with temperature(model, 0.0, n_train=N_TRAIN):
        inside = _logits(model, ids)
    assert torch.equal(before, inside)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_beta_scales_each_query_row_of_logits(name):
    """Under β the attention of the query at position p equals softmax(s(p+1)·logits) of the untouched
    model: the log of the weights (a logit up to a row constant) is multiplied by s row by row."""
    model, ids = MODELS[name](), _ids()
    base = _logits(model, ids)
    a0 = _attn(model, ids)[1][0, 0].double()  # layer 1 (Gemma-3: a full-attention layer), batch 0, head 0: [T, T]
    with temperature(model, 1.0, n_train=N_TRAIN, layers=[1]):
        a1 = _attn(model, ids)[1][0, 0].double()
        changed = _logits(model, ids)
    assert not torch.allclose(base, changed, atol=1e-4)
    s = temperature_scale(torch.arange(1, ids.shape[1] + 1), 1.0, N_TRAIN)
    for p in range(1, ids.shape[1]):
        l0, l1 = torch.log(a0[p, : p + 1]), torch.log(a1[p, : p + 1])
        expect = s[p] * (l0 - l0[0])
        assert torch.allclose(l1 - l1[0], expect, atol=1e-4), p


@pytest.mark.parametrize("name", sorted(MODELS))
def test_restored_after_exit_and_after_an_exception(name):
    model, ids = MODELS[name](), _ids()
    before = _logits(model, ids)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with temperature(model, 2.0, n_train=N_TRAIN):
        assert not torch.equal(_logits(model, ids), before)
    assert torch.equal(_logits(model, ids), before)
    with pytest.raises(RuntimeError, match="inside"):
        with temperature(model, 2.0, n_train=N_TRAIN, form="ssmax"):
            raise RuntimeError("inside")
    assert torch.equal(_logits(model, ids), before)
    after = model.state_dict()
    assert state.keys() == after.keys() and all(torch.equal(state[k], after[k]) for k in state)
    assert not any(m._forward_hooks for m in model.modules())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_and_reference_scores_agree_under_temperature(name):
    """The score engine's q capture sits on the same module as the intervention's hook (q_proj or the
    q norm), so both paths see the scaled logits; and the scores do change."""
    model, ids = MODELS[name](), _ids(T=10, B=2)
    plain = scores_fast(model, ids, query_pos=8)
    with temperature(model, 1.5, n_train=N_TRAIN):
        fast = scores_fast(model, ids, query_pos=8)
        ref = scores_reference(model, ids, query_pos=8)
    for field in ("s_pos", "s_sym"):
        f, r = getattr(fast, field), getattr(ref, field)
        assert torch.allclose(torch.as_tensor(f), torch.as_tensor(r), atol=1e-5), field
    assert not torch.allclose(torch.as_tensor(plain.s_pos), torch.as_tensor(fast.s_pos), atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_hook_runs_before_a_capture_hook_registered_earlier(name):
    """The adapter's capture hook, registered before the intervention, still sees the scaled q: q of
    position p times s(p+1), k unchanged."""
    model, ids = MODELS[name](), _ids(T=9, B=2)
    ad = get_adapter(model)
    plain = ad.capture(ids, [0])[0]
    s = temperature_scale(torch.arange(1, 10), 1.0, N_TRAIN).float()
    with ad.capturing([0]) as stores, temperature(model, 1.0, n_train=N_TRAIN, layers=[0]):
        ad.run(ad.check_ids(ids), stop_after=0)
    assert torch.allclose(stores[0]["q"], plain["q"] * s[:, None], atol=1e-6)
    assert torch.equal(stores[0]["k"], plain["k"])


def _softcapped():
    """A Gemma-3 whose attention logits are soft-capped (as Gemma-2's are)."""
    model = build_family("gemma3_text", vocab_size=31).eval()
    model.config.attn_logit_softcapping = 3.0
    return model


def test_unsupported_family_and_bad_parameters_are_one_line_errors():
    model = _gptj()
    cases = [(build_family("gemma"), 1.0, N_TRAIN, "log", None, "not supported"),
             (build_family("gemma2"), 1.0, N_TRAIN, "log", None, "not supported"),
             (_softcapped(), 1.0, N_TRAIN, "log", None, "soft-capping"),
             (model, math.nan, N_TRAIN, "log", None, "finite"),
             (model, "x", N_TRAIN, "log", None, "not a number"),
             (model, 1.0, 0, "log", None, "n_train"),
             (model, 1.0, N_TRAIN, "cubic", None, "form"),
             (model, 1.0, N_TRAIN, "log", [7], "out of range")]
    for m, beta, n_train, form, layers, msg in cases:
        with pytest.raises(PosymError, match=msg) as e:
            with temperature(m, beta, n_train=n_train, form=form, layers=layers):
                pass
        assert "\n" not in str(e.value)
    assert not any(mod._forward_hooks for mod in model.modules())


def test_canonical_string_round_trips():
    t = Temperature(1.0, 17)
    assert describe(t) == "temperature:beta=1,n_train=17,floor=1"  # the floor is always written (log form)
    assert parse_intervention("temperature:beta=1") == t
    assert parse_intervention("temperature:beta=1,floor=1") == t
    raw = Temperature(0.5, 17, floor=False)
    assert describe(raw) == "temperature:beta=0.5,n_train=17,floor=0"
    assert parse_intervention(describe(raw)) == raw
    with_layers = Temperature(2.0, 17, "log", (1,), False)
    assert describe(with_layers) == "temperature:beta=2,n_train=17,floor=0,layers=1"
    assert parse_intervention(describe(with_layers)) == with_layers
    full = Temperature(0.5, 33, "ssmax", (0, 2))
    assert describe(full) == "temperature:beta=0.5,n_train=33,form=ssmax,layers=0+2"
    assert parse_intervention(describe(full)) == full


@pytest.mark.parametrize("text, msg", [("warmth:beta=1", "unknown intervention"),
                                       ("temperature:beta=inf", "finite"),
                                       ("temperature:beta=-1", r"in \[0, 1000\]"),
                                       ("temperature:beta=1e308", r"in \[0, 1000\]"),
                                       ("temperature:beta=1,n_train=" + "9" * 400, "n_train"),
                                       ("temperature:beta=1,floor=2", "floor must be 1"),
                                       ("temperature:beta=1,floor=yes", "floor must be 1"),
                                       ("temperature:beta=1,form=ssmax,floor=0", "log form only"),
                                       ("temperature:beta=0,form=ssmax", "uniform attention"),
                                       ("temperature:n_train=17", "needs beta"),
                                       ("temperature:beta=1,gamma=2", "unknown key"),
                                       ("temperature:beta", "key=value"),
                                       ("temperature:beta=1,n_train=x", "integers")])
def test_parser_rejects_bad_text_in_one_line(text, msg):
    with pytest.raises(PosymError, match=msg) as e:
        parse_intervention(text)
    assert "\n" not in str(e.value)


def test_scale_known_values_floored_and_unfloored():
    """s(n) for β = 0.5, N = 17: unfloored 1 + 0.5·ln(n/17) (s(2) = −0.0700, negative: the issue's flip),
    floored max(1, ·): 1 up to n = 17, the same above."""
    n = torch.tensor([1, 2, 17, 34, 170])
    raw = temperature_scale(n, 0.5, 17, floor=False)
    floored = temperature_scale(n, 0.5, 17)
    expect = [1 + 0.5 * math.log(k / 17) for k in (1, 2, 17, 34, 170)]
    assert raw.tolist() == pytest.approx(expect, abs=1e-12)
    assert raw[1].item() == pytest.approx(-0.070033, abs=1e-6)
    assert floored.tolist() == pytest.approx([1.0, 1.0, 1.0, 1 + 0.5 * math.log(2), 1 + 0.5 * math.log(10)], abs=1e-12)
    assert temperature_scale(n, 0.5, 17, "ssmax", floor=True).tolist() == pytest.approx([0.5 * math.log(k) for k in n.tolist()])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_floored_form_leaves_queries_up_to_n_train_untouched(name):
    """Floored (the default): every query with n <= n_train keys has exactly its untouched attention,
    so the logits of those positions are bit-identical; the unfloored form changes them (s < 1)."""
    model, ids = MODELS[name](), _ids()
    base, a0 = _logits(model, ids), _attn(model, ids)
    with temperature(model, 2.0, n_train=N_TRAIN):
        floored, a1 = _logits(model, ids), _attn(model, ids)
    with temperature(model, 2.0, n_train=N_TRAIN, floor=False):
        raw = _logits(model, ids)
    assert torch.equal(floored[:, :N_TRAIN], base[:, :N_TRAIN])
    assert all(torch.equal(x[..., :N_TRAIN, :], y[..., :N_TRAIN, :]) for x, y in zip(a0, a1))
    assert not torch.allclose(floored[:, N_TRAIN:], base[:, N_TRAIN:], atol=1e-4)
    assert not torch.allclose(raw[:, :N_TRAIN], base[:, :N_TRAIN], atol=1e-4)


def test_spec_string_applies_the_floor_it_names():
    model, ids = _gptj(), _ids()
    from posym.interventions import intervened

    out = {}
    for text in ("temperature:beta=2,n_train=5", "temperature:beta=2,n_train=5,floor=0"):
        with intervened(model, text) as canon:
            out[canon] = _logits(model, ids)
    assert set(out) == {"temperature:beta=2,n_train=5,floor=1", "temperature:beta=2,n_train=5,floor=0"}
    assert torch.equal(out["temperature:beta=2,n_train=5,floor=1"][:, :5], _logits(model, ids)[:, :5])


def test_legacy_strings_read_as_the_unfloored_form():
    """Tables written before the floor hold strings without ``floor=``: they were measured unfloored."""
    from posym.interventions.spec import legacy_temperature

    assert legacy_temperature("temperature:beta=0.5,n_train=17") == "temperature:beta=0.5,n_train=17,floor=0"
    assert legacy_temperature("temperature:beta=1,n_train=17,layers=0+2") == "temperature:beta=1,n_train=17,floor=0,layers=0+2"
    for same in ("temperature:beta=0.5,n_train=17,floor=1", "temperature:beta=0.5,n_train=17,form=ssmax",
                 "ntk:kappa=4", "none"):
        assert legacy_temperature(same) == same


def test_with_layers_keeps_the_floor():
    from posym.interventions import with_layers

    assert with_layers(Temperature(1.0, 17, floor=False), [0]) == Temperature(1.0, 17, "log", (0,), False)
