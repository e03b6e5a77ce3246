"""posym.interventions.interpolate and the one entry point ``intervened``: factor 1 (and a dynamic
n_train covering the input) bit-identical; factor F equals the rotation at positions p/F (GPT-J: the
table rows; Llama: a model whose frequencies are divided by F); dynamic = fixed factor n/n_train on
longer inputs; restored after exit and after an exception; fast = reference scores under it; a table
rebuilt past the training length inside rope_base / interpolate keeps the intervention; errors."""

from __future__ import annotations


import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import Interpolate, describe, interpolate, intervened, parse_intervention, with_layers
from posym.interventions.rope import gptj_table
from posym.model import build_model, model_config
from posym.model.gptj import extend_positions, rotary_table

from family_models import build_family
from model_state import tiny_gptj, logits as _logits, same as _same, seeded_ids as _ids, snapshot as _snapshot


_gptj = tiny_gptj


#: GPT-J (rotary table), Llama and Qwen3 (one rotary), Gemma-3 (one rotary called per layer type).
MODELS = {"gptj": _gptj, **{f: (lambda f=f: build_family(f, vocab_size=31).eval())
                            for f in ("llama", "qwen3", "gemma3_text")},
          # GPT-NeoX: one fused per-head q|k|v projection, half its head rotated (4 pairs)
          "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}










@pytest.mark.parametrize("name", sorted(MODELS))
def test_identity_parameters_are_bit_identical(name):
    model, ids = MODELS[name](), _ids()
    before = _logits(model, ids)
    with interpolate(model, factor=1):
        assert torch.equal(_logits(model, ids), before)
    with interpolate(model, n_train=ids.shape[1]):  # the input is not longer than n_train: c = 1
        assert torch.equal(_logits(model, ids), before)
    with intervened(model, "none") as text:
        assert text == "none" and torch.equal(_logits(model, ids), before)


def test_gptj_table_rows_are_the_fractional_positions():
    model, ids = _gptj(), _ids()
    dim = rotary_table(model).shape[1]
    with interpolate(model, factor=4):
        _logits(model, ids)
        table = rotary_table(model)
    inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).double() / dim))
    ang = torch.arange(table.shape[0]).double()[:, None] / 4 * inv
    want = torch.cat([ang.sin(), ang.cos()], 1).float()
    assert torch.allclose(table, want, atol=1e-6)
    assert torch.equal(gptj_table(model, 50, dim),
                       __import__("transformers").models.gptj.modeling_gptj.create_sinusoidal_positions(50, dim))


@pytest.mark.parametrize("name", ["llama", "gemma3_text"])
def test_factor_equals_a_model_with_frequencies_divided(name):
    """Positions p/F equal every table's frequencies divided by F (Gemma-3: both layer types')."""
    model, ids = MODELS[name](), _ids()
    with interpolate(model, factor=3):
        got = _logits(model, ids)
    emb = model.model.rotary_emb
    names = [n for n, _ in emb.named_buffers() if n.endswith("inv_freq") and "original" not in n]
    assert names == (["inv_freq"] if name == "llama" else ["full_attention_inv_freq", "sliding_attention_inv_freq"])
    saved = {n: getattr(emb, n) for n in names}
    for n in names:
        setattr(emb, n, saved[n] / 3)
    try:
        want = _logits(model, ids)
    finally:
        for n in names:
            setattr(emb, n, saved[n])
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, _logits(model, ids), atol=1e-4)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dynamic_equals_the_fixed_factor_of_the_input_length(name):
    model, ids = MODELS[name](), _ids(T=12)
    with interpolate(model, n_train=4):
        dyn = _logits(model, ids)
    with interpolate(model, factor=3):  # 12 / 4
        fixed = _logits(model, ids)
    assert torch.allclose(dyn, fixed, atol=1e-6)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_restored_after_exit_and_after_an_exception(name):
    model, ids = MODELS[name](), _ids()
    before, snap = _logits(model, ids), _snapshot(model)
    with interpolate(model, factor=2):
        assert not torch.allclose(_logits(model, ids), before, atol=1e-4)
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))
    with pytest.raises(RuntimeError, match="inside"):
        with intervened(model, "interpolate:n_train=5"):
            _logits(model, ids)
            raise RuntimeError("inside")
    assert torch.equal(_logits(model, ids), before) and _same(snap, _snapshot(model))


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("text", ["interpolate:factor=2", "interpolate:n_train=6"])
def test_fast_and_reference_scores_agree_under_interpolation(name, text):
    model, ids = MODELS[name](), _ids(T=10, B=2)
    plain = scores_fast(model, ids, query_pos=8)
    with intervened(model, text):
        fast = scores_fast(model, ids, query_pos=8)
        ref = scores_reference(model, ids, query_pos=8)
    for field in ("s_pos", "s_sym"):
        f, r = torch.as_tensor(getattr(fast, field)), torch.as_tensor(getattr(ref, field))
        assert torch.allclose(f, r, atol=1e-5), field
    assert not torch.allclose(torch.as_tensor(plain.s_pos), torch.as_tensor(fast.s_pos), atol=1e-4)


@pytest.mark.parametrize("text", ["interpolate:factor=2", "rope-base:theta=500"])
def test_gptj_table_extended_inside_the_context_keeps_the_intervention(text):
    """lengthgen extends the rotary table per point (base 10,000, unscaled): inside the context the
    next forward must still see the intervention, equal to extending first and intervening inside."""
    a, b = _gptj(), _gptj()
    n = rotary_table(a).shape[0] + 5
    ids = torch.randint(1, 31, (2, n), generator=torch.Generator().manual_seed(2))
    with intervened(a, text):
        extend_positions(a, n)
        inside = _logits(a, ids)
    extend_positions(b, n)
    with intervened(b, text):
        first = _logits(b, ids)
    assert torch.equal(inside, first)
    plain = _logits(b, ids)
    assert not torch.allclose(inside, plain, atol=1e-4)


def test_canonical_strings_and_errors():
    assert describe(Interpolate(factor=4.0)) == "interpolate:factor=4"
    assert parse_intervention("interpolate:n_train=17") == Interpolate(n_train=17)
    assert parse_intervention("none") is None and describe(None) == "none"
    for text, msg in [("interpolate:", "exactly one"), ("interpolate:factor=2,n_train=3", "exactly one"),
                      ("interpolate:factor=0.5", ">= 1"), ("interpolate:factor=nan", ">= 1"),
                      ("interpolate:n_train=0", "integer >= 1"), ("interpolate:n_train=x", "integer >= 1"),
                      ("none:beta=1", "unknown key")]:
        with pytest.raises(PosymError, match=msg) as e:
            parse_intervention(text)
        assert "\n" not in str(e.value)
    assert with_layers(parse_intervention("ntk:kappa=2"), [0]) == parse_intervention("ntk:kappa=2,layers=0")
    assert with_layers(parse_intervention("temperature:beta=1"), [1]).layers == (1,)
    with pytest.raises(PosymError, match="layers given twice"):
        with_layers(parse_intervention("freq-mask:keep=1,layers=0"), [1])
    with pytest.raises(PosymError, match="not supported"):
        with interpolate(build_family("gemma"), factor=2):
            pass


@pytest.mark.parametrize("pe", ["p-rope:0.5", "rope-base:500"])
def test_interventions_keep_a_posym_training_time_variant(pe):
    """On a run trained with --pe, a base change or interpolation rebuilds the variant's own table:
    identity parameters are bit-identical, and p-RoPE's unrotated pairs stay unrotated."""
    from posym.interventions.rope import model_theta

    m = build_model(model_config("quick", 31, n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16,
                                 initializer_range=0.3, pe=pe), seed=0).eval()
    ids = _ids()
    before = _logits(m, ids)
    theta = model_theta(m)
    assert theta == (500.0 if pe == "rope-base:500" else 10000.0)
    for text in (f"rope-base:theta={theta:g}", "ntk:kappa=1", "interpolate:factor=1"):
        with intervened(m, text):
            assert torch.equal(_logits(m, ids), before), text
    if pe.startswith("p-rope"):
        for text in ("ntk:kappa=4", "interpolate:factor=3"):
            with intervened(m, text):
                _logits(m, ids)
                table = rotary_table(m)
                half = table.shape[1] // 2
                assert torch.equal(table[:, 4:half], torch.zeros_like(table[:, 4:half])), text  # sin of pairs 4..7
                assert torch.equal(table[:, half + 4:], torch.ones_like(table[:, half + 4:])), text
                assert not torch.equal(table[:, :4], torch.zeros_like(table[:, :4]))


@pytest.mark.parametrize("family", ["gemma2", "phi3"])
def test_an_unsupported_family_is_named_by_interpolate_not_rope_base(family):
    """Unclear message 6: ``interpolate`` on gemma2/phi3 said "rope-base: model_type=... is not supported"."""
    with pytest.raises(PosymError, match=r"^interpolate: model_type='" + family) as e:
        with interpolate(build_family(family), factor=2):
            pass
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, msg", [("interpolate:factor=1e308", "<= 1e"), ("interpolate:factor=1e7", "<= 1e"),
                                       ("interpolate:n_train=10000000000", "<= 1e")])
def test_extreme_interpolation_values_are_refused(text, msg):
    with pytest.raises(PosymError, match=msg):
        parse_intervention(text)
