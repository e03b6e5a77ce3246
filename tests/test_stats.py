"""Known-answer tests of posym.stats (docs/statistics.md): Benjamini-Hochberg against the worked
example of Benjamini & Hochberg (1995) and a literal loop, the bootstrap interval's coverage over
simulated draws, the matched-control p-value on hand-made nulls and its floor."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from posym.errors import PosymError
from posym.stats import (benjamini_hochberg, bh_reject, control_p_value, distinct_draws, fisher_combined, format_p,
                         paired_bootstrap)

#: Benjamini & Hochberg (1995), section 4: the 15 p-values of the worked example; at q = 0.05 the
#: step-up rule rejects the four smallest (Bonferroni only three).
BH1995 = [0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262,
          0.5719, 0.6528, 0.7590, 1.0000]


def bh_loop(p: list[float]) -> list[float]:
    """The literal definition: adjusted p_(i) = min(1, min over j >= i of m p_(j) / j), NaN passes."""
    idx = [i for i, x in enumerate(p) if not np.isnan(x)]
    srt = sorted(idx, key=lambda i: p[i])
    m = len(srt)
    out = [float("nan")] * len(p)
    for rank, i in enumerate(srt, start=1):
        out[i] = min(1.0, min(p[srt[j - 1]] * m / j for j in range(rank, m + 1)))
    return out


def test_bh_worked_example_of_1995():
    assert bh_reject(BH1995, q=0.05).tolist() == [True] * 4 + [False] * 11
    adj = benjamini_hochberg(BH1995)
    np.testing.assert_allclose(adj[:4], [0.0015, 0.003, 0.0095, 0.035625])
    np.testing.assert_allclose(adj[4:9], [0.0603, 0.0298 * 15 / 7, 0.0298 * 15 / 7, 0.0645, 0.0765])
    np.testing.assert_allclose(adj, bh_loop(BH1995))
    assert adj[-1] == 1.0


def test_bh_matches_the_loop_on_random_input_with_ties_and_nan():
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = np.round(rng.random(rng.integers(1, 30)) ** 2, 2)  # ties included
        p[rng.random(p.size) < 0.2] = np.nan
        adj = benjamini_hochberg(p)
        np.testing.assert_allclose(adj, bh_loop(p.tolist()), equal_nan=True)
        ok = ~np.isnan(p)
        assert (np.isnan(adj) == ~ok).all() and (adj[ok] >= p[ok] - 1e-15).all() and (adj[ok] <= 1).all()
        o = np.argsort(p[ok], kind="stable")
        assert (np.diff(adj[ok][o]) >= -1e-15).all()  # monotone in p
    assert np.isnan(benjamini_hochberg([np.nan, np.nan])).all() and benjamini_hochberg([]).size == 0


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="scipy not installed")
def test_bh_matches_scipy():
    from scipy.stats import false_discovery_control

    rng = np.random.default_rng(5)
    for _ in range(20):
        p = rng.random(rng.integers(1, 40)) ** 3
        np.testing.assert_allclose(benjamini_hochberg(p), false_discovery_control(p, method="bh"))
    np.testing.assert_allclose(benjamini_hochberg(BH1995), false_discovery_control(BH1995, method="bh"))


def test_bh_refuses_bad_input():
    for bad in ([0.1, 1.5], [-0.01], [[0.1, 0.2]], ["a"]):
        with pytest.raises(PosymError):
            benjamini_hochberg(bad)
    with pytest.raises(PosymError, match="q="):
        bh_reject([0.01], q=0)


def test_control_p_value_on_hand_made_nulls():
    null = np.array([0.0, 0.1, 0.2, 0.3, 0.5])
    assert control_p_value(0.4, null) == 2 / 6  # only 0.5 >= 0.4
    assert control_p_value(0.3, null) == 3 / 6  # ties count against the typed set
    assert control_p_value(-1.0, null) == 1.0
    assert control_p_value(0.9, null) == 1 / 6  # the floor 1 / (1 + K)
    assert control_p_value(0.3, null + 1e-14) == 3 / 6  # float noise of equal counts still ties
    # two-sided: twice the smaller tail, capped at 1
    assert control_p_value(0.9, null, two_sided=True) == 2 / 6
    assert control_p_value(-0.9, null, two_sided=True) == 2 / 6
    assert control_p_value(0.2, null, two_sided=True) == 1.0
    with pytest.raises(PosymError):
        control_p_value(float("nan"), null)
    with pytest.raises(PosymError):
        control_p_value(0.1, [])


def test_permutation_floor_and_format():
    for k in (9, 99, 999):
        null = np.zeros(k)
        p = control_p_value(1.0, null)
        assert p == 1 / (1 + k)
        assert format_p(p, k) == f"< {1 / k:.3g}"
    assert format_p(1 / 1001, 1000) == "< 0.001" and format_p(0.0123, 1000) == "0.0123"
    assert format_p(float("nan"), 10) == "nan"


def test_control_p_value_is_uniform_under_the_null():
    """Exchangeable effects: P(p <= alpha) <= alpha (a valid test), close to alpha for alpha on the grid."""
    rng = np.random.default_rng(11)
    k, reps = 19, 4000
    draws = rng.normal(size=(reps, k + 1))
    p = np.array([control_p_value(d[0], d[1:]) for d in draws])
    for alpha in (0.05, 0.1, 0.5):
        assert abs((p <= alpha).mean() - alpha) < 0.02


def test_paired_bootstrap_known_values():
    a, b = np.array([1, 1, 0, 1]), np.array([0, 1, 0, 0])
    diff, lo, hi = paired_bootstrap(a, b, n_boot=2000, seed=1)
    assert diff == 0.5 and 0 <= lo <= 0.5 <= hi <= 1
    assert paired_bootstrap(a, a) == (0.0, 0.0, 0.0)
    assert paired_bootstrap([3.0], [1.0]) == (2.0, 2.0, 2.0)
    assert paired_bootstrap(a, b, seed=7) == paired_bootstrap(a, b, seed=7)  # seeded
    # the chunked draw equals one literal loop over resamples with the same generator
    d = (a - b).astype(float)
    rng = np.random.default_rng(4)
    means = np.array([d[rng.integers(0, 4, size=(1, 4))].mean() for _ in range(300)])
    assert paired_bootstrap(a, b, n_boot=300, seed=4)[1:] == tuple(np.quantile(means, [0.025, 0.975]))


def test_paired_bootstrap_covers_the_true_difference_at_about_the_nominal_rate():
    """Binary outcomes of 60 prompts, correlated within a prompt: the 90 % interval holds the true mean
    difference (0.3) in about 90 % of 300 simulated studies (a loose band: percentile intervals of a mean
    under-cover slightly at this n)."""
    rng = np.random.default_rng(0)
    n, reps, hits = 60, 300, 0
    for r in range(reps):
        easy = rng.random(n) < 0.5  # shared prompt difficulty: the pairing matters
        a = (rng.random(n) < np.where(easy, 0.95, 0.65)).astype(float)
        b = (rng.random(n) < np.where(easy, 0.65, 0.35)).astype(float)
        _, lo, hi = paired_bootstrap(a, b, n_boot=400, seed=r, level=0.9)
        hits += lo <= 0.3 <= hi
    assert 0.82 <= hits / reps <= 0.96


def test_paired_bootstrap_refuses_bad_input():
    with pytest.raises(PosymError, match="one value per prompt"):
        paired_bootstrap([1, 0, 1], [1, 0])
    with pytest.raises(PosymError, match="NaN"):
        paired_bootstrap([1, np.nan], [1, 0])
    with pytest.raises(PosymError):
        paired_bootstrap([], [])
    with pytest.raises(PosymError, match="level"):
        paired_bootstrap([1], [0], level=1.0)
    with pytest.raises(PosymError, match="n_boot"):
        paired_bootstrap([1], [0], n_boot=0)


def test_fisher_combined_known_answers():
    """One p is itself; m = 2 in closed form; the χ² tail against SciPy where it is installed; a
    Monte-Carlo check that it is valid (uniform p -> P(combined <= 0.05) ~ 0.05); NaN ignored."""
    assert fisher_combined([0.3]) == pytest.approx(0.3, abs=1e-15)
    a, b = 0.04, 0.2  # m = 2: X/2 = -ln(ab); p = ab (1 - ln(ab))
    assert fisher_combined([a, b]) == pytest.approx(a * b * (1 - np.log(a * b)), rel=1e-12)
    assert fisher_combined([1 / 21] * 3) == pytest.approx(0.0055982, abs=1e-7)  # chi2.sf(18.267, 6)
    assert fisher_combined([0.5, np.nan]) == pytest.approx(0.5) and np.isnan(fisher_combined([np.nan]))
    assert fisher_combined([0.0, 0.5]) == 0.0 and fisher_combined([1.0, 1.0]) == 1.0
    if importlib.util.find_spec("scipy") is not None:
        from scipy.stats import chi2

        ps = [0.01, 0.3, 0.7, 0.05]
        assert fisher_combined(ps) == pytest.approx(chi2.sf(-2 * np.log(ps).sum(), 8), rel=1e-10)
    rng = np.random.default_rng(0)
    draws = np.array([fisher_combined(u) for u in rng.uniform(size=(4000, 3))])
    assert abs((draws <= 0.05).mean() - 0.05) < 0.012
    with pytest.raises(PosymError):
        fisher_combined([1.5])


def test_distinct_draws_skip_repeats_and_the_seen_and_stop_at_the_guard():
    assert distinct_draws(lambda s: s % 3, 3, 0) == [(0, 0), (1, 1), (2, 2)]
    assert distinct_draws(lambda s: s % 3, 2, 5, seen=[2]) == [(6, 0), (7, 1)]  # 5 draws 2: seen
    assert distinct_draws(lambda s: s // 2, 2, 0) == [(0, 0), (2, 1)]  # seed 1 repeats 0
    with pytest.raises(PosymError, match="only three"):
        distinct_draws(lambda s: s % 3, 4, 0, error="only three")

