"""``heads=`` on temperature and freq-mask (docs/interventions.md, "Head selections"): only the selected
query heads change (the others' attention bit-identical, also under GQA: the shared key/value heads are
untouched), all heads selected equals the no-``heads`` intervention, the fast and reference score paths
agree under a selection, the canonical strings (``heads`` last; without it unchanged), one-line refusals.
The rotary interventions' selections: tests/interventions/test_rotary_heads.py."""

from __future__ import annotations

import pytest
import torch

from posym.errors import PosymError
from posym.heads.scores import scores_fast, scores_reference
from posym.interventions import describe, freq_mask, intervened, parse_intervention, temperature, with_layers
from posym.interventions.registry import format_head_pairs, parse_head_pairs
from posym.model import build_model, model_config

from family_models import build_family


def _gptj():
    m = build_model(model_config("quick", 31, n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16,
                                 initializer_range=0.3), seed=0)
    return m.eval()


#: the families of the existing intervention tests; llama / qwen3 / gemma3_text have 4 query heads over
#: 2 (gemma3: 1) key/value heads (tests/family_models.py).
MODELS = {"gptj": _gptj, **{f: (lambda f=f: build_family(f, vocab_size=31).eval()) for f in ("llama", "qwen3", "gemma3_text")},
          "gpt_neox": lambda: build_family("gpt_neox", vocab_size=31, rotary_pct=0.5).eval()}
#: (layer, head) selections that exist in every model above (GPT-J: 2 layers x 2 heads)
SELECTION = ((1, 0),)
SPECS = ("temperature:beta=2,n_train=3", "freq-mask:keep=1")


def _ids(T=12, B=2, seed=1):
    return torch.randint(1, 31, (B, T), generator=torch.Generator().manual_seed(seed))


def _attn(model, ids):
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    return out.attentions, out.logits


def _with_heads(spec: str, heads) -> str:
    return f"{spec},heads={format_head_pairs(heads)}"


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_only_the_selected_heads_change(name, spec):
    """The selected head's attention changes; every other head (same layer — under GQA the same key/value
    group — and other layers before it) is bit-identical to the untouched model's; restored on exit."""
    model, ids = MODELS[name](), _ids()
    a0, l0 = _attn(model, ids)
    with intervened(model, _with_heads(spec, SELECTION)) as text:
        a1, _ = _attn(model, ids)
    assert text.endswith(",heads=L1H0")
    assert torch.equal(a0[0], a1[0])  # layer 0: nothing selected, its output unchanged
    assert not torch.allclose(a0[1][:, 0], a1[1][:, 0], atol=1e-4)
    for h in range(1, a0[1].shape[1]):
        assert torch.equal(a0[1][:, h], a1[1][:, h]), h
    assert torch.equal(_attn(model, ids)[1], l0)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_all_heads_selected_equals_the_plain_intervention(name, spec):
    model, ids = MODELS[name](), _ids()
    H = model.config.num_attention_heads if hasattr(model.config, "num_attention_heads") else model.config.n_head
    L = len(_attn(model, ids)[0])
    every = tuple((layer, h) for layer in range(L) for h in range(H))
    with intervened(model, spec):
        a_plain, l_plain = _attn(model, ids)
    with intervened(model, _with_heads(spec, every)):
        a_heads, l_heads = _attn(model, ids)
    assert torch.allclose(l_plain, l_heads, atol=1e-5)
    for x, y in zip(a_plain, a_heads):
        assert torch.allclose(x, y, atol=1e-6)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_fast_and_reference_scores_agree_under_a_head_selection(name, spec):
    model, ids = MODELS[name](), _ids(T=10)
    plain = scores_fast(model, ids, query_pos=8)
    with intervened(model, _with_heads(spec, SELECTION)):
        fast = scores_fast(model, ids, query_pos=8)
        ref = scores_reference(model, ids, query_pos=8)
    for field in ("s_pos", "s_sym"):
        f, r, p = (torch.as_tensor(getattr(x, field)) for x in (fast, ref, plain))
        assert torch.allclose(f, r, atol=1e-5), field
    # layer 0 is not selected: its heads read exactly as untouched
    assert torch.equal(torch.as_tensor(fast.s_pos)[:, 0], torch.as_tensor(plain.s_pos)[:, 0])


@pytest.mark.parametrize("spec", SPECS)
def test_gqa_other_query_heads_of_the_group_see_untouched_logits(spec):
    """Llama with 4 query heads over 2 key/value heads: selecting query head 0 (group 0 = heads 0, 1)
    changes head 0 only; head 1 shares its k and v and sees exactly the untouched attention."""
    model, ids = build_family("llama", vocab_size=31).eval(), _ids()
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    a0, _ = _attn(model, ids)
    with intervened(model, _with_heads(spec, [(0, 0), (0, 2)])):
        a1, _ = _attn(model, ids)
    assert not torch.allclose(a0[0][:, 0], a1[0][:, 0], atol=1e-4)
    assert not torch.allclose(a0[0][:, 2], a1[0][:, 2], atol=1e-4)
    assert torch.equal(a0[0][:, 1], a1[0][:, 1])  # head 1: the KV group of head 0, untouched
    assert torch.equal(a0[0][:, 3], a1[0][:, 3])  # head 3: the KV group of head 2, untouched


def test_freq_mask_on_selected_heads_drops_the_pair_from_their_logits_only():
    """Masking q alone removes the pair exactly: with every ID dropped (keep=none) a selected head of a
    full rotary attends uniformly (causal), the other head of its KV group does not."""
    model, ids = build_family("llama", vocab_size=31).eval(), _ids()
    with freq_mask(model, [], heads=[(1, 1)]) as applied:
        a, _ = _attn(model, ids)
    assert applied.canonical() == "freq-mask:keep=none,heads=L1H1"
    T = ids.shape[1]
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    assert torch.allclose(a[1][:, 1], uniform.expand_as(a[1][:, 1]), atol=1e-6)
    assert not torch.allclose(a[1][:, 0], uniform.expand_as(a[1][:, 0]), atol=1e-3)


def test_context_managers_take_heads_directly():
    model, ids = MODELS["gptj"](), _ids()
    with temperature(model, 2.0, n_train=3, heads=[(1, 1)]) as applied:
        a, _ = _attn(model, ids)
    assert applied.canonical() == "temperature:beta=2,n_train=3,floor=1,heads=L1H1"
    a0, _ = _attn(model, ids)
    assert torch.equal(a0[1][:, 0], a[1][:, 0]) and not torch.allclose(a0[1][:, 1], a[1][:, 1], atol=1e-4)


def test_canonical_strings():
    for text, canon in [("temperature:beta=1,heads=L2H3+L0H1", "temperature:beta=1,n_train=17,floor=1,heads=L0H1+L2H3"),
                        ("temperature:beta=0.5,form=ssmax,heads=L0H0", "temperature:beta=0.5,n_train=17,form=ssmax,heads=L0H0"),
                        ("freq-mask:heads=L1H0,keep=3+1", "freq-mask:keep=1+3,heads=L1H0"),
                        ("freq-mask:keep=none,heads=L0H0", "freq-mask:keep=none,heads=L0H0"),
                        # without heads: the strings of before, unchanged
                        ("temperature:beta=1", "temperature:beta=1,n_train=17,floor=1"),
                        ("freq-mask:keep=1+2,layers=0", "freq-mask:keep=1+2,layers=0")]:
        spec = parse_intervention(text)
        assert describe(spec) == canon
        assert describe(parse_intervention(canon)) == canon
    assert parse_head_pairs("L3H1+L0H2") == ((0, 2), (3, 1))
    assert format_head_pairs(((0, 2), (3, 1))) == "L0H2+L3H1"


@pytest.mark.parametrize("text, msg", [
    # the rotary interventions take heads= too (tests/interventions/test_rotary_heads.py)
    ("ntk:kappa=4,layers=0,heads=L0H0", "drop layers="),
    ("rope-base:theta=20000,heads=L0", "is not a list of heads"),
    ("interpolate:factor=2,heads=L0H0+L0H0", "names a head twice"),
    ("temperature:beta=1,layers=0,heads=L0H0", "drop layers="),
    ("freq-mask:keep=1,heads=L0H0+L0H0", "names a head twice"),
    ("freq-mask:keep=1,heads=", "is not a list of heads"),
    ("temperature:beta=1,heads=positional", "resolve_heads"),
    ("temperature:beta=1,heads=l0h1", "is not a list of heads"),
])
def test_bad_heads_are_one_line_errors(text, msg):
    with pytest.raises(PosymError, match=msg) as e:
        parse_intervention(text)
    assert "\n" not in str(e.value)


def test_heads_out_of_the_model_and_with_layers_are_refused():
    model = MODELS["gptj"]()
    for heads, msg in [([(0, 2)], "no head L0H2: the model has 2 query heads"), ([(5, 0)], "layer 5 out of range")]:
        with pytest.raises(PosymError, match=msg):
            with temperature(model, 1.0, n_train=3, heads=heads):
                pass
        with pytest.raises(PosymError, match=msg):
            with freq_mask(model, [1], heads=heads):
                pass
    with pytest.raises(PosymError, match="not both"):
        with freq_mask(model, [1], layers=[0], heads=[(0, 0)]):
            pass
    with pytest.raises(PosymError, match="drop --layers"):
        with_layers(parse_intervention("temperature:beta=1,heads=L0H0"), [0])


def test_legacy_temperature_keeps_the_heads():
    from posym.interventions.spec import legacy_temperature

    assert legacy_temperature("temperature:beta=0.5,n_train=17,heads=L0H1") == \
        "temperature:beta=0.5,n_train=17,floor=0,heads=L0H1"
