"""Prompts longer than the model's learned context (docs/spec.md §3, Long prompts): RoPE needs no
learned positions, so GPT-J's rotary table is extended for the call and restored exactly after; the
fast path equals the literal re-run there too."""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from posym.errors import PosymError
from posym.heads import scores_blocks_fast, scores_blocks_reference, scores_fast, scores_reference, swap_attention
from posym.model import build_model, model_config
from posym.model.adapters import get_adapter
from posym.model.gptj import rotary_tables
from head_builders import sharpen_qk

torch.set_num_threads(1)
TOL = 1e-5
TAUS = (1e-4, 1e-2)


def _same(a, b):
    for n in ("s_pos", "s_sym", "entropy", "swap_mass"):
        assert np.abs(getattr(a, n) - getattr(b, n)).max() <= TOL, n


def test_gptj_prompts_longer_than_n_positions_fast_equals_reference():
    model = sharpen_qk(build_model(model_config("quick", 50, n_layer=2, n_head=2, n_embd=64, rotary_dim=32, n_positions=16), seed=0))
    before = rotary_tables(model)
    ids = torch.randint(0, 50, (2, 24), generator=torch.Generator().manual_seed(0))
    with pytest.raises(PosymError, match="exceeds the model's 16 positions"):
        get_adapter(model).check_ids(ids)  # outside the scores, the adapter's check still holds
    fast = scores_fast(model, ids, taus=TAUS, query_pos=np.array([23, 20]))
    ref = scores_reference(model, ids, taus=TAUS, query_pos=np.array([23, 20]))
    _same(fast, ref)
    assert fast.s_pos.shape == (2, 2, 2, 2) and np.isfinite(fast.s_pos).all()
    _same(scores_blocks_fast(model, ids, blocks=[(0, 5), (5, 10), (15, 20)]),
          scores_blocks_reference(model, ids, blocks=[(0, 5), (5, 10), (15, 20)]))
    sw = swap_attention(model, ids, exclude_keys=(0,))
    assert sw.d.shape == (2, 2, 2, 23) and sw.d.max() > 0.2
    # restored exactly: the same table objects, 16 rows, config unchanged
    after = rotary_tables(model)
    assert [id(t) for t in after] == [id(t) for t in before] and after[0].shape[0] == 16
    assert model.config.n_positions == 16
    # the first 16 positions score as they did before the extension existed
    short = scores_fast(model, ids[:, :16], taus=TAUS)
    np.testing.assert_array_equal(short.s_pos, scores_fast(model, ids, taus=TAUS, query_pos=15).s_pos)


def test_llama_beyond_max_position_embeddings():
    """Families that compute the rotary on the fly need no extension (no cap on the length)."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=8, attn_implementation="eager")
    model = sharpen_qk(LlamaForCausalLM(cfg).eval())
    ids = torch.randint(0, 50, (1, 14), generator=torch.Generator().manual_seed(1))
    _same(scores_fast(model, ids, taus=TAUS), scores_reference(model, ids, taus=TAUS))
