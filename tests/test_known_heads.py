"""What the known-answer model of tests/known_heads.py claims, checked with today's posym: one head
carries the answer (head ablation) through one rotary frequency ID (freq-mask), and the statistics of
posym.stats find that head and that ID against their matched random controls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from known_heads import N_FREQ, N_HEADS, build_known_answer_model

from posym.errors import PosymError
from posym.heads.ablate import ablated
from posym.interventions import intervened
from posym.stats import benjamini_hochberg, control_p_value, paired_bootstrap
from posym.train.evaluate import predict

CASES = [("gptj", (1, 2), 1), ("gptj", (1, 2), 3), ("llama", (1, 2), 2), ("llama", (0, 1), 4)]


def _predict(model, ids) -> tuple[np.ndarray, np.ndarray]:
    return predict(model, ids.numpy())


def _drop(pair: int) -> str:
    """The freq-mask string keeping every ID but ``pair`` (all layers)."""
    return "freq-mask:keep=" + "+".join(str(i) for i in range(1, N_FREQ + 1) if i != pair)


@pytest.mark.parametrize("family,head,pair", CASES)
def test_one_head_and_one_pair_carry_the_answer(family, head, pair):
    model, ids, labels = build_known_answer_model(family, answer_head=head, pair=pair, n_prompts=128)
    pred, logits = _predict(model, ids)
    assert (pred == labels).all()
    # the answer head puts >= 1 - eps on the previous token; every other head of its layer is uniform
    with torch.no_grad():
        att = model(ids, output_attentions=True).attentions[head[0]][:, :, -1]  # [N, H, T]
    assert (att[:, head[1], -2] >= 1 - 1e-3).all()
    others = [h for h in range(N_HEADS) if h != head[1]]
    torch.testing.assert_close(att[:, others], torch.full_like(att[:, others], 1 / ids.shape[1]))

    with ablated(model, [head]):
        p_abl, l_abl = _predict(model, ids)
    assert np.abs(l_abl).max() < 1e-4 < np.abs(logits).max()  # every logit ~0 (float noise of the norms) ...
    assert (p_abl == labels).mean() <= 0.2  # ... so the argmax is chance (1/16)
    n_layers = model.config.num_hidden_layers if family == "llama" else model.config.n_layer
    for other in [(la, h) for la in range(n_layers) for h in range(N_HEADS) if (la, h) != head]:
        with ablated(model, [other]):
            p, lg = _predict(model, ids)
        assert (p == pred).all(), other
        np.testing.assert_allclose(lg, logits, atol=1e-6)

    with intervened(model, _drop(pair)):
        acc = (_predict(model, ids)[0] == labels).mean()
    assert acc <= 0.3  # uniform over the prompt's tokens: about 1/length
    for other in [i for i in range(1, N_FREQ + 1) if i != pair]:
        with intervened(model, _drop(other)):
            p, lg = _predict(model, ids)
        assert (p == pred).all(), other
        np.testing.assert_allclose(lg, logits, atol=1e-6)


def test_stats_find_the_head_and_the_pair_and_the_controls_find_nothing():
    """The study in miniature: the effect (accuracy drop, paired per prompt) of the answer head vs the
    matched random sets (one head of the same layer), and of its frequency ID vs every other single ID;
    p at the permutation floor, Benjamini-Hochberg over the two cells."""
    model, ids, labels = build_known_answer_model("gptj", pair=2, n_prompts=128)
    base = (_predict(model, ids)[0] == labels).astype(float)

    def correct_ablated(heads):
        with ablated(model, heads):
            return (_predict(model, ids)[0] == labels).astype(float)

    def correct_masked(pair):
        with intervened(model, _drop(pair)):
            return (_predict(model, ids)[0] == labels).astype(float)

    typed = correct_ablated([(1, 2)])
    controls = [correct_ablated([(1, h)]) for h in (0, 1, 3)]  # matched: same layer, the other heads
    drop, lo, hi = paired_bootstrap(base, typed, seed=0)
    assert drop > 0.8 and lo > 0.8
    assert all(paired_bootstrap(base, c)[0] == 0 for c in controls)
    p_head = control_p_value(float((base - typed).mean()), [float((base - c).mean()) for c in controls])
    assert p_head == 1 / 4

    masked = correct_masked(2)
    null = [float((base - correct_masked(k)).mean()) for k in range(1, N_FREQ + 1) if k != 2]
    assert null == [0.0] * (N_FREQ - 1)
    p_pair = control_p_value(float((base - masked).mean()), null)
    assert p_pair == 1 / N_FREQ
    np.testing.assert_allclose(benjamini_hochberg([p_head, p_pair]), [0.25, 0.25])


def test_bad_input_is_one_line():
    for kwargs, match in [({"family": "gpt2"}, "family"), ({"answer_head": (2, 0)}, "no head"),
                          ({"answer_head": (1, 4)}, "no head"), ({"pair": 9}, "frequency ID"),
                          ({"pair": 0}, "frequency ID"), ({"length": 17}, "length"),
                          ({"pair": 8}, "faster pair")]:
        with pytest.raises(PosymError, match=match) as err:
            build_known_answer_model(**kwargs)
        assert "\n" not in str(err.value)
