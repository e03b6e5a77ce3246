"""Known-answer heads and the SPEC §3 formula: positional (1, 0), symbolic (0, 1), uniform (1, 1)."""

import numpy as np
import pytest
import torch

from head_builders import V, content_head, content_prompts, relative_head, uniform_head
from posym.errors import PosymError
from posym.heads import (
    HeadScores,
    combine_scores,
    attention_entropy,
    pair_cos,
    scores_blocks_fast,
    scores_blocks_reference,
    scores_fast,
    scores_reference,
    swap_attention,
)

torch.set_num_threads(1)
METHODS = {"fast": scores_fast, "reference": scores_reference}


def _random_prompts(n, length=17, seed=0):
    return np.random.default_rng(seed).integers(0, V, size=(n, length))


@pytest.mark.parametrize("method", list(METHODS))
def test_relative_offset_head_is_positional(method):
    m = relative_head(offset=3)
    ids = _random_prompts(4)
    sw = swap_attention(m, ids, method=method)
    assert (sw.d[..., 13] > 0.99).all()  # attends to t - 3 = 13 whatever the content
    res = METHODS[method](m, ids)
    assert res.s_pos.shape == (4, 1, 1, 1)
    np.testing.assert_allclose(res.s_pos, 1.0, atol=1e-6)
    np.testing.assert_allclose(res.s_sym, 0.0, atol=1e-6)
    assert (res.entropy < 0.01).all()


@pytest.mark.parametrize("method", list(METHODS))
def test_content_match_head_is_symbolic(method):
    m = content_head()
    ids, where = content_prompts(4)
    sw = swap_attention(m, ids, method=method)
    assert (sw.d[np.arange(4), 0, 0, where] > 0.99).all()  # attends to the matching token wherever it is
    res = METHODS[method](m, ids)
    np.testing.assert_allclose(res.s_pos, 0.0, atol=1e-6)
    np.testing.assert_allclose(res.s_sym, 1.0, atol=1e-6)


@pytest.mark.parametrize("method", list(METHODS))
def test_uniform_head_scores_one_one(method):
    m = uniform_head()
    res = METHODS[method](m, _random_prompts(3), taus=[1e-4, 1.0])
    np.testing.assert_allclose(res.s_pos, 1.0, atol=1e-9)
    np.testing.assert_allclose(res.s_sym, 1.0, atol=1e-9)
    np.testing.assert_allclose(res.entropy, 1.0, atol=1e-6)


@pytest.mark.parametrize("margin", [150.0, 25.0])
def test_self_attending_head_degenerate_convention(margin):
    """A head attending only to itself (SPEC §3, degenerate case). margin 150: every D_i underflows to
    exactly 0 in float32; margin 25: tiny but non-zero attention. The authors' cosine ("torch", the
    default) scores it (0, 0) and the old "exact" rule (1, 1); fast and reference agree on both, and
    swap_mass (the attention on the swappable keys) flags the head."""
    m = relative_head(offset=0, margin=margin)
    ids = _random_prompts(2)
    fast = swap_attention(m, ids)
    ref = swap_attention(m, ids, method="reference")
    assert (fast.swap_mass < 1e-8).all() and (ref.swap_mass < 1e-8).all()
    if margin > 100:
        assert (ref.d == 0).all() and (fast.d == 0).all() and (fast.dp_i == 0).all()
    for sw in (fast, ref):
        s_pos, s_sym = sw.scores()
        np.testing.assert_allclose(s_pos, 0.0, atol=1e-6)
        np.testing.assert_allclose(s_sym, 0.0, atol=1e-6)
    if margin > 100:  # the exact rule's (1, 1) needs exact zeros
        for sw in (fast, ref):
            s_pos, s_sym = sw.scores(cosine="exact")
            np.testing.assert_allclose(s_pos, 1.0)
            np.testing.assert_allclose(s_sym, 1.0)
    for method in METHODS.values():
        res = method(m, ids)
        np.testing.assert_allclose(res.s_pos, 0.0, atol=1e-6)
        assert res.cosine == "torch" and (res.to_frame().swap_mass < 1e-8).all()
    np.testing.assert_allclose(scores_fast(m, ids, cosine="exact").s_pos, scores_reference(m, ids, cosine="exact").s_pos,
                               atol=1e-6)
    # a normal head has all its mass on the keys it swaps (apart from its own key)
    assert (scores_fast(relative_head(offset=3), ids).swap_mass > 0.99).all()


def test_torch_cosine_is_functional_cosine_similarity():
    g = torch.Generator().manual_seed(0)
    scale = 10.0 ** torch.randint(-12, 1, (500, 1), generator=g).double()
    x = torch.rand(500, 2, generator=g, dtype=torch.float64) * scale
    y = torch.rand(500, 2, generator=g, dtype=torch.float64) * scale.flip(0)
    want = torch.nn.functional.cosine_similarity(x, y, dim=-1)  # eps=1e-8, the authors' call
    got = pair_cos(x[:, 0], x[:, 1], y[:, 0], y[:, 1])
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-15)
    with pytest.raises(PosymError, match="cosine"):
        pair_cos(x[:, 0], x[:, 1], y[:, 0], y[:, 1], cosine="cos")


def test_known_heads_with_query_pos_and_blocks():
    # relative head, query at 10: target 7; content head, query at 9
    rel = scores_fast(relative_head(offset=3), _random_prompts(3), query_pos=10)
    assert rel.query_pos.tolist() == [10, 10, 10]
    np.testing.assert_allclose(rel.s_pos, 1.0, atol=1e-6)
    np.testing.assert_allclose(rel.s_sym, 0.0, atol=1e-6)
    ids, _ = content_prompts(3, query_pos=9)
    sym = scores_fast(content_head(), ids, query_pos=9)
    np.testing.assert_allclose(sym.s_pos, 0.0, atol=1e-6)
    np.testing.assert_allclose(sym.s_sym, 1.0, atol=1e-6)
    # blocks: single-token blocks reproduce the token scores; 4-token blocks keep the readings
    for model, prompts in ((relative_head(offset=3), _random_prompts(3)), (content_head(), content_prompts(3)[0])):
        tok = scores_fast(model, prompts)
        one = scores_blocks_fast(model, prompts, blocks=16)
        np.testing.assert_allclose(one.s_pos, tok.s_pos, atol=1e-9)
        np.testing.assert_allclose(one.s_sym, tok.s_sym, atol=1e-9)
        blk = scores_blocks_fast(model, prompts, blocks=4)
        ref = scores_blocks_reference(model, prompts, blocks=4)
        np.testing.assert_allclose(blk.s_pos, tok.s_pos, atol=1e-6)
        np.testing.assert_allclose(blk.s_sym, tok.s_sym, atol=1e-6)
        np.testing.assert_allclose(ref.s_pos, blk.s_pos, atol=1e-6)
        np.testing.assert_allclose(ref.s_sym, blk.s_sym, atol=1e-6)


def test_pair_cos_zero_vector_rule():
    z = torch.zeros(())
    o = torch.ones(())
    ex = dict(cosine="exact")
    assert pair_cos(z, z, z, z, **ex).item() == 1.0  # nothing moved: consistent with both readings
    assert pair_cos(o, z, z, z, **ex).item() == 0.0
    assert pair_cos(z, z, z, o, **ex).item() == 0.0
    assert pair_cos(o, z, o, z, **ex).item() == pytest.approx(1.0)
    assert pair_cos(o, z, z, o, **ex).item() == pytest.approx(0.0)
    # scale invariance down to tiny values (no underflow)
    tiny = torch.tensor([3e-300, 4e-300], dtype=torch.float64)
    assert pair_cos(tiny[0], tiny[1], torch.tensor(3.0), torch.tensor(4.0), **ex).item() == pytest.approx(1.0)
    # the authors' cosine: zero vectors give 0 (not 1), tiny ones shrink towards 0
    assert pair_cos(z, z, z, z).item() == 0.0
    assert pair_cos(tiny[0], tiny[1], torch.tensor(3.0), torch.tensor(4.0)).item() < 1e-200


def test_combine_scores_by_hand_and_tau_handling():
    # two swaps: gaps 0.5 and 0.1; with small tau alpha picks the first
    d_i = np.array([0.6, 0.2])
    d_j = np.array([0.1, 0.1])
    dp_i = np.array([0.1, 0.2])  # swap 0 follows content; swap 1 stays
    dp_j = np.array([0.6, 0.1])
    sp, ss = combine_scores(d_i, d_j, dp_i, dp_j, taus=[1e-4, 1e3])
    assert sp.shape == ss.shape == (2,)
    pos = np.array([(0.1 * 0.6 + 0.6 * 0.1) / (0.6**2 + 0.1**2), 1.0])
    sym = np.array([1.0, (0.2 * 0.1 + 0.1 * 0.2) / (0.2**2 + 0.1**2)])
    assert sp[0] == pytest.approx(pos[0]) and ss[0] == pytest.approx(sym[0])
    w = np.exp(np.array([0.5, 0.1]) / 1e3)
    w /= w.sum()
    assert sp[1] == pytest.approx((w * pos).sum()) and ss[1] == pytest.approx((w * sym).sum())
    # a scalar tau equals a one-element list; result columns follow the list order
    m = relative_head()
    ids = _random_prompts(2)
    a = scores_fast(m, ids, taus=1e-3)
    b = scores_fast(m, ids, taus=[1e-2, 1e-3])
    assert a.taus == (1e-3,) and b.taus == (1e-2, 1e-3)
    np.testing.assert_allclose(a.s_pos[..., 0], b.s_pos[..., 1])
    for bad in (0.0, -1.0, [], [1e-4, float("nan")], "x"):
        with pytest.raises(PosymError):
            scores_fast(m, ids, taus=bad)


def test_attention_entropy():
    assert attention_entropy(torch.full((8,), 1 / 8)).item() == pytest.approx(1.0)
    assert attention_entropy(torch.tensor([1.0, 0.0, 0.0])).item() == 0.0
    assert attention_entropy(torch.tensor([1.0])).item() == 0.0


def test_to_frame_shapes_and_columns():
    res = scores_fast(uniform_head(), _random_prompts(3), taus=[1e-4, 1e-2])
    assert isinstance(res, HeadScores) and res.n_prompts == 3
    df = res.to_frame()
    assert list(df.columns) == ["layer", "head", "tau", "s_pos", "s_sym", "entropy", "swap_mass", "n_prompts"]
    assert len(df) == 2 and set(df.tau) == {1e-4, 1e-2} and (df.n_prompts == 3).all()
    per = res.to_frame(mean_over_prompts=False)
    assert list(per.columns) == ["prompt", "query_pos", "layer", "head", "tau", "s_pos", "s_sym", "entropy",
                                 "swap_mass"]
    assert len(per) == 6 and (per.query_pos == 16).all()
    np.testing.assert_allclose(per.groupby("tau").s_pos.mean().to_numpy(), df.sort_values("tau").s_pos.to_numpy())
