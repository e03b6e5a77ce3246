"""``heads=`` and ``layers=`` on the rotary interventions rope-base, ntk, interpolate and yarn
(docs/interventions.md, "Head selections"; :mod:`posym.interventions.rotary_heads`): every head selected
equals the whole-model intervention, one selected head changes only itself (the others bit-identical),
``layers=`` is every head of those layers, a part of a GQA group and bad heads are one-line errors, the
fast score path turns to the literal re-run, which follows the selection, exact under a KV cache,
restored bit for bit, canonical strings round-trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import describe, intervened, ntk, parse_intervention, rope_base, with_layers
from posym.interventions.registry import format_head_pairs

from family_models import intervention_models


MODELS = intervention_models()
SPECS = ("rope-base:theta=500", "ntk:kappa=4", "interpolate:factor=3", "interpolate:n_train=5", "yarn:factor=4,original=5")


def _ids(T=12, B=2, seed=1):
    return torch.randint(1, 31, (B, T), generator=torch.Generator().manual_seed(seed))


def _run(model, ids, **kw):
    with torch.no_grad():
        out = model(ids, output_attentions=True, **kw)
    return out.attentions, out.logits


def _shape(model) -> tuple[int, int, int]:
    """(layers, query heads, query heads per key/value head)."""
    cfg = model.config
    H = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    L = getattr(cfg, "num_hidden_layers", None) or cfg.n_layer
    kv = getattr(cfg, "num_key_value_heads", None) or H
    return L, H, H // kv


def _skip(name, spec):
    if name == "gemma3_text" and spec.startswith("rope-base"):
        pytest.skip("one base for Gemma-3's two layer types is refused (use ntk)")


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_head_selected_equals_the_whole_model_intervention(name, spec):
    _skip(name, spec)
    model, ids = MODELS[name](), _ids()
    L, H, _ = _shape(model)
    every = format_head_pairs([(layer, h) for layer in range(L) for h in range(H)])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    a0, l0 = _run(model, ids)
    with intervened(model, spec):
        a_whole, l_whole = _run(model, ids)
    with intervened(model, f"{spec},heads={every}") as text:
        a_heads, l_heads = _run(model, ids)
    assert text == f"{spec},heads={every}"
    assert not torch.allclose(l0, l_whole, atol=1e-3)
    assert torch.allclose(l_whole, l_heads, atol=1e-5)
    for x, y in zip(a_whole, a_heads):
        assert torch.allclose(x, y, atol=1e-5)
    a1, l1 = _run(model, ids)  # restored bit for bit
    assert torch.equal(l0, l1) and all(torch.equal(x, y) for x, y in zip(a0, a1))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_selection_changes_only_its_heads(name, spec):
    """Layer 0's selected heads (one head, or its whole key/value group under GQA) see the whole-model
    intervention's attention; every other head of layer 0 is bit-identical to the untouched model."""
    _skip(name, spec)
    model, ids = MODELS[name](), _ids()
    _, H, g = _shape(model)
    sel = [(0, h) for h in range(g, 2 * g)] if 2 * g <= H else [(0, h) for h in range(g)]
    a0, _ = _run(model, ids)
    with intervened(model, spec):
        a_whole, _ = _run(model, ids)
    with intervened(model, f"{spec},heads={format_head_pairs(sel)}"):
        a1, _ = _run(model, ids)
    chosen = {h for _, h in sel}
    for h in range(H):
        if h in chosen:
            assert torch.allclose(a1[0][:, h], a_whole[0][:, h], atol=1e-5), h
            assert not torch.allclose(a1[0][:, h], a0[0][:, h], atol=1e-4), h
        else:
            assert torch.equal(a1[0][:, h], a0[0][:, h]), h


@pytest.mark.parametrize("spec", ("ntk:kappa=4", "yarn:factor=4,original=5"))
def test_a_part_of_a_gqa_group_is_refused_in_one_line(spec):
    model = MODELS["llama"]()  # 4 query heads over 2 key/value heads
    with pytest.raises(PosymError, match=r"L1H0\+L1H1 share key/value head 0 of layer 1 .*add L1H1") as e:
        with intervened(model, f"{spec},heads=L1H0"):
            pass
    assert "\n" not in str(e.value)
    with intervened(model, f"{spec},heads=L1H0+L1H1"):  # the whole group is fine
        pass


@pytest.mark.parametrize("spec", SPECS)
def test_layers_is_every_head_of_those_layers(spec):
    model, ids = MODELS["llama"](), _ids()
    _, H, _ = _shape(model)
    heads = format_head_pairs([(layer, h) for layer in (1, 3) for h in range(H)])
    with intervened(model, f"{spec},layers=1+3") as text:
        _, by_layers = _run(model, ids)
    with intervened(model, f"{spec},heads={heads}"):
        _, by_heads = _run(model, ids)
    assert text == f"{spec},layers=1+3"
    assert torch.equal(by_layers, by_heads)
    assert with_layers(parse_intervention(spec), [1, 3]) == parse_intervention(f"{spec},layers=1+3")


@pytest.mark.parametrize("name", ("gptj", "llama_mha"))
def test_fast_scores_turn_to_the_reference_which_follows_the_selection(name):
    """The fast path moves captured keys to other positions (a per-head delta rotation does not follow):
    under a selection ``scores_fast`` runs the literal re-run (``method`` "reference"), which equals the
    whole-model scores when every head is selected; the mark is gone after the ``with`` block."""
    from posym.model.adapters import position_tied_qk

    model, ids = MODELS[name](), _ids(T=10)
    L, H, _ = _shape(model)
    every = format_head_pairs([(layer, h) for layer in range(L) for h in range(H)])
    with intervened(model, "ntk:kappa=4"):
        whole = scores_fast(model, ids, query_pos=8)
        assert whole.method == "fast"
    with intervened(model, f"ntk:kappa=4,heads={every}"):
        assert position_tied_qk(model).startswith("ntk:kappa=4")
        fast = scores_fast(model, ids, query_pos=8)
        ref = scores_reference(model, ids, query_pos=8)
    assert fast.method == "reference" and position_tied_qk(model) is None
    for field in ("s_pos", "s_sym"):
        assert torch.allclose(torch.as_tensor(getattr(ref, field)), torch.as_tensor(getattr(whole, field)), atol=1e-5)
        assert np.array_equal(getattr(ref, field), getattr(fast, field))
    scores_fast(model, ids, query_pos=8)  # nothing left behind


@pytest.mark.parametrize("spec", ("rope-base:theta=500,heads=L0H1+L1H2", "yarn:factor=4,original=5,layers=1"))
def test_exact_under_a_kv_cache(spec):
    """Positions come from the model's position ids: a cached step equals the full forward."""
    model, ids = MODELS["llama_mha"](), _ids(T=9)
    assert parse_intervention(spec).exact_under_kv_cache
    with intervened(model, spec), torch.no_grad():
        full = model(ids).logits[:, -1]
        past = model(ids[:, :-1], use_cache=True).past_key_values
        step = model(ids[:, -1:], past_key_values=past, use_cache=True).logits[:, -1]
    assert torch.allclose(full, step, atol=1e-5)


def test_context_managers_take_heads_and_layers():
    model, ids = MODELS["gptj"](), _ids()
    a0, _ = _run(model, ids)
    with rope_base(model, 500.0, heads=[(1, 1)]) as applied:
        a, _ = _run(model, ids)
    assert applied.canonical() == "rope-base:theta=500,heads=L1H1"
    assert torch.equal(a0[1][:, 0], a[1][:, 0]) and not torch.allclose(a0[1][:, 1], a[1][:, 1], atol=1e-4)
    with ntk(model, 4.0, layers=[1]) as applied:
        pass
    assert applied.canonical() == "ntk:kappa=4,layers=1"


def test_canonical_strings():
    for text, canon in [("ntk:heads=L2H3+L0H1,kappa=4", "ntk:kappa=4,heads=L0H1+L2H3"),
                        ("rope-base:theta=2e4,layers=0+2", "rope-base:theta=20000,layers=0+2"),
                        ("interpolate:factor=2,heads=L1H0", "interpolate:factor=2,heads=L1H0"),
                        ("interpolate:n_train=17,layers=1", "interpolate:n_train=17,layers=1"),
                        ("yarn:factor=4,original=17,beta_fast=16,heads=L0H0", "yarn:factor=4,original=17,beta_fast=16,heads=L0H0"),
                        # without a selection: the strings of before, byte for byte
                        ("rope-base:theta=20000", "rope-base:theta=20000"), ("ntk:kappa=4", "ntk:kappa=4"),
                        ("interpolate:factor=4", "interpolate:factor=4"),
                        ("yarn:factor=4,original=17", "yarn:factor=4,original=17")]:
        spec = parse_intervention(text)
        assert describe(spec) == canon
        assert parse_intervention(canon) == spec


@pytest.mark.parametrize("text, msg", [
    ("ntk:kappa=4,layers=0,heads=L0H0", "drop layers="),
    ("rope-base:theta=500,layers=a", "layers must be integers"),
    ("yarn:factor=4,original=5,heads=L0H0+L0H0", "names a head twice"),
    ("interpolate:factor=2,heads=positional", "resolve_heads"),
])
def test_bad_strings_are_one_line_errors(text, msg):
    with pytest.raises(PosymError, match=msg) as e:
        parse_intervention(text)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text, msg", [
    ("ntk:kappa=4,heads=L0H2", "no head L0H2: the model has 2 query heads"),
    ("interpolate:factor=2,heads=L5H0", "layer 5 out of range"),
    ("yarn:factor=4,original=5,layers=7", "out of range"),
])
def test_heads_the_model_lacks_are_one_line_errors(text, msg):
    model, ids = MODELS["gptj"](), _ids()
    _, l0 = _run(model, ids)
    with pytest.raises(PosymError, match=msg) as e:
        with intervened(model, text):
            pass
    assert "\n" not in str(e.value)
    assert torch.equal(_run(model, ids)[1], l0)
    with pytest.raises(PosymError, match="not both"):
        with rope_base(model, 500.0, layers=[0], heads=[(0, 0)]):
            pass


def test_left_padding_reads_the_position_ids():
    """A left-padded row with its position ids (as ``generate`` passes them) equals the unpadded row."""
    model, ids = MODELS["llama_mha"](), _ids(T=8, B=1)
    padded = torch.cat((torch.zeros(1, 3, dtype=ids.dtype), ids), dim=1)
    mask = torch.cat((torch.zeros(1, 3, dtype=torch.long), torch.ones_like(ids)), dim=1)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with intervened(model, "ntk:kappa=4,heads=L0H1+L1H2"), torch.no_grad():
        plain = model(ids).logits[:, -1]
        left = model(padded, attention_mask=mask, position_ids=pos).logits[:, -1]
    assert torch.allclose(plain, left, atol=1e-5)
