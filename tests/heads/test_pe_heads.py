"""Known answers of the training-time positional encodings (SPEC §2.1) read by the head analyses:
a NoPE head is symbolic on every prompt (Paper B: without positional encoding a swap moves the
attention with the content, so s_SYM = 1 and s_POS = Σα·2D_iD_j/(D_i²+D_j²), which is 0 for a sharp
head), and a p-RoPE pair that does not rotate carries no position (its per-frequency head is symbolic,
angle 0)."""

import numpy as np
import pytest
import torch

from posym.heads.frequencies import frequency_ids, frequency_scores, frequency_swap_attention
from posym.heads.scores import scores_fast, swap_attention
from posym.model.gptj import build_model, model_config
from posym.tasks import get_vocab, make_split

torch.set_num_threads(1)
# weights large enough that attention is far from uniform (a uniform head scores (1, 1), SPEC §3)
TINY = dict(n_layer=2, n_embd=32, n_head=2, n_inner=64, rotary_dim=16, initializer_range=0.5)


def _model(pe):
    return build_model(model_config("quick", get_vocab("number").size, pe=pe, **TINY), seed=3).eval()


def _prompts(n=6):
    return make_split("number", "val", seed=0, n=n).input_ids


def _follows_content(d, pairs, dp_i, dp_j):
    """After swapping units i, j the attention on them is exactly the other's (content, not position)."""
    i, j = pairs[:, 0], pairs[:, 1]
    np.testing.assert_allclose(dp_i, d[..., j], atol=1e-6)
    np.testing.assert_allclose(dp_j, d[..., i], atol=1e-6)


@pytest.mark.parametrize("method", ["fast", "reference"])
def test_nope_heads_are_symbolic_on_every_prompt(method):
    m = _model("nope")
    sw = swap_attention(m, _prompts(), method=method)
    _follows_content(sw.d, sw.pairs, sw.dp_i, sw.dp_j)
    res = scores_fast(m, _prompts()) if method == "fast" else sw
    s_pos, s_sym = (res.s_pos, res.s_sym) if method == "fast" else sw.scores()
    assert s_sym.shape == (6, 2, 2, 1)
    np.testing.assert_allclose(s_sym, 1.0, atol=1e-6)  # every prompt, layer, head
    assert (s_pos < s_sym - 1e-3).all()  # never mixed: below 1 on every prompt
    # the same weights with RoPE do not follow content
    rope = swap_attention(_model("rope"), _prompts())
    assert np.abs(rope.dp_i - rope.d[..., rope.pairs[:, 1]]).max() > 1e-2


def test_p_rope_removed_pairs_carry_no_position():
    m = _model("p-rope:0.5")  # 8 pairs, the 4 fastest rotate
    angle = frequency_ids(m)["angle"].to_numpy()
    assert (angle[4:] == 0).all() and (angle[:4] > 0).all()
    d, dp_i, dp_j, pairs = frequency_swap_attention(m, _prompts())  # d [B, L, H, F, t]
    _follows_content(d[:, :, :, 4:], pairs, dp_i[:, :, :, 4:], dp_j[:, :, :, 4:])
    df = frequency_scores(m, _prompts(), mean_over_prompts=False)
    removed = df[df.freq_id > 4]
    assert len(removed) == 6 * 2 * 2 * 4
    np.testing.assert_allclose(removed.s_sym, 1.0, atol=1e-6)
    kept = d[:, :, :, :4]
    moved = np.abs(dp_i[:, :, :, :4] - kept[..., pairs[:, 1]]).max()
    assert moved > 1e-2  # the rotating pairs do see positions
