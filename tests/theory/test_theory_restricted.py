"""Frequency-restricted heads: toy tasks and model, the restricted verb, GPT-J restrict_frequencies."""

import math

import pandas as pd
import pytest
import torch
from transformers import GPTJConfig, GPTJForCausalLM

from posym.errors import PosymError
from posym.model.adapters import get_adapter
from posym.model.gptj import rotary_table
from posym.theory.restricted import (
    RestrictedAttention,
    ToyConfig,
    band_frequencies,
    context_base,
    restrict_frequencies,
    toy_batch,
    train_toy,
    evaluate_toy,
)

torch.set_num_threads(1)


def test_bands():
    assert band_frequencies("high", 16) == {1, 2, 3, 4}
    assert band_frequencies("low", 16) == {13, 14, 15, 16}
    assert band_frequencies("all", 16) == set(range(1, 17))
    assert band_frequencies("low", 16, band_size=2) == {15, 16}
    with pytest.raises(PosymError):
        band_frequencies("mid", 16)
    b = context_base(16, 32)
    assert math.isclose(b ** (-30 / 32) * 16, 0.5)


@pytest.mark.parametrize("task", ["index", "retrieval"])
def test_toy_batch_labels(task):
    cfg = ToyConfig(task=task, n=10, n_symbols=7, n_keys=12)
    ids, labels, a = toy_batch(cfg, 500, torch.Generator().manual_seed(0))
    V, n_out = cfg.vocab()
    assert ids.shape == (500, 11) and ids.max() < V and labels.max() < n_out
    assert set(a.tolist()) == set(range(10))
    rows = torch.arange(500)
    if task == "index":
        assert torch.equal(ids[:, -1] - 7, a) and torch.equal(labels, ids[rows, a])
    else:
        keys, vals = ids[:, :-1] // 7, ids[:, :-1] % 7
        assert all(len(set(k.tolist())) == 10 for k in keys)  # distinct keys
        q = ids[:, -1] - 12 * 7
        assert torch.equal(keys[rows, a], q) and torch.equal(vals[rows, a], labels)


def _params(m):
    """Learned weights only (not the inv_freq / qk_mask buffers that encode the restriction)."""
    return dict(m.named_parameters())


@pytest.mark.parametrize("mode", ["prope", "drop"])
def test_no_frequency_is_position_free(mode):
    """keep = ∅: the model ignores the order of the context (permuting it leaves the output unchanged)."""
    torch.manual_seed(0)
    m = RestrictedAttention(30, 5, d_model=16, d_head=8, keep=set(), mode=mode)
    with torch.no_grad():
        m.embed.weight.mul_(30)  # sharp attention, so that positions would matter
    ids = torch.randint(30, (4, 9))
    perm = torch.cat([torch.randperm(8), torch.tensor([8])])
    assert torch.allclose(m(ids), m(ids[:, perm]), atol=1e-6)
    full = RestrictedAttention(30, 5, d_model=16, d_head=8, keep=None, mode=mode)
    full.load_state_dict(_params(m), strict=False)
    assert not torch.allclose(full(ids), full(ids[:, perm]), atol=1e-4)


def test_keep_all_same_in_both_modes():
    torch.manual_seed(0)
    a = RestrictedAttention(30, 5, d_model=16, d_head=8, keep={1, 2, 3, 4}, mode="prope")
    b = RestrictedAttention(30, 5, d_model=16, d_head=8, keep=None, mode="drop")
    b.load_state_dict(_params(a), strict=False)
    ids = torch.randint(30, (4, 9))
    assert torch.allclose(a(ids), b(ids), atol=1e-6)
    with pytest.raises(PosymError):
        RestrictedAttention(30, 5, d_model=16, d_head=8, keep={5})


def test_restricted_verb_tiny(tmp_path):
    from posym.verbs.theory import restricted

    table = restricted(tmp_path, steps=3, n=5, n_symbols=4, n_keys=6, d_model=16, d_head=8, band_size=1,
                       eval_per_pos=4, batch=8, progress=False).table
    assert list(table.columns[:5]) == ["task", "band", "mode", "answer_pos", "acc"]
    assert len(table) == 2 * 2 * 3 * 5
    back = pd.read_csv(tmp_path / "restricted.csv")
    assert back["acc"].between(0, 1).all() and set(back["band"]) == {"high", "low", "all"}
    assert (tmp_path / "restricted.png").exists() and (tmp_path / "restricted.pdf").exists()
    with pytest.raises(PosymError):
        restricted(tmp_path / "b", steps=1, bogus=1)
    with pytest.raises(PosymError, match="exists"):
        restricted(tmp_path, steps=1)


def test_train_toy_learns_index_quickly():
    cfg = ToyConfig(task="index", band="all", n=6, n_symbols=6, d_model=32, d_head=16, steps=300, batch=128,
                    eval_per_pos=64)
    model, info = train_toy(cfg)
    assert evaluate_toy(model, cfg)["acc"].mean() > 0.9


@pytest.mark.slow
def test_unrestricted_toys_solve_both_tasks():
    for task in ("index", "retrieval"):
        cfg = ToyConfig(task=task, band="all", steps=1500)
        model, _ = train_toy(cfg)
        assert evaluate_toy(model, cfg)["acc"].min() > 0.95


# ---- HF GPT-J -----------------------------------------------------------------------------------


def _tiny_gptj():
    cfg = GPTJConfig(vocab_size=23, n_positions=40, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_inner=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=False)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return GPTJForCausalLM(cfg).eval()


def _logits(model, ids, gap=0):
    """Logits with position ids ``0..T-1`` plus ``gap`` on the second half (changes relative distances)."""
    T = ids.shape[1]
    pos = (torch.arange(T) + gap * (torch.arange(T) >= T // 2))[None]
    with torch.no_grad():
        return model(input_ids=ids, position_ids=pos).logits


def test_restrict_frequencies_gptj():
    model = _tiny_gptj()
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.q_proj.weight.mul_(40)  # sharp attention, so that positions matter
    ids = torch.randint(23, (2, 12))
    table = rotary_table(model)
    orig, base = table.clone(), _logits(model, ids)
    assert not torch.allclose(base, _logits(model, ids, gap=7), atol=1e-4)
    # keep = all: no-op
    with restrict_frequencies(model, {1, 2, 3, 4}):
        assert torch.equal(table, orig) and torch.equal(_logits(model, ids), base)
    # keep = ∅: position-free (changing the relative positions does not change the logits)
    with restrict_frequencies(model, set()) as r:
        assert r.keep == set()
        assert (table[:, :4] == 0).all() and (table[:, 4:] == 1).all()
        assert torch.allclose(_logits(model, ids), _logits(model, ids, gap=7), atol=1e-5)
    assert torch.equal(table, orig)  # restored
    # keep = {1} through the adapter: only the fastest frequency still rotates
    r = restrict_frequencies(get_adapter(model), {1})
    assert torch.equal(table[:, [0, 4]], orig[:, [0, 4]]) and (table[:, 1:4] == 0).all()
    r.restore()
    assert torch.equal(table, orig)
    with pytest.raises(PosymError):
        restrict_frequencies(model, {5})
