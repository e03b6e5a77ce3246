"""Centred scores (module doc of posym.heads.scores, "Centred scores"): cosines on attention minus
the mass-matched uniform row ``u_b = M·ℓ_b/N``. Known heads (uniform -> (0, 0) instead of (1, 1);
sharp positional / symbolic heads keep their +1), the formula by hand, fast == reference, errors."""

import numpy as np
import pytest
import torch

from family_models import build_family
from head_builders import V, content_head, content_prompts, relative_head, sharpen_qk, uniform_head
import posym.heads
from posym.errors import PosymError
from posym.heads import combine_scores, head_scores, pair_cos, swap_attention

torch.set_num_threads(1)
METHODS = ("fast", "reference")


def _prompts(n, length=17, seed=0):
    return np.random.default_rng(seed).integers(0, V, size=(n, length))


@pytest.mark.parametrize("method", METHODS)
def test_uniform_head_centred_scores_zero(method):
    m, ids = uniform_head(), _prompts(3)
    for blocks in (None, [(0, 4), (4, 8), (8, 12), (12, 16)], 5):
        plain = head_scores(m, ids, taus=[1e-4, 1.0], blocks=blocks, method=method)
        centred = head_scores(m, ids, taus=[1e-4, 1.0], blocks=blocks, method=method, centred=True)
        np.testing.assert_allclose(plain.s_pos, 1.0, atol=1e-9)  # Paper B: uniform = "both high"
        np.testing.assert_allclose(plain.s_sym, 1.0, atol=1e-9)
        np.testing.assert_allclose(centred.s_pos, 0.0, atol=1e-6)
        np.testing.assert_allclose(centred.s_sym, 0.0, atol=1e-6)
        assert centred.centred and not plain.centred
        np.testing.assert_array_equal(centred.entropy, plain.entropy)
        # the four score functions take the keyword too
        kind = "scores_blocks" if blocks is not None else "scores"
        fn = getattr(posym.heads, f"{kind}_{method}")
        again = fn(m, ids, taus=[1e-4, 1.0], centred=True, **({"blocks": blocks} if blocks is not None else {}))
        np.testing.assert_array_equal(again.s_pos, centred.s_pos)


def _sharp_sym(t: int) -> float:
    """cos(v, swap v) for v = (-u, 1 - u), u = 1/t: a one-hot head seen against its swapped copy."""
    a, b = -1.0 / t, 1.0 - 1.0 / t
    return 2 * a * b / (a * a + b * b)


@pytest.mark.parametrize("method", METHODS)
def test_sharp_heads_keep_their_score_and_the_other_turns_negative(method):
    ids = _prompts(4)
    pos = head_scores(relative_head(offset=3), ids, method=method, centred=True)
    np.testing.assert_allclose(pos.s_pos, 1.0, atol=1e-4)
    np.testing.assert_allclose(pos.s_sym, _sharp_sym(16), atol=0.02)  # -30/226 = -0.133
    ids, _ = content_prompts(4)
    sym = head_scores(content_head(), ids, method=method, centred=True)
    np.testing.assert_allclose(sym.s_sym, 1.0, atol=1e-4)
    np.testing.assert_allclose(sym.s_pos, _sharp_sym(16), atol=0.02)


def test_combine_scores_centre_by_hand():
    d_i, d_j = np.array([0.30, 0.10]), np.array([0.05, 0.12])
    dp_i, dp_j = np.array([0.20, 0.11]), np.array([0.15, 0.10])
    c = np.array([0.08, 0.09])
    for tau in (1e-4, 0.05):
        sp, ss = combine_scores(d_i, d_j, dp_i, dp_j, tau, centre=c)
        gap = np.abs(d_i - d_j)  # the gap ignores the centre
        alpha = np.exp((gap - gap.max()) / tau)
        alpha /= alpha.sum()
        cos = lambda x1, x2, y1, y2: (x1 * y1 + x2 * y2) / np.hypot(x1, x2) / np.hypot(y1, y2)  # noqa: E731
        pos = cos(dp_i - c, dp_j - c, d_i - c, d_j - c)
        sym = cos(dp_i - c, dp_j - c, d_j - c, d_i - c)
        np.testing.assert_allclose(sp[0], (alpha * pos).sum(), rtol=1e-12)
        np.testing.assert_allclose(ss[0], (alpha * sym).sum(), rtol=1e-12)
    # without a centre: Paper B's cosines
    sp, _ = combine_scores(d_i, d_j, dp_i, dp_j, 1.0)
    alpha = np.exp(np.abs(d_i - d_j))
    alpha /= alpha.sum()
    np.testing.assert_allclose(sp[0], (alpha * pair_cos(*map(torch.tensor, (dp_i, dp_j, d_i, d_j))).numpy()).sum())


def test_uniform_centre_is_mass_matched_per_token():
    m = sharpen_qk(build_family("llama", vocab_size=V), 0.5)
    ids = _prompts(2, length=12)
    blocks = [(0, 2), (2, 5), (5, 7), (7, 10)]  # lengths 2, 3, 2, 3
    sw = swap_attention(m, ids, blocks=blocks)
    u = sw.uniform_centre()
    np.testing.assert_allclose(u.sum(-1), sw.swap_mass, rtol=1e-12)  # same mass as the head
    np.testing.assert_allclose(u / sw.unit_lengths, np.repeat((sw.swap_mass / 10)[..., None], 4, -1), rtol=1e-12)
    tok = swap_attention(m, ids)
    np.testing.assert_allclose(tok.uniform_centre(), np.repeat(tok.d.mean(-1, keepdims=True), 11, -1), rtol=1e-12)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_centred_fast_equals_reference(family):
    model = sharpen_qk(build_family(family, vocab_size=V), 0.3)  # attention far from uniform
    ids = _prompts(2, length=11)
    for blocks in (None, [(0, 2), (2, 4), (4, 6), (7, 9)]):
        f = head_scores(model, ids, taus=[1e-4, 1e-2], blocks=blocks, centred=True)
        r = head_scores(model, ids, taus=[1e-4, 1e-2], blocks=blocks, centred=True, method="reference")
        assert np.abs(f.s_pos - r.s_pos).max() <= 1e-5 and np.abs(f.s_sym - r.s_sym).max() <= 1e-5
        plain = head_scores(model, ids, taus=[1e-4, 1e-2], blocks=blocks)
        assert np.abs(plain.s_pos - f.s_pos).max() > 0.05  # the option changes the scores
        assert f.s_sym.min() < 0 <= plain.s_sym.min()  # centred cosines can be negative


def test_centred_errors():
    m, ids = uniform_head(), _prompts(1)
    with pytest.raises(PosymError, match="cosine='torch'"):
        head_scores(m, ids, centred=True, cosine="exact")
    with pytest.raises(PosymError, match="centred must be True or False"):
        head_scores(m, ids, centred="yes")
    sw = swap_attention(m, ids)
    with pytest.raises(PosymError, match="cosine='torch'"):
        sw.scores(centred=True, cosine="exact")
