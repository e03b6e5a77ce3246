"""The sensitivity study and the extrapolation prediction over reproduction variants."""

from __future__ import annotations

import math
import html
import shutil

import numpy as np
import pandas as pd
import pytest

from posym.cli import main
from posym.studies.sensitivity.tables import p_text, rank_correlation, sensitivity_markdown, sensitivity_table


def test_rank_correlation_exact_and_permutation():
    x = np.arange(5.0)
    r, p, m = rank_correlation(x, x ** 3)  # monotone: rho = 1, only 2 of 5! orderings are as extreme
    assert (r, m) == (1.0, 5) and p == pytest.approx(2 / 120)
    r, p, m = rank_correlation(x, -x)
    assert r == -1.0 and p == pytest.approx(2 / 120)
    r, p, m = rank_correlation(np.arange(12.0), np.arange(12.0), n_perm=2000)
    assert r == 1.0 and m == 12 and p == 1 / 2001  # no random order is as extreme: (0 + 1) / (2000 + 1)
    assert p_text(p) == "0.0005" and p_text(0.04) == "0.04" and p_text(0.004) == "0.004"
    assert math.isnan(rank_correlation([1.0, 2.0], [3.0, 4.0])[0])  # too few pairs
    r, _, m = rank_correlation([1, 2, np.nan, 4], [1, 3, 2, 5])  # NaN pairs are dropped
    assert m == 3 and r == 1.0


def test_prediction_findings_pooled_and_within_each_task():
    """rho over all models and within each task: here the tasks' correlations are opposite (+1, -1), the
    pooled one 1 - 6*8/(6*35) = 0.77; with 3 models |rho| = 1 has exact p = 2/6; a kind with too few
    finite pairs in a task is left out of it."""
    from posym.studies.sensitivity.tables import prediction_findings

    pred = pd.DataFrame({"task": ["number"] * 3 + ["letter"] * 3, "delta_symbolic": [1, 2, 3, 4, 5, 6],
                         "delta_positional": [1, 2, 3, np.nan, np.nan, np.nan],
                         "largest_09": [10, 20, 30, 300, 200, 100]})
    pos, sym = prediction_findings(pred)
    p_pooled = rank_correlation(pred.delta_symbolic, pred.largest_09)[1]
    assert sym == ("Δ of pure symbolic heads vs largest length >= 0.9, Spearman: all models rho 0.77 "
                   f"(p = {p_text(p_pooled)}, 6 models); number rho 1.00 (p = 0.33, 3); letter rho -1.00 (p = 0.33, 3)")
    assert pos.endswith("all models rho 1.00 (p = 0.33, 3 models); number rho 1.00 (p = 0.33, 3)")
    pred["largest_09"] = 30  # every reach equal: no rank correlation
    assert prediction_findings(pred)[1].endswith("letter rho undefined (one side constant)")


def test_sensitivity_of_two_variants(tiny_repro, tmp_path, capsys):
    a = tmp_path / "a"
    shutil.copytree(tiny_repro, a, symlinks=True)
    t = sensitivity_table({"A": tiny_repro, "B": a})
    assert set(t.variant) == {"A", "B"}
    for v in ("A", "B"):
        q = t[t.variant == v].quantity
        assert q.str.startswith("first step").any() and q.str.contains("heads").any()
        assert q.str.startswith("accuracy at +").any()
    md = sensitivity_markdown(t)
    assert md.splitlines()[0] == "| task | quantity | Paper A | A | B |"
    pd.testing.assert_frame_equal(t[t.variant == "A"].drop(columns="variant").reset_index(drop=True),
                                  t[t.variant == "B"].drop(columns="variant").reset_index(drop=True))
    out = tmp_path / "study"
    assert main(["sensitivity", f"A={tiny_repro}", f"B={a}", "--out", str(out), "--n", "8"]) == 0
    pred = pd.read_csv(out / "prediction.csv")
    assert len(pred) == 2 * 2 * 2  # 2 variants x 2 tasks x 2 seeds
    assert {"delta_positional", "delta_symbolic", "largest_09"} <= set(pred.columns)
    assert (out / "prediction.png").is_file() and (out / "sensitivity.md").is_file()
    curves = pd.read_csv(out / "fig5b_variants.csv")  # Fig. 5B of every variant, the aggregate's curve
    agg = pd.read_csv(tiny_repro / "aggregate" / "lengthgen.csv")
    assert set(curves.variant) == {"A", "B"} and len(curves) == 2 * len(agg)
    assert np.allclose(curves[curves.variant == "A"].acc_mean, agg.acc_mean)
    assert (out / "fig5b_variants.png").is_file()
    page = (out / "sensitivity.html").read_text()  # the study as an HTML page, figure embedded
    assert "Paper A vs the variants" in page and "Spearman: all models rho" in page and "data:image/png;base64," in page
    assert all(html.escape(md_row.split(" | ")[1]) in page for md_row in md.splitlines()[2:])
    a_rows = pred[pred.variant == "A"].drop(columns="variant").reset_index(drop=True)
    pd.testing.assert_frame_equal(a_rows, pred[pred.variant == "B"].drop(columns="variant").reset_index(drop=True))
    assert main(["sensitivity", f"A={tiny_repro}", "--out", str(out)]) == 2  # exists: --force
    assert main(["sensitivity", f"A={tmp_path}", "--out", str(tmp_path / "x")]) == 2  # not a reproduction
    (tmp_path / "afile").write_text("x")
    assert main(["sensitivity", f"A={tiny_repro}", "--no-predict", "--out", str(tmp_path / "afile" / "o")]) == 2
    assert "afile is a file" in capsys.readouterr().err


def test_a_fig5b_only_variant_from_lengthgen_tables(tiny_repro, tmp_path):
    """A variant given as `posym lengthgen` tables (another extra-token rule on the same models) adds its
    Fig. 5B rows, computed from those tables exactly as a reproduction's are; it has no models to predict
    from, so the prediction covers the reproduction variants only."""
    from posym.report.aggregate import curve_reach as largest_length_above

    tables = []
    for task in ("number", "letter"):
        csv = tmp_path / f"{task}-distractor.csv"
        assert main(["lengthgen", str(tiny_repro / task / "seed0"), "--grid", "0,50", "--n", "8",
                     "--extra-rule", "distractor", "--out", str(csv)]) == 0
        tables.append(csv)
    spec = ",".join(map(str, tables))
    t = sensitivity_table({"A": tiny_repro, "E": spec})
    e = t[t.variant == "E"]
    assert set(e.section) == {"Fig. 5B (length generalization)"} and set(e.task) == {"number", "letter"}
    summary = pd.read_csv(tmp_path / "letter-distractor_summary.csv")
    at50 = e[(e.task == "letter") & (e.quantity == "accuracy at +50 tokens")]
    assert float(at50.posym_mean.iloc[0]) == float(summary.loc[summary.extra_tokens == 50, "acc_mean"].iloc[0])
    largest = e[(e.task == "letter") & e.quantity.str.startswith("largest")]
    expected = largest_length_above(summary)
    got = float(largest.posym_mean.iloc[0])
    assert (math.isnan(got) and math.isnan(expected)) or got == expected
    assert e[e.quantity == "accuracy at +1000 tokens"].posym_mean.isna().all()  # not in this grid
    out = tmp_path / "study"
    assert main(["sensitivity", f"A={tiny_repro}", f"E={spec}", "--out", str(out), "--n", "8"]) == 0
    assert set(pd.read_csv(out / "prediction.csv").variant) == {"A"}
    curves = pd.read_csv(out / "fig5b_variants.csv")
    e_letter = curves[(curves.variant == "E") & (curves.task == "letter")]
    assert np.allclose(e_letter.sort_values("extra_tokens").acc_mean, summary.sort_values("extra_tokens").acc_mean)
    assert (out / "sensitivity.md").read_text().splitlines()[0] == "| task | quantity | Paper A | A | E |"
    assert main(["sensitivity", f"A={tiny_repro}", f"E={tmp_path / 'missing.csv'}", "--no-predict",
                 "--out", str(tmp_path / "s2")]) == 2


def test_prediction_checks_every_model_before_loading_one(repro_copy, monkeypatch):
    """A model without its analyses (e.g. a run still in progress) is named before any model is loaded."""
    import posym.runs.resolve as resolve
    from posym.errors import PosymError
    from posym.studies.sensitivity.tables import extrapolation_prediction
    from posym.runs import layout

    missing = repro_copy / "letter" / "seed1" / layout.summary_path(layout.LENGTHGEN)
    missing.unlink()

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before every model was checked")

    monkeypatch.setattr(resolve, "resolve_model", no_loading)
    with pytest.raises(PosymError, match=r"letter/seed1 lacks purity_gamma0\.1\.csv or lengthgen_summary\.csv"):
        extrapolation_prediction({"A": repro_copy}, n=4, progress=False)


def _lengthgen_table(path, points, weights="ab12", task="number"):
    """A `posym lengthgen --out` table and its summary: ``points`` {intervention: {extra: acc}} (two data seeds)."""
    from posym.lengthgen.trained import summarize_lengthgen

    rows = [{"task": task, "step": 30, "weights": weights, "extra_rule": "window", "distractors": "uniform",
             "intervention": iv, "extra_tokens": x, "seed": s, "n": 8, "acc": a,
             **{f"acc_hop{h}": a for h in range(1, 5)}, "seconds": 0.1, "peak_rss_mb": 100.0}
            for iv, pts in points.items() for x, a in pts.items() for s in (0, 1)]
    table = pd.DataFrame(rows)
    table.to_csv(path, index=False)
    summarize_lengthgen(table.drop(columns=["task", "step", "weights", "extra_rule", "distractors"])).to_csv(
        str(path).replace(".csv", "_summary.csv"), index=False)
    return path


def test_a_lengthgen_variant_of_two_interventions_shows_one(tmp_path, capsys):
    """B2: a table of `none` (1.0 at +0) and `ntk:kappa=4` (0.0) gave two unlabelled Fig. 5B rows per point."""
    t = _lengthgen_table(tmp_path / "T.csv", {"none": {0: 1.0, 50: 0.9}, "ntk:kappa=4": {0: 0.0, 50: 0.0}})
    table = sensitivity_table({"f": str(t)})
    at0 = table[table.quantity == "accuracy at +0 tokens"]
    assert len(at0) == 1 and at0.posym_mean.iloc[0] == 1.0 and at0.n.iloc[0] == 1
    assert set(table.intervention) == {"none"}
    ntk = sensitivity_table({"f": str(t)}, intervention="ntk:kappa=4")
    assert ntk[ntk.quantity == "accuracy at +0 tokens"].posym_mean.tolist() == [0.0]
    out = tmp_path / "o"
    assert main(["sensitivity", f"f={t}", "--no-predict", "--out", str(out)]) == 0
    curves = pd.read_csv(out / "fig5b_variants.csv")
    assert curves.extra_tokens.tolist() == [0, 50] and curves.acc_mean.tolist() == [1.0, 0.9]
    assert set(curves.intervention) == {"none"} and curves.acc_sd.isna().all()  # one model: no sd
    note = "Fig. 5B of f: untouched model (intervention none); the tables also hold ntk:kappa=4 (not shown)"
    assert note in (out / "sensitivity.md").read_text()
    assert "untouched model (intervention none)" in (out / "sensitivity.html").read_text()
    assert main(["sensitivity", f"f={t}", "--no-predict", "--out", str(tmp_path / "o2"), "--intervention", "x:y=1"]) == 2
    assert "holds no rows of intervention 'x:y=1' (it holds none, ntk:kappa=4)" in capsys.readouterr().err


def test_one_table_twice_or_one_model_twice_is_refused(tmp_path, capsys):
    """N8: `f=T.csv,T.csv` duplicated the Fig. 5B rows; two tables of one task are two models (mean ± sd)."""
    t = _lengthgen_table(tmp_path / "T.csv", {"none": {0: 1.0, 50: 0.9}})
    out = tmp_path / "o"
    assert main(["sensitivity", f"f={t},{t}", "--no-predict", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"variant 'f' lists {t} twice" in err and len(err.strip().splitlines()) == 1 and not out.exists()
    same = _lengthgen_table(tmp_path / "U.csv", {"none": {0: 0.5, 50: 0.5}})  # same weights digest
    assert main(["sensitivity", f"f={t},{same}", "--no-predict", "--out", str(out)]) == 2
    assert "measure the same number model (weights ab12)" in capsys.readouterr().err and not out.exists()
    other = _lengthgen_table(tmp_path / "V.csv", {"none": {0: 0.5, 50: 0.7}}, weights="cd34")
    table = sensitivity_table({"f": f"{t},{other}"})
    at0 = table[table.quantity == "accuracy at +0 tokens"]
    assert len(at0) == 1 and at0.posym_mean.iloc[0] == 0.75 and at0.n.iloc[0] == 2
    assert at0.posym_sd.iloc[0] == pytest.approx(np.std([1.0, 0.5], ddof=1))


def test_a_table_value_out_of_range_is_refused(tmp_path, capsys):
    t = _lengthgen_table(tmp_path / "T.csv", {"none": {0: 1.0, 50: 0.9}})
    summary = tmp_path / "T_summary.csv"
    summary.write_text(summary.read_text().replace("none,0,1.0", "none,0,7.5"))
    assert main(["sensitivity", f"f={t}", "--no-predict", "--out", str(tmp_path / "o")]) == 2
    assert "T_summary.csv row 1: acc_mean = '7.5' is not a number in [0, 1]" in capsys.readouterr().err
