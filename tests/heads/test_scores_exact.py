"""The fast exact path equals the literal re-run (SPEC §3: ≤ 1e-5) on random and trained GPT-J,
GQA Llama, partial-rotary GPT-NeoX and every supported RoPE family (tests/family_models.py);
multi-query, blocks, batching, modes and errors."""

import numpy as np
import pytest
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

from posym.errors import PosymError
from posym.heads import (
    head_scores,
    scores_blocks_fast,
    scores_blocks_reference,
    scores_fast,
    scores_reference,
    swap_attention,
)
from posym.model import build_model, model_config
from posym.tasks import make_split
from head_builders import sharpen_qk
from family_models import FAMILY_CONFIGS, build_family

torch.set_num_threads(1)
TOL = 1e-5
TAUS = (1e-4, 1e-3, 1e-1)


def _assert_same(fast, ref, tol=TOL):
    """Both SwapAttention (raw D, D') and HeadScores agree."""
    for name in ("d", "dp_i", "dp_j", "entropy", "s_pos", "s_sym"):
        if hasattr(fast, name):
            a, b = getattr(fast, name), getattr(ref, name)
            assert a.shape == b.shape, name
            err = np.abs(a - b).max()
            assert err <= tol, f"{name}: max |fast - reference| = {err:.3g}"


def _compare(model, ids, layers=None, query_pos=None, blocks=None):
    f = swap_attention(model, ids, query_pos=query_pos, layers=layers, blocks=blocks)
    r = swap_attention(model, ids, query_pos=query_pos, layers=layers, blocks=blocks, method="reference")
    _assert_same(f, r)
    sf, ss = f.scores(TAUS)
    rf, rs = r.scores(TAUS)
    assert np.abs(sf - rf).max() <= TOL and np.abs(ss - rs).max() <= TOL
    return f


@pytest.fixture(scope="module")
def paper_models():
    return {task: build_model(model_config("paper", 137 if task == "number" else 129), seed=1)
            for task in ("number", "letter")}


@pytest.mark.parametrize("task,layers", [("number", None), ("letter", [0, 4, 11])])
def test_fast_equals_reference_random_paper_gptj(paper_models, task, layers):
    model = paper_models[task]
    n = 1 if layers is None else 2
    ids = make_split(task, "test", n=n).input_ids
    f = _compare(model, ids, layers=layers)
    assert f.d.shape == (n, 12 if layers is None else 3, 1, 16) and f.dp_i.shape[-1] == 120


def test_fast_equals_reference_trained_gptj(trained_number_model):
    model = trained_number_model
    for task in ("number", "letter"):  # letter ids (< 129) are valid inputs of the number model
        ids = make_split(task, "test", n=3).input_ids
        f = _compare(model, ids)
        assert f.d.max() > 0.2  # trained attention is far from uniform (1/17)
    # full score objects, several taus, per-prompt multi-query positions (along the hop chain)
    batch = make_split("number", "test", n=4)
    qpos = np.array([16, 12, 9, 16])
    fast = scores_fast(model, batch, taus=TAUS, query_pos=qpos, batch_size=3)
    ref = scores_reference(model, batch, taus=TAUS, query_pos=qpos, chunk_size=100)
    _assert_same(fast, ref)
    assert fast.query_pos.tolist() == qpos.tolist()


def test_multi_query_equals_truncated_prompt(trained_number_model):
    ids = make_split("number", "test", n=3).input_ids
    a = scores_fast(trained_number_model, ids, query_pos=11, taus=TAUS)
    b = scores_fast(trained_number_model, ids[:, :12], taus=TAUS)
    c = scores_fast(trained_number_model, ids, query_pos=-6, taus=TAUS)
    # the whole prompt is run (as the reference path runs it), so the truncated prompt's forward differs
    # only by float32 rounding of the longer matmuls; the same query position is exact
    np.testing.assert_allclose(a.s_pos, b.s_pos, atol=1e-6)
    np.testing.assert_allclose(a.s_sym, c.s_sym, atol=1e-12)
    sw = swap_attention(trained_number_model, ids, query_pos=11, method="reference")
    assert sw.d.shape[-1] == 11 and sw.pairs.shape == (55, 2)


def test_blocks_fast_equals_reference(trained_number_model):
    ids = make_split("letter", "test", n=3).input_ids
    for blocks in (4, 5, [0, 8, 16], [(0, 3), (5, 8), (10, 13), (13, 14)]):
        f = _compare(trained_number_model, ids, blocks=blocks)
        assert f.blocks is not None
    # blocks=5 over 16 keys: sizes 4,3,3,3,3 -> only the 3-long blocks are swapped
    f = swap_attention(trained_number_model, ids, blocks=5)
    assert f.blocks == ((0, 4), (4, 7), (7, 10), (10, 13), (13, 16))
    assert set(map(tuple, f.pairs)) == {(a, b) for a in range(1, 5) for b in range(a + 1, 5)}
    # block masses and the query's own weight sum to one
    sw = swap_attention(trained_number_model, ids, blocks=[0, 8, 16])
    assert np.all(sw.d.sum(-1) < 1) and np.all(sw.d.sum(-1) > 0)
    res = scores_blocks_fast(trained_number_model, ids, blocks=4, query_pos=12)
    assert res.kind == "block" and res.blocks == {12: ((0, 3), (3, 6), (6, 9), (9, 12))}


def _llama_gqa():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation="eager")
    return LlamaForCausalLM(cfg).eval()


def _neox_partial():
    torch.manual_seed(0)
    cfg = GPTNeoXConfig(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        max_position_embeddings=64, rotary_pct=0.25, attn_implementation="eager")
    return GPTNeoXForCausalLM(cfg).eval()


def _gemma2_softcap_window():
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=50, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, max_position_embeddings=64, sliding_window=5,
                       attn_logit_softcapping=3.0, query_pre_attn_scalar=12, attn_implementation="eager")
    return Gemma2ForCausalLM(cfg).eval()


def _sharpen(model, std=0.3):
    return sharpen_qk(model, std)


@pytest.mark.parametrize("build", [_llama_gqa, _neox_partial, _gemma2_softcap_window],
                         ids=["llama-gqa", "neox-partial", "gemma2-softcap-window"])
def test_fast_equals_reference_llama_gqa_and_neox(build):
    model = _sharpen(build())
    ids = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0))
    f = _compare(model, ids)
    assert f.d.shape == (2, 2, 4, 11) and f.d.max() > 0.2
    _compare(model, ids, query_pos=8)
    _compare(model, ids, blocks=[(0, 3), (3, 6), (7, 10)])
    res = scores_blocks_fast(model, ids, blocks=[(0, 3), (3, 6), (7, 10)], taus=TAUS)
    ref = scores_blocks_reference(model, ids, blocks=[(0, 3), (3, 6), (7, 10)], taus=TAUS)
    _assert_same(res, ref)


@pytest.mark.parametrize("name", list(FAMILY_CONFIGS))
def test_fast_equals_reference_every_family(name):
    """Token and block scores, fast == literal re-run, on every supported family (docs/models.md):
    windows shorter than the prompt, per-layer RoPE, NoPE layers, q/k norms, fused projections.
    q/k std 0.25: with tau = 1e-4 the swap weights multiply the reference's float32 rounding (~3e-7
    on the raw attention) by 1e4, so sharper random heads can differ by ~1e-5 in the scores."""
    model = build_family(name, std=0.25)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    f = _compare(model, ids)
    assert f.d.shape == (2, 4, 4, 11) and f.d.max() > 0.2
    blocks = [(0, 3), (3, 6), (7, 10)]
    _compare(model, ids, blocks=blocks)
    _assert_same(scores_blocks_fast(model, ids, blocks=blocks, taus=TAUS),
                 scores_blocks_reference(model, ids, blocks=blocks, taus=TAUS))


def test_batching_modes_and_attention_implementation(paper_models):
    model = paper_models["number"]
    ids = make_split("number", "test", n=5).input_ids
    model.train()  # paper preset has dropout 0.1: scores run in eval mode and restore the flag
    a = scores_fast(model, ids, taus=TAUS, batch_size=2)
    b = scores_fast(model, ids, taus=TAUS, batch_size=64, layers=[3, 7])
    assert model.training
    np.testing.assert_allclose(a.s_pos[:, [3, 7]], b.s_pos, atol=1e-12)
    assert b.layers == (3, 7) and b.to_frame().layer.unique().tolist() == [3, 7]
    model.eval()
    h = head_scores(model, ids, taus=TAUS, layers=[3])
    np.testing.assert_allclose(h.s_sym, a.s_sym[:, [3]], atol=1e-12)


def test_fast_path_under_sdpa_and_reference_refuses_it():
    """The fast path reads q/k, so any attention implementation gives the same scores; the reference
    reads attention weights and refuses SDPA. (A Llama: GPT-J has no SDPA on transformers 5.17.)"""
    eager = build_family("llama")
    sdpa = build_family("llama")
    sdpa.set_attn_implementation("sdpa")
    assert sdpa.config._attn_implementation == "sdpa"
    ids = torch.randint(3, 128, (3, 12), generator=torch.Generator().manual_seed(0))
    np.testing.assert_allclose(scores_fast(sdpa, ids, taus=TAUS).s_pos, scores_fast(eager, ids, taus=TAUS).s_pos,
                               atol=1e-5)  # the layers below differ in float rounding only
    with pytest.raises(PosymError, match="eager"):
        scores_reference(sdpa, ids[:1], layers=[0])


def test_argument_errors(paper_models):
    model = paper_models["number"]
    ids = make_split("number", "test", n=2).input_ids
    with pytest.raises(PosymError, match="query_pos"):
        scores_fast(model, ids, query_pos=1)
    with pytest.raises(PosymError, match="query_pos"):
        scores_fast(model, ids, query_pos=17)
    with pytest.raises(PosymError, match="query_pos"):
        scores_fast(model, ids, query_pos=[16, 16, 16])
    with pytest.raises(PosymError, match="at least 3"):
        scores_fast(model, ids[:, :2])
    with pytest.raises(PosymError, match="layer"):
        scores_fast(model, ids, layers=[12])
    with pytest.raises(PosymError, match="equal length"):
        scores_blocks_fast(model, ids, blocks=[(0, 2), (2, 5), (5, 9)])
    with pytest.raises(PosymError, match="blocks"):
        scores_blocks_fast(model, ids, blocks=17)
    with pytest.raises(PosymError, match="within"):
        scores_blocks_fast(model, ids, blocks=[0, 8, 17])
    with pytest.raises(PosymError, match="disjoint"):
        scores_blocks_fast(model, ids, blocks=[(0, 4), (3, 7)])
    with pytest.raises(PosymError, match="method"):
        head_scores(model, ids, method="slow")
    with pytest.raises(PosymError, match="unsupported"):
        scores_fast(torch.nn.Linear(3, 3), ids)
