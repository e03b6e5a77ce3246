"""Classic head detectors (docs/spec.md, "Classic head detectors and per-prompt readings"): known
answers on heads built to be each type (a previous-token head, a sink head, an induction head on a
two-layer toy), a literal loop-over-positions implementation on random tiny models of three
families, and the random repeated sequences they run on."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM, GPTJConfig, GPTJForCausalLM, LlamaConfig, LlamaForCausalLM

from posym.errors import PosymError
from posym.heads.detectors import DETECTORS, detection_patterns, detector_arrays, detector_scores
from posym.heads.head_types import classic_types
from posym.model.adapters import get_adapter
from posym.tasks.repeated import repeated_random_sequences

from detector_literal import literal_detectors
from head_builders import V, _orthonormal_embeddings, relative_head, sharpen_qk

BOS = 0


def _prompts(n=4, length=10, vocab=V, seed=0):
    return repeated_random_sequences(vocab, n, length, seed=seed, bos_id=BOS)


# ================================================================================================
# the prompts
# ================================================================================================
def test_repeated_random_sequences_layout():
    ids = repeated_random_sequences(50, 6, 8, seed=3, bos_id=7, exclude_ids=[1, 2])
    assert ids.shape == (6, 17) and ids.dtype == np.int64
    assert (ids[:, 0] == 7).all()
    body = ids[:, 1:]
    assert (body[:, :8] == body[:, 8:]).all()
    assert all(len(set(r[:8])) == 8 for r in body)  # distinct within a half
    assert not np.isin(body, [1, 2, 7]).any() and body.min() >= 0 and body.max() < 50
    assert np.array_equal(ids, repeated_random_sequences(50, 6, 8, seed=3, bos_id=7, exclude_ids=[1, 2]))
    assert not np.array_equal(ids, repeated_random_sequences(50, 6, 8, seed=4, bos_id=7, exclude_ids=[1, 2]))
    assert repeated_random_sequences(50, 2, 5).shape == (2, 10)


@pytest.mark.parametrize("kwargs, match", [
    (dict(vocab_size=10, n=2, length=10, bos_id=0), "distinct tokens"),
    (dict(vocab_size=10, n=2, length=3, bos_id=10), "outside the vocabulary"),
    (dict(vocab_size=10, n=0, length=3), "n must be"),
    (dict(vocab_size=10, n=2, length=3, exclude_ids=[-1]), "exclude_ids"),
])
def test_repeated_random_sequences_refuses(kwargs, match):
    with pytest.raises(PosymError, match=match):
        repeated_random_sequences(**kwargs)


@pytest.mark.parametrize("bad", [2.5, "3", True, 0])
def test_batch_size_must_be_a_positive_integer(bad):
    """The former lax check (heads/swaps.positive_int) read 2.5 as 2 and "3" as 3: posym.checks refuses them."""
    from posym.checks import check_positive_int as positive_int

    with pytest.raises(PosymError, match="batch_size must be an integer >= 1"):
        detector_arrays(None, torch.zeros(1, 4, dtype=torch.long), batch_size=bad)  # refused before the model is read
    with pytest.raises(PosymError, match="n must be an integer >= 1"):
        positive_int(bad, "n")


# ================================================================================================
# the patterns (TransformerLens 4's)
# ================================================================================================
def test_detection_patterns_by_hand():
    ids = torch.tensor([[5, 1, 2, 1, 2]])
    p = {k: v[0].int().tolist() for k, v in detection_patterns(ids).items()}
    assert p["previous_token"][3] == [0, 0, 1, 0, 0] and p["previous_token"][0] == [0] * 5
    assert p["duplicate_token"][3] == [0, 1, 0, 0, 0] and p["duplicate_token"][4] == [0, 0, 1, 0, 0]
    assert p["duplicate_token"][1] == [0] * 5
    # query 3 (token 1): the token after the earlier 1 (position 1) is position 2
    assert p["induction"][3] == [0, 0, 1, 0, 0] and p["induction"][4] == [0, 0, 0, 1, 0]
    assert p["first_token"][2] == [1, 0, 0, 0, 0]


# ================================================================================================
# heads built to be each type
# ================================================================================================
def _sink_head(strength: float = 6.0) -> GPTJForCausalLM:
    """One GPT-J head whose keys light up only on the start token BOS: every query attends to position 0.

    ln_1 maps dim 0 to the constant 1 and each orthonormal embedding e_v to 8·e_v; q = strength·f
    from the constant, k = strength·(e_v·e_BOS)·f on a non-rotary dim f, so the logit of the BOS key
    is scaling·64·strength²/8 = strength² and every other key 0."""
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=V, n_positions=32, n_embd=64, n_layer=1, n_head=1, rotary_dim=2, n_inner=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    m = GPTJForCausalLM(cfg).eval()
    e = _orthonormal_embeddings().float()
    with torch.no_grad():
        m.transformer.wte.weight.copy_(e)
        blk = m.transformer.h[0]
        blk.ln_1.weight.fill_(1.0)
        blk.ln_1.bias.zero_()
        blk.ln_1.weight[0] = 0.0
        blk.ln_1.bias[0] = 1.0
        blk.attn.q_proj.weight.zero_()
        blk.attn.k_proj.weight.zero_()
        blk.attn.q_proj.weight[10, 0] = strength
        blk.attn.k_proj.weight[10] = strength * e[BOS]
    return m


def _induction_toy(strength: float = 3.0) -> GPTJForCausalLM:
    """A two-layer attention-only GPT-J (width 128, one head, rotary on the first 64 head dims):

    * layer 0 — a previous-token head (RoPE alone, as ``head_builders.relative_head``) whose value
      copies the token's embedding (residual dims 2..63) into a "previous token" subspace (dims 66..127);
    * layer 1 — q reads the current token, k reads the previous-token subspace, both on non-rotary
      head dims: query ``i`` attends to keys ``j`` with ``x_{j-1} = x_i`` — an induction head.
    MLPs are zeroed, so each residual stream is ``e_{x_i} + P e_{x_{i-1}}``.
    """
    D, R = 128, 64
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=V, n_positions=32, n_embd=D, n_layer=2, n_head=1, rotary_dim=R, n_inner=D,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="eager")
    m = GPTJForCausalLM(cfg).eval()
    ad = get_adapter(m)
    e = torch.zeros(V, D)
    e[:, :64] = _orthonormal_embeddings().float()  # dims 2..63, zero mean, unit norm
    ln = D ** 0.5  # LayerNorm maps a zero-mean unit vector of width 128 to sqrt(128)·e
    shift = torch.zeros(D, D)
    shift[66:128, 2:64] = torch.eye(62)  # P: token subspace -> previous-token subspace
    # layer 0: previous-token head on the rotary dims, from the constant dim 0
    k = torch.zeros(D, dtype=torch.float64)
    k[:6] = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    x = torch.arange(-31, 32, dtype=torch.float64)
    f = torch.cos(x[:, None] * ad.layer_inv_freq(0)[:3]).sum(-1)
    gap = (f[x == 0] - f[x != 0].max()).item()
    k = k * (40.0 / (gap * ad.scaling)) ** 0.5
    q = ad.rotate_t(k[None], [1], 0)[0]
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.transformer.wte.weight.copy_(e)
        for blk in m.transformer.h:
            blk.ln_1.weight.fill_(1.0)
        b0, b1 = m.transformer.h
        b0.ln_1.weight[0] = 0.0
        b0.ln_1.bias[0] = 1.0
        b0.attn.q_proj.weight[:, 0] = q.float()
        b0.attn.k_proj.weight[:, 0] = k.float()
        b0.attn.v_proj.weight.copy_(shift / ln)  # value of key j: P e_{x_j}
        b0.attn.out_proj.weight.copy_(torch.eye(D))
        # layer 1 (its input e + P e_prev has norm sqrt(2): LayerNorm scale sqrt(64))
        to_head = torch.zeros(D, D)
        to_head[R + 2:R + 64, 2:64] = torch.eye(62)  # token subspace -> non-rotary head dims
        from_prev = torch.zeros(D, D)
        from_prev[R + 2:R + 64, 66:128] = torch.eye(62)
        b1.attn.q_proj.weight.copy_(strength * to_head)
        b1.attn.k_proj.weight.copy_(strength * from_prev)
        b1.ln_1.weight[0] = 1.0
    return m


def test_previous_token_head():
    m = relative_head(offset=1)
    ids = _prompts()
    d = detector_scores(m, ids).iloc[0]
    assert d["previous_token"] > 0.99
    assert d["induction"] < 0.02 and d["duplicate_token"] < 0.02
    T = ids.shape[1]
    assert d["first_token"] == pytest.approx(2 / T, abs=0.01)  # rows 0 and 1 only
    assert d["previous_token"] * (T - 1) / T == pytest.approx(
        detector_scores(m, ids, rows="all").iloc[0]["previous_token"], abs=1e-9)
    assert classic_types(detector_scores(m, ids)).tolist() == ["previous_token"]


def test_sink_head():
    m = _sink_head()
    ids = _prompts()
    d = detector_scores(m, ids, sink_eps=0.3).iloc[0]
    assert d["first_token"] > 0.999 and d["sink"] == 1.0
    assert d["previous_token"] < 0.1 and d["induction"] < 0.01
    assert classic_types(detector_scores(m, ids)).tolist() == ["sink"]
    # without the start token nothing lights the keys up: uniform attention, no sink
    plain = repeated_random_sequences(V, 4, 10, exclude_ids=[BOS])
    assert detector_scores(m, plain, sink_eps=0.3).iloc[0]["sink"] == 0.0


def test_induction_head_on_a_two_layer_toy():
    m = _induction_toy()
    ids = _prompts(length=12)
    d = detector_scores(m, ids).set_index("layer")
    assert d.loc[0, "previous_token"] > 0.99
    assert d.loc[1, "induction"] > 0.99
    # (first-half queries have no match and spread uniformly, so they touch their previous key a little)
    assert d.loc[1, "duplicate_token"] < 0.01 and d.loc[1, "previous_token"] < 0.2
    assert classic_types(d).tolist() == ["previous_token", "induction"]
    # TransformerLens's all-rows score: only the second half's 12 rows have a target
    T = ids.shape[1]
    assert detector_scores(m, ids, rows="all").set_index("layer").loc[1, "induction"] == pytest.approx(12 / T, abs=0.01)


# ================================================================================================
# against a literal implementation on random models
# ================================================================================================
def _llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager")
    return LlamaForCausalLM(cfg).eval()


def _gptj():
    torch.manual_seed(0)
    cfg = GPTJConfig(vocab_size=50, n_positions=64, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_inner=128,
                     attn_implementation="eager")
    return GPTJForCausalLM(cfg).eval()


def _gemma2_window():
    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, max_position_embeddings=64, sliding_window=5,
                       attn_logit_softcapping=3.0, query_pre_attn_scalar=12, attn_implementation="eager")
    return Gemma2ForCausalLM(cfg).eval()


@pytest.mark.parametrize("build", [_llama, _gptj, _gemma2_window], ids=["llama-gqa", "gptj", "gemma2-window"])
def test_equals_literal_implementation(build):
    model = sharpen_qk(build(), std=0.4)
    ids = repeated_random_sequences(50, 3, 6, seed=2, bos_id=1)
    ids[2, 3] = ids[2, 4]  # a duplicate inside a half too
    lit = literal_detectors(model, ids)
    for rows in ("target", "all"):
        got = detector_scores(model, ids, rows=rows, batch_size=2, per_prompt=True)
        for d in DETECTORS:
            want = lit[(rows, d)]
            assert np.allclose(got[d].to_numpy().reshape(want.shape), want, atol=1e-5, equal_nan=True), (rows, d)
        mean = detector_scores(model, ids, rows=rows)
        for d in DETECTORS:
            assert np.allclose(mean[d].to_numpy(), np.nanmean(lit[(rows, d)], 0).ravel(), atol=1e-5)
    assert np.ptp(lit[("target", "previous_token")]) > 0.1  # sharpened: the heads differ, not all uniform


def test_layers_batches_attention_implementation_and_no_hooks_left():
    model = sharpen_qk(_llama(), std=0.4)
    ids = repeated_random_sequences(50, 5, 6, seed=0, bos_id=1)
    full = detector_scores(model, ids, sink_eps=0.2)
    one = detector_scores(model, ids, layers=[1], batch_size=1, sink_eps=0.2)
    assert list(full.columns) == ["layer", "head", *DETECTORS, "sink"]
    assert np.allclose(one.drop(columns="layer").to_numpy(), full[full.layer == 1].drop(columns="layer").to_numpy())
    assert set(np.unique(full["sink"])) <= {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}
    for mod in model.modules():
        assert not mod._forward_hooks and not mod._forward_pre_hooks
    torch.manual_seed(0)
    sdpa = sharpen_qk(LlamaForCausalLM(LlamaConfig(
        vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, attn_implementation="sdpa")).eval(), std=0.4)
    assert np.allclose(detector_scores(sdpa, ids, sink_eps=0.2)[list(DETECTORS)].to_numpy(),
                       full[list(DETECTORS)].to_numpy(), atol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(sink_eps=1.5), "sink_eps"), (dict(sink_eps=True), "sink_eps"), (dict(rows="some"), "rows"),
    (dict(batch_size=0), "batch_size"), (dict(layers=[5]), "out of range"),
])
def test_argument_errors(kwargs, match):
    with pytest.raises(PosymError, match=match):
        detector_scores(_llama(), repeated_random_sequences(50, 2, 4), **kwargs)


def test_refuses_ids_outside_the_vocabulary_and_one_token_prompts():
    with pytest.raises(PosymError, match="vocabulary"):
        detector_scores(_llama(), repeated_random_sequences(60, 2, 4, seed=1) + 10)
    with pytest.raises(PosymError, match="at least 2 tokens"):
        detector_scores(_llama(), np.array([[3]]))
