"""Discrepancy Δ: the measuring function, exact Δ(n) of both constructions, Theorem 3.2, Fig. 5A."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.theory.constructions import IndexConstruction, RetrievalConstruction, all_sequences, retrieval_function
from posym.theory.discrepancy import (
    discrepancy_of_logits,
    index_bound,
    index_delta,
    retrieval_bound,
    retrieval_delta,
)

torch.set_num_threads(1)


def test_discrepancy_of_logits_basics():
    x = np.array([[3.0, 1.0, 2.0], [2.0, 2.0, 1.0], [1.0, 1.0, 1.0], [5.0, -np.inf, 4.5]])
    d = discrepancy_of_logits(x)
    assert np.allclose(d[:2], [1.0, 1.0]) and np.isinf(d[2]) and np.isclose(d[3], 0.5)
    t = discrepancy_of_logits(torch.tensor(x))
    assert isinstance(t, torch.Tensor) and torch.allclose(t[:2], torch.tensor([1.0, 1.0], dtype=torch.float64))
    causal = torch.ones(3, 3, dtype=torch.bool).tril()
    m = discrepancy_of_logits(torch.tensor([[0.0, 9.0, 9.0], [1.0, 3.0, 9.0], [1.0, 3.0, 2.0]]), mask=causal)
    assert math.isinf(m[0]) and m[1] == 2.0 and m[2] == 1.0
    assert np.isnan(discrepancy_of_logits(np.full((1, 3), -np.inf)))[0]


# ---- exact Δ(n) vs brute force over all inputs ------------------------------------------------------


def _last_query_deltas(model, x):
    return discrepancy_of_logits(model.scores(x)[:, -1, :])


@pytest.mark.parametrize("theta", [0.8, 0.3, 2.1])
def test_index_delta_equals_brute_force(theta):
    """min / max of Δ over every valid input (2 letters, integers 1..n-1) = the v'-enumeration."""
    model = IndexConstruction(n0=7, theta=theta, n_letters=2, n_integers=6)
    for n in range(2, 8):
        letters = [7, 8]
        x = all_sequences([letters + list(range(1, j + 1)) for j in range(n)])
        d = _last_query_deltas(model, x)
        assert np.isclose(d.min().item(), index_delta(n, theta), atol=1e-12)
        assert np.isclose(d.max().item(), index_delta(n, theta, worst=False), atol=1e-12)


@pytest.mark.parametrize("A,K,n_max,theta_frac", [(3, 1, 5, 0.9), (4, 1, 4, 0.5), (3, 2, 4, 0.99)])
def test_retrieval_delta_equals_brute_force(A, K, n_max, theta_frac):
    """min / max of Δ over every valid input whose last token is a query = the closed form."""
    omega = 2 * math.pi / A
    theta = theta_frac * omega / (2 * n_max)
    model = RetrievalConstruction(n0=n_max, theta=theta, n_letters=A, n_numbers=K)
    V = 1 + A * K + A * A
    for n in range(2, n_max + 1):
        x = all_sequences([range(1, V)] * (n - 1) + [range(1 + A * K, V)])
        x = x[retrieval_function(x, A, K)[1]]
        d = _last_query_deltas(model, x)
        assert np.isclose(d.min().item(), retrieval_delta(n, theta, A), atol=1e-12)
        assert np.isclose(d.max().item(), retrieval_delta(n, theta, A, worst=False), atol=1e-12)


def test_index_delta_closed_form_all_n():
    for theta in (0.8, 0.05, 1.0, 2 * math.pi / 101):
        for n in range(2, 101):
            d = np.arange(1, n)
            assert np.isclose(index_delta(n, theta), (1 - np.cos(d * theta)).min(), atol=1e-15)


# ---- Theorem 3.2 --------------------------------------------------------------------------------


@pytest.mark.parametrize("theta", [0.8, 0.05, 0.3, 1.0, 2.5, 2 * math.pi / 101, math.sqrt(2)])
def test_index_bound_holds(theta):
    for n in range(2, 101):
        assert index_delta(n, theta) <= index_bound(n, theta) + 1e-15


@pytest.mark.parametrize("A,theta", [(8, 0.0027), (8, 0.001), (8, 0.0039), (4, 0.0050), (16, 0.0019), (26, 0.0012)])
def test_retrieval_bound(A, theta):
    """The bound holds when n (>= 2) counts the tokens before the query (key distances up to n) and, with
    SPEC's length convention (query at n-1), up to the off-by-one: Δ(n) <= 1 - cos(ω - (n-1)θ) for n >= 3,
    and the excess over 1 - cos(ω - nθ) is <= 2θ sin ω."""
    omega = 2 * math.pi / A
    assert theta < omega / (2 * 100)
    for n in range(2, 100):
        assert retrieval_delta(n + 1, theta, A) <= retrieval_bound(n, theta, A) + 1e-15
    for n in range(2, 101):
        d = retrieval_delta(n, theta, A)
        assert n < 3 or d <= retrieval_bound(n - 1, theta, A) + 1e-15
        assert d - retrieval_bound(n, theta, A) <= 2 * theta * math.sin(omega) + 1e-15


def test_literal_max_reading_breaks_the_theorem():
    """Why Δ(n) is the worst case: the best input's margin exceeds the bounds."""
    assert retrieval_delta(40, 0.0027, 8, worst=False) > 1.9 > retrieval_bound(40, 0.0027, 8)
    assert index_delta(80, 0.8, worst=False) > index_bound(80, 0.8)


def test_retrieval_requires_small_theta():
    with pytest.raises(PosymError):
        retrieval_delta(100, 0.004, 8)  # ω/(2·100) ≈ 0.0039


# ---- Fig. 5A ------------------------------------------------------------------------------------


def test_fig5a_numbers(tmp_path):
    from posym.verbs.theory import discrepancy

    table = discrepancy(tmp_path, progress=False).table
    assert list(table.columns[:4]) == ["mechanism", "n", "delta", "bound"]
    assert (tmp_path / "discrepancy.png").stat().st_size > 0 and (tmp_path / "discrepancy.pdf").stat().st_size > 0
    back = pd.read_csv(tmp_path / "discrepancy.csv")
    assert len(back) == 2 * 99 and set(back["mechanism"]) == {"index", "retrieval"}
    ix = back[back.mechanism == "index"].set_index("n")
    rt = back[back.mechanism == "retrieval"].set_index("n")
    # SPEC Fig. 5A curves = the Theorem 3.2 bounds
    assert np.allclose(ix.loc[2:8, "bound"], 0.303, atol=0.01)
    assert abs(ix.loc[80, "bound"] - 0.003) < 0.001
    assert abs(rt.loc[2, "bound"] - 0.29) < 0.01 and abs(rt.loc[80, "bound"] - 0.16) < 0.01
    assert (rt["bound"].diff().dropna() < 0).all()
    # exact worst-case Δ
    assert np.allclose(ix.loc[2:7, "delta"], 1 - math.cos(0.8))
    assert abs(ix.loc[80, "delta"] - (1 - math.cos(55 * 0.8 - 14 * math.pi))) < 1e-12
    assert abs(rt.loc[2, "delta"] - (math.cos(0.0027) - math.cos(math.pi / 4))) < 1e-12
    assert (ix["delta"] <= ix["bound"] + 1e-15).all()
