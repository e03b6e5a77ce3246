"""Multi-seed aggregation: mean ± sd over seeds on hand-made run tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from posym.report.aggregate import (aggregate, find_runs, lengthgen_summary, mean_sd, paper_vs_posym,
                                    purity_counts, training_summary)
from posym.report.html import fmt_ms, quantity_format, write_report

HOPS = ["acc_hop1", "acc_hop2", "acc_hop3", "acc_hop4"]


def _run(root: Path, task: str, seed: int, hop1_at: int, test_acc: float, kinds: list[str], lg: list[float]) -> Path:
    d = root / task / f"seed{seed}"
    d.mkdir(parents=True)
    rows = []
    for step in (0, 50, 100):
        v = 0.95 if step >= hop1_at else 0.1
        rows.append({"split": "val", "step": step, "acc": v / 2, "acc_hop1": v, "acc_hop2": 0.0, "acc_hop3": 0.0,
                     "acc_hop4": 0.0})
    rows.append({"split": "test", "step": 100, "acc": test_acc, **{h: test_acc for h in HOPS}})
    pd.DataFrame(rows).to_csv(d / "metrics.csv", index=False)
    (d / "results.json").write_text(json.dumps({"test": {"acc": test_acc}}))
    (d / "posym.json").write_text(json.dumps({"config": {"preset": "quick", "steps": 100, "lr": 1e-3}}))
    pd.DataFrame({"layer": range(len(kinds)), "head": 0, "kind": kinds,
                  "pure_from": [50.0 if k != "mixed" else np.nan for k in kinds],
                  "s_pos_final": 0.5, "s_sym_final": 0.5}).to_csv(d / "purity_gamma0.1.csv", index=False)
    pd.DataFrame({"extra_tokens": [0, 100], "acc_mean": lg, "acc_sd": 0.0, "n_seeds": 1}).to_csv(
        d / "lengthgen_summary.csv", index=False)
    return d


@pytest.fixture
def two_seeds(tmp_path):
    _run(tmp_path, "number", 0, hop1_at=50, test_acc=0.9, kinds=["positional", "symbolic", "mixed"], lg=[1.0, 0.5])
    _run(tmp_path, "number", 1, hop1_at=100, test_acc=1.0, kinds=["positional", "symbolic", "symbolic"], lg=[1.0, 0.7])
    return tmp_path


def test_mean_sd():
    assert mean_sd([1.0, 3.0]) == (2.0, pytest.approx(math.sqrt(2)), 2)
    m, s, n = mean_sd([0.5])
    assert m == 0.5 and math.isnan(s) and n == 1  # one seed: sd is NaN, never a fake 0
    m, s, n = mean_sd([None, float("nan")])
    assert math.isnan(m) and n == 0
    assert mean_sd([2.0, None, 4.0])[:3] == (3.0, pytest.approx(math.sqrt(2)), 2)


def test_two_seeds_mean_and_sd(two_seeds):
    runs = find_runs(two_seeds)
    assert list(runs) == ["number"] and list(runs["number"]) == [0, 1]
    tr = training_summary(runs).set_index("quantity")
    assert tr.loc["test acc", "mean"] == pytest.approx(0.95)
    assert tr.loc["test acc", "sd"] == pytest.approx(np.std([0.9, 1.0], ddof=1))
    assert tr.loc["test acc", "per_seed"] == "0.9, 1"
    first = tr.loc["first step acc_hop1 >= 0.9"]
    assert (first["mean"], first["sd"], first["n"]) == (75.0, pytest.approx(np.std([50, 100], ddof=1)), 2)
    assert first["paper"] == 2050
    never = tr.loc["first step acc_hop2 >= 0.9"]
    assert math.isnan(never["mean"]) and never["n"] == 0 and never["n_missing"] == 2

    pc = purity_counts(runs, 0.1).set_index("quantity")
    assert pc.loc["symbolic heads (of 3)", "mean"] == 1.5
    assert pc.loc["symbolic heads (of 3)", "sd"] == pytest.approx(math.sqrt(0.5))
    assert pc.loc["positional heads (of 3)", "sd"] == 0.0
    assert pc.loc["mixed heads (of 3)", "mean"] == 0.5
    assert pc.loc["positional heads (of 3)", "paper"] == 4

    lg = lengthgen_summary(runs).set_index("extra_tokens")
    assert lg.loc[100, "acc_mean"] == pytest.approx(0.6)
    assert lg.loc[100, "acc_sd"] == pytest.approx(np.std([0.5, 0.7], ddof=1))
    assert lg.loc[0, "acc_sd"] == 0.0 and lg.loc[0, "n_seeds"] == 2

    pv = paper_vs_posym(two_seeds)
    row = pv[(pv["quantity"] == "accuracy at +100 tokens")].iloc[0]
    assert row["paper"] == 0.74 and row["difference"] == pytest.approx(0.6 - 0.74)
    row = pv[pv["quantity"] == "first step acc_hop1 >= 0.9"].iloc[0]
    assert row["difference"] == pytest.approx(75 - 2050) and "not comparable" in row["note"]


def test_one_seed_sd_is_reported_as_missing(two_seeds):
    import shutil

    shutil.rmtree(two_seeds / "number" / "seed1")
    tr = training_summary(find_runs(two_seeds)).set_index("quantity")
    assert math.isnan(tr.loc["test acc", "sd"]) and tr.loc["test acc", "n"] == 1
    assert fmt_ms(tr.loc["test acc", "mean"], tr.loc["test acc", "sd"]) == "0.900 ± n/a"
    assert fmt_ms(0.95, 0.0707, 2) == "0.950 ± 0.071 (n=2)"
    assert fmt_ms(float("nan"), 0.1) == "—"


def test_quantity_format_keeps_the_spread_of_head_counts():
    # a mean of 3, 2, 3 heads must not read "3 ± 1": counts get one decimal, steps none
    d, integer = quantity_format("positional heads (of 12)")
    assert fmt_ms(8 / 3, 0.57735, None, d, integer) == "2.7 ± 0.6"
    d, integer = quantity_format("first step acc_hop1 >= 0.9")
    assert fmt_ms(1950, 217.9, None, d, integer) == "1,950 ± 218"
    assert quantity_format("test acc") == (3, False) and quantity_format("Δ(n = 80)", 4) == (4, False)


def test_aggregate_writes_tables_and_figures(two_seeds):
    tables = aggregate(two_seeds)
    adir = two_seeds / "aggregate"
    for name in tables:
        assert (adir / f"{name}.csv").is_file(), name
    assert (adir / "figures" / "accuracy_number.png").is_file()
    assert (adir / "figures" / "fig5b_lengthgen.png").is_file()
    curves = tables["accuracy_curves"].set_index("step")
    assert curves.loc[50, "acc_hop1_mean"] == pytest.approx((0.95 + 0.1) / 2)


def test_incomplete_runs_and_empty_directory(tmp_path):
    (tmp_path / "number" / "seed0").mkdir(parents=True)  # training not finished: no results.json
    assert find_runs(tmp_path) == {}
    assert find_runs(tmp_path, complete_only=False) == {"number": {0: tmp_path / "number" / "seed0"}}
    page = write_report(tmp_path).read_text()
    assert "No finished training run" in page
    tables = aggregate(tmp_path)  # every table has its header, also without a finished run
    for name, t in tables.items():
        assert len(t.columns) and t.empty, name
        assert list(pd.read_csv(tmp_path / "aggregate" / f"{name}.csv").columns) == list(t.columns), name


def test_one_seed_is_not_called_mean_and_sd():
    from posym.report.aggregate import plot_accuracy_bands

    curves = pd.DataFrame({"task": "number", "step": [0, 10], "acc_mean": [0.0, 1.0], "acc_sd": [np.nan, np.nan],
                           "n_seeds": 1})
    fig = plot_accuracy_bands(curves, "number")
    assert fig.axes[0].get_title() == "number: accuracy per hop (1 seed)"
    import matplotlib.pyplot as plt

    plt.close(fig)
