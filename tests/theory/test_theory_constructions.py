"""T_Index / T_Retrieval as real one-head RoPE attention modules compute the basic functions exactly."""

import math

import numpy as np
import pytest
import torch

from posym.errors import PosymError
from posym.tasks import LETTER_VOCAB, NUMBER_VOCAB, generate
from posym.theory.constructions import (
    IndexConstruction,
    RetrievalConstruction,
    StackedIndexModel,
    all_sequences,
    index_function,
    index_valid,
    random_index_inputs,
    random_retrieval_inputs,
    retrieval_function,
    retrieval_parts,
)

torch.set_num_threads(1)


def _index_inputs(n: int, n_letters: int, n_integers: int) -> torch.Tensor:
    letters = list(range(n_integers + 1, n_integers + 1 + n_letters))
    return all_sequences([letters + list(range(1, min(j, n_integers) + 1)) for j in range(n)])


# ---- Index ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("theta", [None, 0.8])
def test_index_exhaustive_small(theta):
    """Every valid input of every length <= 7 (2 letters, integers 1..6), all positions."""
    m = IndexConstruction(n0=7, theta=theta, n_letters=2, n_integers=6)
    total = 0
    for n in range(1, 8):
        x = _index_inputs(n, 2, 6)
        assert index_valid(x, 6).all()
        assert torch.equal(m.predict(x), index_function(x, 6))
        total += x.shape[0]
    assert total == sum(math.prod(2 + min(j, 6) for j in range(n)) for n in range(1, 8))


def test_index_random_fast():
    """Random valid inputs up to n0 = 64 (every prefix of a length-64 input is an input)."""
    m = IndexConstruction(n0=64, n_letters=10, n_integers=63)
    x = random_index_inputs(2000, 64, 10, 63, seed=1)
    assert index_valid(x, 63).all()
    assert torch.equal(m.predict(x), index_function(x, 63))


@pytest.mark.slow
def test_index_random_100k():
    for theta, seed, count in [(None, 2, 100_000), (0.8, 3, 20_000)]:
        m = IndexConstruction(n0=64, theta=theta, n_letters=10, n_integers=63)
        x = random_index_inputs(count, 64, 10, 63, seed=seed)
        assert torch.equal(m.predict(x), index_function(x, 63))


def test_index_logits_and_attention_mass():
    """Logit of key j seen from t is cos((t-j-v')θ); softmax weight outside the arg-max <= eps (Lemma F.1)."""
    theta = 0.37
    m = IndexConstruction(n0=20, theta=theta, n_letters=3, n_integers=19)
    x = random_index_inputs(200, 20, 3, 19, seed=5)
    s = m.scores(x)
    t = torch.arange(20, dtype=torch.float64)[:, None]
    j = torch.arange(20, dtype=torch.float64)[None, :]
    v = torch.where(x <= 19, x, torch.zeros_like(x)).double()  # v' (0 for letters)
    want = torch.cos((t - j - v[:, :, None]) * theta).masked_fill(j > t, float("-inf"))
    assert torch.allclose(s, want, atol=1e-12)
    _, att = m(x, return_attention=True)
    assert (1 - att.max(-1).values).max() <= m.EPS + 1e-12


def test_index_alphabet_is_number_vocab():
    m = IndexConstruction(n0=17)
    assert m.vocab_size == NUMBER_VOCAB.size
    toks = NUMBER_VOCAB.tokens
    assert toks[1] == "1" and toks[16] == "16" and toks[17] == "a"
    ids = torch.tensor([[17, 18, 2, 1, 3]])  # a b 2 1 3 -> a b a 1 b (1 points to an integer)
    assert index_function(ids, 16).tolist() == [[17, 18, 17, 1, 18]]
    assert m.predict(ids).tolist() == [[17, 18, 17, 1, 18]]


@pytest.mark.parametrize("hops", [1, 2, 3, 4])
def test_stacked_index_solves_number_task(hops):
    b = generate("number", 400, seed=7, hops=hops)
    model = StackedIndexModel(hops, layers=hops + 1)  # Reflexive^(l-h) ∘ Index^h
    assert np.array_equal(model.predict(b.input_ids).numpy(), b.labels)
    if hops > 1:  # one Index layer too few does not reach the answer
        short = StackedIndexModel(hops - 1, layers=hops + 1)
        assert (short.predict(b.input_ids).numpy() == b.labels).mean() < 0.5


def test_stacked_index_twelve_layers_mixed_hops():
    b = generate("number", 400, seed=3)  # hops 1..4
    model = StackedIndexModel(4, layers=12)
    assert model.n_layers == 12
    assert np.array_equal(model.predict(b.input_ids).numpy(), b.labels)


def test_index_errors():
    with pytest.raises(PosymError):
        IndexConstruction(n0=3, theta=math.pi)  # 2θ ≡ 0 (mod 2π): tied arg-max
    with pytest.raises(PosymError):
        IndexConstruction(n0=5).predict(torch.tensor([[500]]))
    with pytest.raises(PosymError):
        StackedIndexModel(3, layers=2)


# ---- Retrieval ------------------------------------------------------------------------------------


@pytest.mark.parametrize("A,K,n_max,theta_frac", [(3, 1, 5, 0.3), (3, 2, 4, 0.99), (4, 1, 4, 0.99)])
def test_retrieval_exhaustive_small(A, K, n_max, theta_frac):
    """Every valid input of every length <= n_max, all positions (θ up to 0.99·ω/(2 n0))."""
    omega = 2 * math.pi / A
    m = RetrievalConstruction(n0=n_max, theta=theta_frac * omega / (2 * n_max), n_letters=A, n_numbers=K)
    V = 1 + A * K + A * A
    seen_queries = 0
    for n in range(1, n_max + 1):
        x = all_sequences([range(1, V)] * n)
        ref, valid = retrieval_function(x, A, K)
        x, ref = x[valid], ref[valid]
        assert torch.equal(m.predict(x), ref)
        seen_queries += int(retrieval_parts(x, A, K)[0].sum())
    assert seen_queries > 1000


def test_retrieval_random_fast():
    for A, K, seed in [(8, 8, 1), (12, 2, 2)]:
        m = RetrievalConstruction(n0=64, theta=0.9 * (2 * math.pi / A) / 128, n_letters=A, n_numbers=K)
        x = random_retrieval_inputs(1000, 64, A, K, seed=seed)
        ref, valid = retrieval_function(x, A, K)
        assert valid.all()
        assert retrieval_parts(x, A, K)[0].float().mean() > 0.2  # many letter-letter queries
        assert torch.equal(m.predict(x), ref)


@pytest.mark.slow
def test_retrieval_random_100k():
    for A, K, theta, seed, count in [(8, 8, 0.0027, 3, 100_000), (8, 8, 0.0061, 4, 20_000), (16, 2, 0.0030, 5, 20_000)]:
        m = RetrievalConstruction(n0=64, theta=theta, n_letters=A, n_numbers=K)
        x = random_retrieval_inputs(count, 64, A, K, seed=seed)
        ref, valid = retrieval_function(x, A, K)
        assert valid.all()
        assert torch.equal(m.predict(x), ref)


def test_retrieval_logits_and_attention_mass():
    A, theta = 8, 0.004
    m = RetrievalConstruction(n0=40, theta=theta)
    x = random_retrieval_inputs(200, 40, A, 8, seed=9)
    is_ll, left, right = retrieval_parts(x)
    omega = 2 * math.pi / A
    t = torch.arange(40, dtype=torch.float64)[:, None]
    j = torch.arange(40, dtype=torch.float64)[None, :]
    want = torch.cos((left[:, None, :] - right[:, :, None]).double() * omega + (t - j) * theta)
    s = m.scores(x)
    sel = is_ll[:, :, None] & (j <= t)[None]
    assert torch.allclose(s[sel], want[sel], atol=1e-12)
    _, att = m(x, return_attention=True)
    outside = 1 - att.max(-1).values
    assert outside[is_ll].max() <= m.EPS + 1e-12


def test_retrieval_alphabet_is_letter_vocab_and_one_hop_letter_task():
    m = RetrievalConstruction(n0=17)
    assert m.vocab_size == LETTER_VOCAB.size
    is_ll, left, right = retrieval_parts(torch.arange(1, LETTER_VOCAB.size))
    for i, tok in enumerate(LETTER_VOCAB.tokens[1:]):
        assert tok[0] == "abcdefgh"[int(left[i])]
        assert bool(is_ll[i]) == tok[1].isalpha()
        if is_ll[i]:
            assert tok[1] == "abcdefgh"[int(right[i])]
    b = generate("letter", 500, seed=1, hops=1)
    assert np.array_equal(m.predict(b.input_ids)[:, -1].numpy(), b.labels)


def test_retrieval_errors():
    with pytest.raises(PosymError):
        RetrievalConstruction(n0=64, theta=0.01)  # ω/(2·64) ≈ 0.0061
