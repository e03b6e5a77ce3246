"""Per-prompt readings (docs/spec.md, "Classic head detectors and per-prompt readings"): exact
fractions on constructed HeadScores, bootstrap intervals over prompts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.heads.prompt_readings import STATS, bootstrap_means, per_prompt_kinds, prompt_kinds
from posym.heads.scores import HeadScores


def _scores(s_pos, s_sym, mass=None, entropy=None, taus=(1e-4,)) -> HeadScores:
    """HeadScores of one layer (layer 3) from per-prompt values [B, H] (same for every τ)."""
    sp = np.asarray(s_pos, float)[:, None, :, None].repeat(len(taus), -1)
    ss = np.asarray(s_sym, float)[:, None, :, None].repeat(len(taus), -1)
    B, _, H, _ = sp.shape
    ent = np.full((B, 1, H), 0.5) if entropy is None else np.asarray(entropy, float)[:, None, :]
    ms = None if mass is None else np.asarray(mass, float)[:, None, :]
    return HeadScores(s_pos=sp, s_sym=ss, entropy=ent, taus=tuple(taus), layers=(3,),
                      query_pos=np.full(B, 9), swap_mass=ms)


# head 0: positional on prompts 0, 1; symbolic on 2; mixed on 3 (0.5, 0.5)
# head 1: symbolic on every prompt, but prompt 3 has almost no mass on the swapped keys
S_POS = [[1.0, 0.0], [0.95, 0.05], [0.0, 0.1], [0.5, 0.0]]
S_SYM = [[0.0, 1.0], [0.02, 0.98], [1.0, 0.9], [0.5, 1.0]]
MASS = [[0.5, 0.4], [0.6, 0.3], [0.4, 0.2], [0.5, 0.001]]


def test_exact_fractions():
    r = per_prompt_kinds(_scores(S_POS, S_SYM, MASS), gamma=0.1, min_mass=0.01, n_boot=50)
    h0, h1 = r.iloc[0], r.iloc[1]
    assert r[["layer", "head", "n_prompts"]].to_numpy().tolist() == [[3, 0, 4], [3, 1, 4]]
    assert (h0.frac_positional, h0.frac_symbolic, h0.frac_mixed, h0.frac_uninformative) == (0.5, 0.25, 0.25, 0.0)
    assert (h1.frac_positional, h1.frac_symbolic, h1.frac_mixed, h1.frac_uninformative) == (0.0, 0.75, 0.0, 0.25)
    assert h0.s_pos == pytest.approx(np.mean([1.0, 0.95, 0.0, 0.5]))  # the mean over all prompts
    assert h1.swap_mass == pytest.approx(np.mean([0.4, 0.3, 0.2, 0.001]))
    # no mass floor: prompt 3 of head 1 is symbolic again
    r0 = per_prompt_kinds(_scores(S_POS, S_SYM, MASS), n_boot=50)
    assert r0.iloc[1].frac_symbolic == 1.0 and r0.iloc[1].frac_uninformative == 0.0
    # a stricter γ turns prompt 1 of head 0 (0.95, 0.02) mixed
    assert per_prompt_kinds(_scores(S_POS, S_SYM, MASS), gamma=0.01, n_boot=50).iloc[0].frac_positional == 0.25


def test_columns_and_fractions_sum_to_one():
    r = per_prompt_kinds(_scores(S_POS, S_SYM, MASS), n_boot=20)
    assert list(r.columns[:6]) == ["layer", "head", "tau", "n_prompts", "gamma", "min_mass"]
    for s in STATS:
        assert {s, f"{s}_lo", f"{s}_hi"} <= set(r.columns)
    assert np.allclose(r[[c for c in r.columns if c.startswith("frac_") and c.count("_") == 1]].sum(axis=1), 1.0)


def test_interval_contains_the_mean_and_shrinks_with_more_prompts():
    rng = np.random.default_rng(0)

    def draw(B):  # a head positional on ~40 % of prompts, symbolic on the rest
        pos = rng.random(B) < 0.4
        return _scores(np.where(pos, 1.0, 0.0)[:, None], np.where(pos, 0.0, 1.0)[:, None])

    widths = []
    for B in (20, 500):
        r = per_prompt_kinds(draw(B), n_boot=2000, seed=1).iloc[0]
        for s in ("frac_positional", "frac_symbolic", "s_pos", "s_sym"):
            assert r[f"{s}_lo"] <= r[s] <= r[f"{s}_hi"]
        assert r["frac_positional_lo"] < r["frac_positional_hi"]
        widths.append(r["frac_positional_hi"] - r["frac_positional_lo"])
    assert widths[1] < widths[0] / 3  # ~1/sqrt(25) = 1/5 of the width


def test_bootstrap_is_seeded_and_degenerate_for_constant_values():
    x = np.random.default_rng(0).random((30, 2, 3))
    assert np.array_equal(bootstrap_means(x, 100, seed=4)[0], bootstrap_means(x, 100, seed=4)[0])
    lo, hi = bootstrap_means(np.ones((10, 2)), 100)
    assert np.allclose(lo, 1.0) and np.allclose(hi, 1.0)
    # the percentile interval of the mean of a 0/1 column: close to the binomial ±1.96·sqrt(p(1-p)/B)
    b = (np.arange(400) % 4 == 0).astype(float)[:, None]  # p = 0.25
    lo, hi = bootstrap_means(b, 4000, seed=0)
    half = 1.96 * np.sqrt(0.25 * 0.75 / 400)
    assert lo[0] == pytest.approx(0.25 - half, abs=0.01) and hi[0] == pytest.approx(0.25 + half, abs=0.01)


def test_tau_index_picks_the_tau():
    sc = _scores(S_POS, S_SYM, MASS, taus=(1e-4, 1e-2))
    sc.s_pos[..., 1] = 0.0
    sc.s_sym[..., 1] = 1.0
    assert per_prompt_kinds(sc, tau_index=1, n_boot=10).iloc[0].frac_symbolic == 1.0
    assert per_prompt_kinds(sc, tau_index=1, n_boot=10).iloc[0].tau == 1e-2


def test_prompt_kinds_precedence():
    k = prompt_kinds(np.array([1.0, 1.0, 0.5]), np.array([0.0, 0.0, 0.5]), np.array([0.5, 0.001, 0.001]),
                     min_mass=0.01)
    assert k.tolist() == ["positional", "uninformative", "uninformative"]
    assert prompt_kinds(np.array([np.nan, 0.0]), np.array([0.0, 1.0])).tolist() == ["uninformative", "symbolic"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(gamma=0.6), "gamma"), (dict(min_mass=2), "min_mass"), (dict(tau_index=1), "tau_index"),
    (dict(n_boot=0), "n_boot"),
])
def test_argument_errors(kwargs, match):
    with pytest.raises(PosymError, match=match):
        per_prompt_kinds(_scores(S_POS, S_SYM, MASS), **kwargs)


def test_refuses_a_mass_floor_without_mass_and_a_table():
    with pytest.raises(PosymError, match="swap mass"):
        per_prompt_kinds(_scores(S_POS, S_SYM), min_mass=0.01)
    with pytest.raises(PosymError, match="HeadScores"):
        per_prompt_kinds(pd.DataFrame({"s_pos": [1.0]}))
