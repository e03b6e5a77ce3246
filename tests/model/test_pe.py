"""Training-time positional encodings of the GPT-J (SPEC §2.1, posym.model.pe): names, tables, the
fast forward of each variant, checkpoints, the adapter view and randomized positions."""

import json

import numpy as np
import pytest
import torch
from transformers import GPTJForCausalLM
from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions

from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.model.fast import last_token_logits, reference_last_token_logits
from posym.model.gptj import build_model, extend_positions, load_model, model_config, rotary_table, save_model
from posym.model.pe import (PositionalEncoding, gptj_inv_freq, gptj_rotary_table, parse_pe, random_positions,
                            ssmax_init)

torch.set_num_threads(1)
V = 40
TINY = dict(n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16, initializer_range=0.2)
VARIANTS = ["rope", "nope", "p-rope:0.5", "rope-base:500000", "rope-base:10000", "randomized:64", "ssmax:17"]


def _model(pe: str, seed: int = 1, **kw) -> GPTJForCausalLM:
    m = build_model(model_config("quick", V, pe=pe, **{**TINY, **kw}), seed=seed).eval()
    if pe.startswith("ssmax"):  # trained-looking, per-head different scales
        with torch.no_grad():
            for i, b in enumerate(m.transformer.h):
                b.attn.q_proj.ssmax_s.copy_(torch.tensor([0.3 + 0.2 * i, 0.9]))
    return m


def _ids(b=3, t=17, seed=0):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, V, size=(b, t)))


@pytest.mark.parametrize("text,name", [("rope", "rope"), ("NoPE", "nope"), ("p-rope:0.25", "p-rope:0.25"),
                                       ("p-rope:1", "p-rope:1.0"), ("rope-base:5e5", "rope-base:500000"),
                                       ("rope-base:12345.5", "rope-base:12345.5"), ("randomized:2048", "randomized:2048"),
                                       ("ssmax", "ssmax"), ("ssmax:17", "ssmax:17")])
def test_names_parse_to_canonical_strings_that_parse_back(text, name):
    assert parse_pe(text).name == name
    assert parse_pe(name) == parse_pe(text)


@pytest.mark.parametrize("text,match", [("alibi", "unknown positional encoding"), ("nope:3", "takes no value"),
                                        ("p-rope", "needs a value"), ("p-rope:1.5", r"in \[0, 1\]"),
                                        ("p-rope:x", "not a number"), ("rope-base:1", "must be > 1"),
                                        ("rope-base:inf", "finite"), ("rope-base:1e31", "<= 1e"),
                                        ("rope-base:1e300", "<= 1e"), ("randomized:10.5", "integer >= 2"),
                                        ("randomized:2000000", "L must be <= 1,000,000"),
                                        ("ssmax:1", "integer >= 2"), (7, "must be a string")])
def test_bad_values_are_one_line_errors(text, match):
    with pytest.raises(PosymError, match=match) as err:
        parse_pe(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["rope-base:1e20", "rope-base:1e30"])
def test_a_huge_base_below_the_limit_builds_a_finite_table(text):
    """θ >= 2^63 was an ``OverflowError: int too big to convert`` (probe T2); up to 1e30 every inverse
    frequency is a finite nonzero float32 number, and the name stays short and parses back."""
    pe = parse_pe(text)
    assert parse_pe(pe.name) == pe and len(pe.name) < 20
    inv = gptj_inv_freq(pe, 16)
    assert torch.isfinite(inv).all() and (inv > 0).all()
    assert torch.isfinite(gptj_rotary_table(pe, 50, 16)).all()
    m = _model(text)
    with torch.no_grad():
        assert torch.isfinite(m(_ids()).logits).all()


def test_api_make_config_with_a_too_large_base_is_a_posym_error():
    from posym.train import make_config

    with pytest.raises(PosymError, match="<= 1e"):
        make_config("number", pe="rope-base:1e300")


def test_rope_and_rope_base_10000_tables_are_hf_bit_for_bit():
    hf = create_sinusoidal_positions(300, 16)
    for pe in ("rope", "rope-base:10000"):
        assert torch.equal(gptj_rotary_table(parse_pe(pe), 300, 16), hf)
    # the default model is today's model: config without posym_pe, same weights and table as plain HF
    cfg = model_config("quick", V, **TINY)
    assert not hasattr(cfg, "posym_pe")
    torch.manual_seed(1)
    plain = GPTJForCausalLM(model_config("quick", V, **TINY))
    ours, base = _model("rope"), _model("rope-base:10000")
    for a, b in ((plain, ours), (ours, base)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    with torch.no_grad():
        assert torch.equal(ours(_ids()).logits, base(_ids()).logits)


def test_nope_and_p_rope_tables():
    nope = gptj_rotary_table(parse_pe("nope"), 50, 16)
    assert torch.equal(nope[:, :8], torch.zeros(50, 8)) and torch.equal(nope[:, 8:], torch.ones(50, 8))
    rope = gptj_inv_freq(parse_pe("rope"), 16)
    for frac, keep in ((0.5, 4), (0.25, 2), (0.3, 2), (0.0, 0), (1.0, 8)):
        inv = gptj_inv_freq(parse_pe(f"p-rope:{frac}"), 16)
        assert torch.equal(inv[:keep], rope[:keep]) and torch.equal(inv[keep:], torch.zeros(8 - keep))
    # HF's partial rotary_dim is not p-RoPE: rotary_dim=8 re-spreads the angles over 4 pairs
    partial = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.int64) / 8))
    assert not torch.allclose(partial, rope[:4])
    # ... but equals p-RoPE's kept angles with the base θ^F (our note in SPEC §2.1)
    assert torch.allclose(1.0 / (100 ** (torch.arange(0, 8, 2) / 8)), rope[:4])


@pytest.mark.parametrize("pe", VARIANTS)
def test_fast_forward_equals_plain_forward(pe):
    m = _model(pe)
    ids = _ids()
    pos = random_positions(3, 17, 64, seed=0, step=5) if pe.startswith("randomized") else None
    with torch.no_grad():
        fast, ref = last_token_logits(m, ids, pos), reference_last_token_logits(m, ids, pos)
    torch.testing.assert_close(fast, ref, rtol=0, atol=1e-5)
    if pos is not None:  # the positions really reach the model
        with torch.no_grad():
            assert not torch.allclose(fast, last_token_logits(m, ids))


def test_variants_differ_from_rope_where_they_should():
    ids = _ids()
    with torch.no_grad():
        out = {pe: last_token_logits(_model(pe), ids) for pe in VARIANTS}
    for pe in ("nope", "p-rope:0.5", "rope-base:500000", "ssmax:17"):
        assert not torch.allclose(out[pe], out["rope"], atol=1e-4), pe
    for pe in ("rope-base:10000", "randomized:64"):  # same model at evaluation (positions 0..n-1)
        assert torch.equal(out[pe], out["rope"]), pe


def test_nope_is_permutation_blind_before_the_query():
    """No rotation anywhere: the last logit ignores the order of the earlier tokens (causal NoPE
    still sees order through the mask, so only a one-layer model is exactly order-blind)."""
    m = _model("nope", n_layer=1)
    ids = _ids(2, 12)
    perm = torch.cat((torch.randperm(11, generator=torch.Generator().manual_seed(0)), torch.tensor([11])))
    with torch.no_grad():
        torch.testing.assert_close(last_token_logits(m, ids), last_token_logits(m, ids[:, perm]), rtol=0, atol=1e-5)


@pytest.mark.parametrize("pe", VARIANTS)
def test_checkpoints_round_trip_and_mark_posym_only_variants(tmp_path, pe):
    m = _model(pe)
    save_model(m, tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    plain = parse_pe(pe).hf_plain
    assert cfg["model_type"] == ("gptj" if plain else "posym_gptj")
    assert cfg.get("posym_pe") == (None if pe == "rope" else parse_pe(pe).name)
    back = load_model(tmp_path)
    with torch.no_grad():
        assert torch.equal(last_token_logits(back, _ids()), last_token_logits(m, _ids()))
    if plain:  # plain transformers runs the same model
        hf = GPTJForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
        with torch.no_grad():
            assert torch.equal(hf(_ids()).logits, m(_ids()).logits)
    else:  # AutoModel refuses the unknown model type instead of loading a RoPE model
        from transformers import AutoModelForCausalLM

        with pytest.raises(ValueError, match="posym_gptj"):
            AutoModelForCausalLM.from_pretrained(tmp_path)


def test_posym_only_checkpoint_with_a_missing_tensor_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    save_model(_model("ssmax:17"), tmp_path)
    w = load_file(tmp_path / "model.safetensors")
    del w["transformer.h.1.attn.q_proj.ssmax_s"]
    save_file(w, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(PosymError, match="1 missing weight tensor"):
        load_model(tmp_path)


@pytest.mark.parametrize("pe", ["nope", "p-rope:0.5", "rope-base:500000"])
def test_extend_positions_keeps_the_variant(pe):
    m = _model(pe)
    before = rotary_table(m).clone()
    extend_positions(m, 500)
    after = rotary_table(m)
    assert after.shape[0] == 500 and torch.equal(after[:before.shape[0]], before)
    assert torch.equal(after, gptj_rotary_table(parse_pe(pe), 500, 16))


def test_randomized_table_covers_l():
    assert model_config("quick", V, pe="randomized:300", **TINY).n_positions == 300
    assert rotary_table(_model("randomized:300")).shape[0] == 300
    assert model_config("quick", V, pe="randomized:64", **TINY).n_positions == 128  # never shrinks


@pytest.mark.parametrize("pe", VARIANTS)
def test_adapter_sees_the_variant(pe):
    """The adapter's recomputed attention equals the model's eager attention (its contract) and its
    angles are the variant's."""
    m = _model(pe)
    ad = get_adapter(m)
    assert torch.equal(ad.inv_freq, gptj_inv_freq(parse_pe(pe), 16).double())
    ids = _ids(2, 11)
    q, k = ad.capture_qk(ids)
    with torch.no_grad():
        att = m(ids, output_attentions=True).attentions
    for layer in range(2):
        torch.testing.assert_close(ad.attention_from_qk(q, k, layer), att[layer].float(), rtol=0, atol=1e-5)


def test_ssmax_init_and_factor():
    m = build_model(model_config("quick", V, pe="ssmax:17", **TINY), seed=1)
    s = m.transformer.h[0].attn.q_proj.ssmax_s
    assert s.requires_grad and torch.allclose(s, torch.full((2,), 1 / np.log(17)))
    assert ssmax_init(17) * np.log(17) == pytest.approx(1.0)
    # the other weights are those of the plain model of the same seed
    plain = build_model(model_config("quick", V, **TINY), seed=1).state_dict()
    own = m.state_dict()
    assert all(torch.equal(plain[k], own[k]) for k in plain)
    assert sorted(set(own) - set(plain)) == [f"transformer.h.{i}.attn.q_proj.ssmax_s" for i in range(2)]
    with pytest.raises(PosymError, match="ssmax:N"):
        model_config("quick", V, pe="ssmax", **TINY)


def test_random_positions_are_sorted_unique_in_range_and_reproducible():
    p = random_positions(64, 17, 100, seed=3, step=7)
    assert p.shape == (64, 17) and p.dtype == torch.long
    assert (p.diff(dim=1) > 0).all() and int(p.min()) >= 0 and int(p.max()) < 100
    assert torch.equal(p, random_positions(64, 17, 100, seed=3, step=7))
    assert not torch.equal(p, random_positions(64, 17, 100, seed=3, step=8))
    assert not torch.equal(p, random_positions(64, 17, 100, seed=4, step=7))
    assert torch.equal(random_positions(2, 5, 5, 0, 0), torch.arange(5).repeat(2, 1))
    # every position is drawn about equally often (a uniform subset, not a biased one)
    counts = np.bincount(random_positions(2000, 17, 100, seed=0, step=0).ravel().numpy(), minlength=100)
    assert counts.min() > 0.8 * 340 and counts.max() < 1.2 * 340
    with pytest.raises(PosymError, match="length"):
        random_positions(2, 20, 10, 0, 0)


def test_positional_encoding_properties():
    assert [parse_pe(x).hf_plain for x in VARIANTS] == [True, False, False, False, True, True, False]
    assert PositionalEncoding("p-rope", 0.5).rotating_pairs(16) == 4
    assert parse_pe("rope-base:500000").theta == 500000 and parse_pe("nope").theta == 10000


def _index_probe(b: int, n: int, seed: int, back: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """An Index-only probe: ``n - 1`` distinct content tokens, then a fixed query token (0); the answer
    is the token ``back`` places before the query — a rule on positions only (Paper B's positional
    canonical task). ids [b, n], labels [b]."""
    g = torch.Generator().manual_seed(seed)
    content = torch.stack([torch.randperm(V - 1, generator=g)[: n - 1] + 1 for _ in range(b)])
    ids = torch.cat((content, torch.zeros(b, 1, dtype=torch.long)), dim=1)
    return ids, ids[:, n - 1 - back]


def _train_on_probe(pe: str, n: int = 12, steps: int = 150) -> GPTJForCausalLM:
    m = _model(pe, n_layer=1).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    for step in range(steps):
        ids, labels = _index_probe(32, n, seed=step)
        loss = torch.nn.functional.cross_entropy(m(ids).logits[:, -1], labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m.eval()


def test_a_one_layer_nope_model_cannot_read_an_index_at_any_length():
    """Paper B (Theorem 2's setting): without a positional encoding the query's logits are a function
    of the *set* of earlier tokens, so over the n − 1 cyclic shifts of one prompt's content the
    prediction is one token while the answer takes n − 1 values: accuracy on every orbit is at most
    chance, 1/(n − 1), however the model was trained. The same training with RoPE reads the index."""
    nope, rope = _train_on_probe("nope"), _train_on_probe("rope")
    for n in (12, 30):  # the training length and past it
        ids, labels = _index_probe(16, n, seed=10_000 + n)
        orbit = torch.stack([torch.cat((ids[:, :-1].roll(r, dims=1), ids[:, -1:]), dim=1) for r in range(n - 1)])
        answers = orbit[:, :, n - 1 - 2]  # [n-1 shifts, 16]
        with torch.no_grad():
            logits = torch.stack([last_token_logits(nope, o) for o in orbit])  # [n-1, 16, V]
            torch.testing.assert_close(logits, logits[:1].expand_as(logits), rtol=0, atol=1e-4)
            hit = (logits.argmax(-1) == answers).float().mean(0)  # accuracy per orbit
            assert (hit <= 1 / (n - 1) + 1e-9).all(), (n, hit)
            rope_acc = (last_token_logits(rope, ids).argmax(-1) == labels).float().mean().item()
        if n == 12:
            assert rope_acc >= 0.5, rope_acc  # the probe is learnable with positions (chance 0.09; 0.94 here)
