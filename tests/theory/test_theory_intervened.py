"""The constructions under inference-time interventions (posym.theory.intervened): identity parameters
give Δ(n) bit for bit, temperature is the closed form s(n)·Δ, a moved rotation equals the real module
with that rotation (brute force over every input), a dropped frequency gives uniform attention."""

import math

import numpy as np
import pytest
import torch

from posym.errors import PosymError
from posym.model import rope
from posym.theory.constructions import (
    IndexConstruction,
    RetrievalConstruction,
    all_sequences,
    retrieval_function,
    retrieval_parts,
)
from posym.theory.discrepancy import discrepancy_table
from posym.theory.intervened import (
    Effect,
    construction_beta,
    frequency_id,
    index_under,
    intervened_table,
    retrieval_under,
    rope_ratio,
)
from posym.verbs.theory import intervention_effects, rope_frame

torch.set_num_threads(1)

D, BASE = 128, 10000.0
IDENTITY = ["temperature:beta=0", "rope-base:theta=10000", "ntk:kappa=1", "interpolate:factor=1",
            "freq-mask:keep=" + "+".join(str(i) for i in range(1, 65))]


def test_identity_parameters_give_the_untouched_delta_bit_for_bit():
    effects = intervention_effects(IDENTITY)
    assert list(effects)[0] == "none" and len(effects) == 1 + len(IDENTITY)
    table = intervened_table(effects, range(2, 101), rotary_dim=D, base=BASE, n0=17)
    ref = discrepancy_table(n_max=100)
    for name, g in table.groupby("intervention"):
        for mech in ("index", "retrieval"):
            mine = g[g["mechanism"] == mech].sort_values("n")["delta"].to_numpy()
            assert np.array_equal(mine, ref[ref["mechanism"] == mech]["delta"].to_numpy()), (name, mech)
    weights = table.pivot_table(index=["mechanism", "n"], columns="intervention", values="weight")
    assert (weights.to_numpy() == weights[["none"]].to_numpy()).all()


def test_temperature_is_the_closed_form_scaled_margin():
    """Δ under temperature = s(n)·Δ of the untouched construction, s(n) = max(1, 1 + β·ln(n/17)) (floored,
    the default) or 1 + β·ln(n/17) (floor=0); the weight is the softmax of the scaled logits."""
    lengths = [2, 5, 17, 40, 117, 300, 1017]
    t = intervened_table(intervention_effects(["temperature:beta=2", "temperature:beta=2,floor=0",
                                               "temperature:beta=0.5,form=ssmax"]), lengths,
                         rotary_dim=D, base=BASE, n0=17)
    none = t[t["intervention"] == "none"].set_index(["mechanism", "n"])
    for name, s_of in (("temperature:beta=2,n_train=17,floor=0", lambda n: 1 + 2 * math.log(n / 17)),
                       ("temperature:beta=2,n_train=17,floor=1", lambda n: max(1.0, 1 + 2 * math.log(n / 17))),
                       ("temperature:beta=0.5,n_train=17,form=ssmax", lambda n: 0.5 * math.log(n))):
        g = t[t["intervention"] == name].set_index(["mechanism", "n"])
        for (mech, n), row in g.iterrows():
            s = s_of(n)
            assert row["logit_scale"] == pytest.approx(s, rel=1e-14)
            if s >= 0:
                assert row["delta"] == pytest.approx(s * none.loc[(mech, n), "delta"], rel=1e-9, abs=1e-15)
    # unfloored, a negative scale (n < 17·e^(-1/2) at β = 2) flips the logits: the correct key loses
    g = t[t["intervention"] == "temperature:beta=2,n_train=17,floor=0"].set_index(["mechanism", "n"])
    assert g.loc[("index", 5), "logit_scale"] < 0 and g.loc[("index", 5), "delta"] < 0
    # floored, the short lengths are the untouched construction exactly
    g = t[t["intervention"] == "temperature:beta=2,n_train=17,floor=1"].set_index(["mechanism", "n"])
    for mech in ("index", "retrieval"):
        for n in (2, 5, 17):
            assert g.loc[(mech, n), "delta"] == none.loc[(mech, n), "delta"]
            assert g.loc[(mech, n), "weight"] == none.loc[(mech, n), "weight"]


def test_temperature_weight_is_the_softmax_of_the_scaled_logits():
    """The worst weight under a logit scale s is the real module's at inverse temperature s·β."""
    for n in range(2, 8):
        model = IndexConstruction(n0=7, theta=0.8, n_letters=2, n_integers=6)
        beta = model.beta
        model.beta = 1.7 * beta
        _, w = _index_brute(model, n, torch.arange(n, dtype=torch.float64))
        assert index_under(n, 0.8, logit_scale=1.7, beta=beta)[1] == pytest.approx(w, abs=1e-12)


def _index_brute(model: IndexConstruction, n: int, positions: torch.Tensor) -> tuple[float, float]:
    """Worst margin and weight of the correct key over every input of length n, from the module's own
    weights with the rotation evaluated at ``positions`` (the module's θ may be moved beforehand)."""
    letters = [model.n_integers + 1, model.n_integers + 2]
    x = all_sequences([letters + list(range(1, j + 1)) for j in range(n)])
    ids = model._token_ids(x)
    cos, sin = rope.cos_sin(positions, torch.tensor([model.theta], dtype=torch.float64), "interleaved")
    q = rope.apply_rotary((model.embed @ model.w_q)[ids], cos, sin, "interleaved")[:, -1]
    k = rope.apply_rotary((model.embed @ model.w_k)[ids], cos, sin, "interleaved")
    logits = torch.einsum("bd,bjd->bj", q, k)
    last = x[:, -1]
    correct = torch.where(last <= model.n_integers, n - 1 - last, torch.full_like(last, n - 1))
    c = logits.gather(1, correct[:, None])[:, 0]
    others = logits.scatter(1, correct[:, None], float("-inf"))
    w = torch.softmax(model.beta * logits, -1).gather(1, correct[:, None])[:, 0]
    return float((c - others.max(1).values).min()), float(w.min())


@pytest.mark.parametrize("r", [1.0, 0.97, 0.5, 1.3])
def test_index_moved_rotation_equals_the_module_by_brute_force(r):
    """A base change (rotation θ → rθ, weights kept) and interpolation (positions × r) of the real
    Index module: the enumeration over v′ equals every input's worst case."""
    theta = 0.8
    for n in range(2, 8):
        model = IndexConstruction(n0=7, theta=theta, n_letters=2, n_integers=6)
        beta = model.beta
        interp = _index_brute(model, n, torch.arange(n, dtype=torch.float64) * r)
        model.theta = r * theta  # the rotation only: W_Q still encodes u(-v'θ)
        moved = _index_brute(model, n, torch.arange(n, dtype=torch.float64))
        d, w = index_under(n, theta, rope_scale=r, beta=beta)
        assert moved == pytest.approx((d, w), abs=1e-12) and interp == pytest.approx((d, w), abs=1e-12)


def test_retrieval_base_change_is_the_construction_with_the_moved_theta():
    """Retrieval's weights encode letters only: a rotation scaled by r is the construction at θ′ = rθ
    (and, inside θ′ < ω/(2n), its Δ(n) of the discrepancy table)."""
    theta = 0.0027
    r = rope_ratio(42, D, BASE, 40000.0)
    beta = construction_beta("retrieval", theta, 8, 17)
    for n in (2, 17, 100, 140):
        moved = retrieval_under(n, theta, rope_scale=r, beta=beta)
        direct = retrieval_under(n, r * theta, beta=beta)
        assert moved == pytest.approx(direct, rel=1e-12, abs=1e-15)
    ref = discrepancy_table(theta_retrieval=r * theta, n_max=140)
    ref = ref[ref["mechanism"] == "retrieval"]
    ours = [retrieval_under(int(n), r * theta)[0] for n in ref["n"]]
    assert np.allclose(ours, ref["delta"], atol=1e-14)


def test_retrieval_brute_force_with_moved_rotation():
    """Worst correct-key margin and weight over every valid input of a small alphabet, from the module with
    its rotation moved (past θ < ω/(2n) too: the margin turns negative)."""
    A, K = 3, 1
    V = 1 + A * K + A * A
    for n in (3, 4):
        theta = 0.9 * (2 * math.pi / A) / (2 * n)
        model = RetrievalConstruction(n0=n, theta=theta, n_letters=A, n_numbers=K)
        x = all_sequences([range(1, V)] * (n - 1) + [range(1 + A * K, V)])
        x = x[retrieval_function(x, A, K)[1]]
        _, left, right = retrieval_parts(x, A, K)
        j = (left[:, :-1] == right[:, -1:]).float().argmax(1)  # the unique earlier key with the query's right letter
        for r in (1.0, 3.0, 0.4):
            model.theta = r * theta
            logits = model.scores(x)[:, -1]
            c = logits.gather(1, j[:, None])[:, 0]
            others = logits.scatter(1, j[:, None], float("-inf"))
            w = torch.softmax(model.beta * logits, -1).gather(1, j[:, None])[:, 0]
            d, wt = retrieval_under(n, theta, A, rope_scale=r, beta=model.beta)
            assert float((c - others.max(1).values).min()) == pytest.approx(d, abs=1e-12)
            assert float(w.min()) == pytest.approx(wt, abs=1e-12)
            assert r < 3.0 or d < 0


def test_dropped_frequency_gives_uniform_attention():
    keep_fast = "freq-mask:keep=" + "+".join(str(i) for i in range(1, 33))  # drops ID 42 (Retrieval's θ)
    t = intervened_table(intervention_effects([keep_fast, "freq-mask:keep=none"]), [17, 117], rotary_dim=D, base=BASE, n0=17)
    for name, g in t.groupby("intervention"):
        for _, row in g.iterrows():
            dropped = name == "freq-mask:keep=none" or (name == keep_fast and row["mechanism"] == "retrieval")
            assert row["kept"] == (not dropped)
            if dropped:
                assert row["delta"] == 0 and row["weight"] == pytest.approx(1 / row["n"], rel=1e-12)
            else:
                assert row["weight"] > 1 / row["n"]


def test_frequency_ids_and_base_ratios():
    assert rope_frame() == (D, BASE)
    assert frequency_id(0.8, D, BASE) == 3 and frequency_id(0.0027, D, BASE) == 42
    assert rope_ratio(3, D, BASE, BASE) == 1.0 and rope_ratio(1, D, BASE, 1e6) == 1.0
    eff = intervention_effects(["ntk:kappa=2", "ntk:kappa=4", "rope-base:theta=20000", "ntk:kappa=8"])
    t = intervened_table(eff, [17], rotary_dim=D, base=BASE, n0=17).set_index(["intervention", "mechanism"])
    for mech, i in (("index", 3), ("retrieval", 42)):
        for kappa in (2, 4, 8):  # each from the model's base, whatever came before
            assert t.loc[(f"ntk:kappa={kappa}", mech), "rope_scale"] == pytest.approx(
                kappa ** (-2 * (i - 1) / (D - 2)), rel=1e-12)
        assert t.loc[("rope-base:theta=20000", mech), "rope_scale"] == pytest.approx(2 ** (-2 * (i - 1) / D))


def test_interpolation_scales():
    t = intervened_table(intervention_effects(["interpolate:n_train=17", "interpolate:factor=4"]), [10, 17, 170],
                         rotary_dim=D, base=BASE, n0=17).set_index(["intervention", "mechanism", "n"])
    assert t.loc[("interpolate:n_train=17", "index", 10), "rope_scale"] == 1.0
    assert t.loc[("interpolate:n_train=17", "retrieval", 170), "rope_scale"] == pytest.approx(0.1)
    assert t.loc[("interpolate:factor=4", "index", 10), "rope_scale"] == 0.25
    # dynamic interpolation keeps Retrieval's angles within 17θ: its margin stays >= cos 17θ - cos(ω - 17θ)
    theta, omega = 0.0027, 2 * math.pi / 8
    floor = math.cos(17 * theta) - math.cos(omega - 17 * theta)
    assert t.loc[("interpolate:n_train=17", "retrieval", 170), "delta"] >= floor
    assert t.loc[("none", "retrieval", 170), "delta"] < floor


@pytest.mark.parametrize("spec, needle", [
    ("temperature:beta=1,layers=0", "one head"),
    ("freq-mask:keep=1+99", "1..64"),
    ("interpolate:factor=0", "must be finite and >= 1"),
    ("interpolate:factor=2,n_train=17", "exactly one of"),
    ("bogus:x=1", "unknown intervention"),
])
def test_bad_interventions_are_one_line_errors(spec, needle):
    with pytest.raises(PosymError, match=needle):
        intervention_effects([spec])
    with pytest.raises(PosymError, match="repeats"):
        intervention_effects(["ntk:kappa=2", "ntk:kappa=2.0"])
    assert list(intervention_effects(["none", "ntk:kappa=2"])) == ["none", "ntk:kappa=2"]


def test_effect_scale_must_match_lengths():
    with pytest.raises(PosymError, match="one finite factor"):
        intervened_table({"x": Effect(logit_scale=lambda ns: np.ones(1))}, [17, 18], rotary_dim=D, base=BASE, n0=17)
    with pytest.raises(PosymError, match="integers >= 2"):
        intervened_table({"none": Effect()}, [1, 17], rotary_dim=D, base=BASE, n0=17)


def test_cli_intervene_writes_the_table_and_keeps_fig5a(tmp_path, capsys):
    """``posym theory discrepancy --intervene`` adds discrepancy_interventions.csv (+ figure) with an
    ``intervention`` column (``none`` first) and leaves discrepancy.csv as without it; a bad spec is a
    one-line error before anything is written."""
    import pandas as pd

    from posym.cli import main

    plain, under = tmp_path / "plain", tmp_path / "under"
    assert main(["theory", "discrepancy", "--out", str(plain), "--n-max", "30"]) == 0
    assert not (plain / "discrepancy_interventions.csv").exists()
    assert main(["theory", "discrepancy", "--out", str(under), "--n-max", "30", "--intervene", "temperature:beta=1",
                 "--intervene", "ntk:kappa=4", "--lengths", "17,117"]) == 0
    assert "theory under interventions" in capsys.readouterr().out
    assert (plain / "discrepancy.csv").read_bytes() == (under / "discrepancy.csv").read_bytes()
    t = pd.read_csv(under / "discrepancy_interventions.csv")
    assert list(dict.fromkeys(t["intervention"])) == ["none", "temperature:beta=1,n_train=17,floor=1", "ntk:kappa=4"]
    assert set(t["n"]) == {17, 117} and set(t["mechanism"]) == {"index", "retrieval"} and len(t) == 12
    assert (under / "discrepancy_interventions.png").exists()
    for argv, needle in ((["--intervene", "ntk:kappa=0.5"], "kappa"),
                         (["--theta-index", "0", "--intervene", "ntk:kappa=2"], "positive"),
                         (["--lengths", "17,117"], "--intervene")):
        bad = tmp_path / "bad"
        assert main(["theory", "discrepancy", "--out", str(bad), *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("posym: error:") and needle in err and err.count("\n") == 1 and not bad.exists()


@pytest.mark.parametrize("spec", ["ntk:kappa=1e300", "ntk:kappa=1e29", "temperature:beta=1e308", "rope-base:theta=1e-300"])
def test_an_extreme_intervention_is_refused_before_fig5a_is_written(tmp_path, spec):
    """Probe W2: ``--intervene ntk:kappa=1e300`` wrote Fig. 5A and then refused."""
    from posym.errors import PosymError
    from posym.verbs.theory import discrepancy

    with pytest.raises(PosymError) as e:
        discrepancy(tmp_path / "t", n_max=30, intervene=[spec], lengths=[17, 117], progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "t").exists()


def test_a_refusal_while_computing_writes_nothing(tmp_path, monkeypatch):
    """Every table is computed before the first file is written, so a refusal in the intervened table
    leaves no Fig. 5A behind (and the corrected call needs no --force)."""
    import posym.theory.intervened as iv
    from posym.errors import PosymError
    from posym.verbs.theory import discrepancy

    def refuse(*a, **k):
        raise PosymError("refused")
    monkeypatch.setattr(iv, "intervened_table", refuse)
    with pytest.raises(PosymError, match="refused"):
        discrepancy(tmp_path / "t", n_max=30, intervene=["ntk:kappa=4"], lengths=[17, 117], progress=False)
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())
    monkeypatch.undo()
    discrepancy(tmp_path / "t", n_max=30, intervene=["ntk:kappa=4"], lengths=[17, 117], progress=False)


def test_figure_panels_and_legend():
    import pandas as pd

    from posym.report.theory_figures import plot_intervened, short_label

    keep = "freq-mask:keep=" + "+".join(str(i) for i in range(1, 33))
    assert short_label(keep) == "freq-mask:keep=1..32" and short_label("freq-mask:keep=1+3,layers=0+1") == \
        "freq-mask:keep=1+3,layers=0+1" and short_label("freq-mask:keep=1+2+3+7") == "freq-mask:keep=1..3+7"
    t = intervened_table(intervention_effects(["ntk:kappa=2", keep]), [17, 40, 117], rotary_dim=D, base=BASE, n0=17)
    fig = plot_intervened(t)
    axes = fig.get_axes()
    assert len(axes) == 4 and "Index" in axes[0].get_title() and "ID 42" in axes[1].get_title()
    assert [x.get_text() for x in fig.legends[0].get_texts()] == ["none", "ntk:kappa=2", "freq-mask:keep=1..32"]
    with pytest.raises(PosymError, match="lacks column"):
        plot_intervened(pd.DataFrame({"n": [1]}))


def test_index_max_offset_bounds_the_enumeration():
    """Offsets ≤ 16 (the number task's integers): the same worst case untouched (v′ = 0 is the worst), never
    a worse one under a moved rotation, and equal to the full enumeration while n ≤ 17."""
    beta = construction_beta("index", 0.8, 8, 17)
    for n in (5, 17, 60, 300):
        assert index_under(n, 0.8, max_offset=16, beta=beta)[0] == index_under(n, 0.8, beta=beta)[0]
        for r in (0.978, 0.5):
            bounded, full = index_under(n, 0.8, rope_scale=r, max_offset=16, beta=beta), \
                index_under(n, 0.8, rope_scale=r, beta=beta)
            assert bounded[0] >= full[0] and bounded[1] >= full[1]
            assert n > 17 or bounded == full
