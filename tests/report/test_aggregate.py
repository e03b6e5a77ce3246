"""Multi-seed aggregation: mean ± sd over seeds on hand-made run tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from posym.errors import PosymError
from posym.report.aggregate import (aggregate, find_runs, lengthgen_summary, paper_vs_posym,
                                    purity_counts, training_summary)
from posym.report.format import fmt_ms, mean_sd
from posym.report.html import quantity_format, write_report

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


def _summary(d: Path, rows: list[tuple[str, int, float]], name: str = "lengthgen_summary.csv") -> None:
    """A run's length summary with an ``intervention`` column: (intervention, extra_tokens, acc_mean)."""
    pd.DataFrame([{"intervention": iv, "extra_tokens": x, "acc_mean": a, "acc_sd": 0.0, "n_seeds": 2}
                  for iv, x, a in rows]).to_csv(d / name, index=False)


@pytest.fixture
def mixed(tmp_path):
    """number seed 0: `none` at 1.0 and `ntk:kappa=4` at 0.0 (one model); letter seed 0: `none` only;
    seed 0's freq_table holds a head under both interventions."""
    num = _run(tmp_path, "number", 0, hop1_at=50, test_acc=0.9, kinds=["positional", "mixed"], lg=[1.0, 1.0])
    _summary(num, [("none", 0, 1.0), ("none", 100, 0.9), ("ntk:kappa=4", 0, 0.0), ("ntk:kappa=4", 100, 0.0)])
    let = _run(tmp_path, "letter", 0, hop1_at=50, test_acc=1.0, kinds=["symbolic", "mixed"], lg=[1.0, 1.0])
    _summary(let, [("none", 0, 0.96), ("none", 100, 0.92)])
    pd.DataFrame({"layer": [0, 0], "head": 0, "weighted_id": [10.0, 30.0], "dominant_id": [10, 30],
                  "intervention": ["none", "ntk:kappa=4"]}).to_csv(num / "freq_table.csv", index=False)
    return tmp_path


def test_a_table_that_mixes_interventions_is_kept_apart(mixed):
    """Old code: +0 read 0.5 (mean of none and ntk) with an sd of 0.71 'over' one seed."""
    from posym.report.aggregate import curve_reach, freq_summary, lengthgen_per_seed_largest

    runs = find_runs(mixed)
    lg = lengthgen_summary(runs)
    num = lg[lg.task == "number"].set_index("extra_tokens")
    assert set(lg.intervention) == {"none"} and num.loc[0, "acc_mean"] == 1.0 and num.loc[100, "acc_mean"] == 0.9
    assert num.loc[0, "n_seeds"] == 1 and math.isnan(num.loc[0, "acc_sd"])  # one seed: no sd
    let = lg[lg.task == "letter"].set_index("extra_tokens")
    assert let.loc[0, "acc_mean"] == 0.96  # tasks apart
    ntk = lengthgen_summary(runs, intervention="ntk:kappa=4")
    assert list(ntk.task) == ["number", "number"] and list(ntk.acc_mean) == [0.0, 0.0]
    both = lengthgen_summary(runs, intervention=None)
    assert len(both) == 6 and both.groupby(["task", "intervention", "extra_tokens"]).size().max() == 1
    assert lengthgen_per_seed_largest(runs, "number") == [100.0]
    assert math.isnan(lengthgen_per_seed_largest(runs, "number", intervention="ntk:kappa=4")[0])  # 0.0 at +0
    with pytest.raises(PosymError, match="mixes the interventions none, ntk:kappa=4; select one"):
        curve_reach(both[both.task == "number"])
    pv = paper_vs_posym(mixed)
    row = pv[(pv.task == "number") & (pv.quantity == "accuracy at +0 tokens")].iloc[0]
    assert row.posym_mean == 1.0 and row.n == 1
    assert "untouched model (intervention none); the tables also hold ntk:kappa=4" in row.note
    fq = freq_summary(runs)  # the freq table's untouched row only
    assert fq.loc[fq.task == "number", "weighted_id_mean"].tolist() == [10.0]
    tables = aggregate(mixed)
    assert pd.read_csv(mixed / "aggregate" / "lengthgen.csv").intervention.unique().tolist() == ["none"]
    assert len(tables["lengthgen"]) == 4


def test_runs_of_one_task_that_differ_in_encoding_are_refused(mixed):
    import json as _json

    other = _run(mixed, "number", 1, hop1_at=50, test_acc=0.9, kinds=["positional", "mixed"], lg=[1.0, 1.0])
    (other / "posym.json").write_text(_json.dumps({"config": {"preset": "quick", "steps": 100, "pe": "nope"}}))
    with pytest.raises(PosymError, match=r"the number runs differ in pe \(.*seed0: rope, .*seed1: nope\)"):
        aggregate(mixed, write=False)
    assert not (mixed / "aggregate").exists()


def test_runs_of_one_task_that_differ_in_architecture_are_refused(mixed):
    """A Llama run (posym train --arch llama) beside a GPT-J run of one task is not averaged as a seed."""
    import json as _json

    other = _run(mixed, "number", 1, hop1_at=50, test_acc=0.9, kinds=["positional", "mixed"], lg=[1.0, 1.0])
    (other / "posym.json").write_text(_json.dumps({"config": {"preset": "quick", "steps": 100, "arch": "llama"}}))
    with pytest.raises(PosymError, match=r"the number runs differ in arch \(.*seed0: gptj, .*seed1: llama\)"):
        aggregate(mixed, write=False)
    assert not (mixed / "aggregate").exists()


def test_a_summary_value_out_of_range_is_refused(mixed):
    """N7: acc_mean 7.5 was shown as 'accuracy 7.50'; now one line naming file, row and column."""
    _summary(mixed / "number" / "seed0", [("none", 0, 7.5), ("none", 100, 0.9)])
    with pytest.raises(PosymError, match=r"number/seed0/lengthgen_summary\.csv row 1: acc_mean = '7\.5' is not "
                                         r"a number in \[0, 1\]"):
        lengthgen_summary(find_runs(mixed))
    _summary(mixed / "number" / "seed0", [("none", 0, 1.0), ("none", 0, 0.9)])
    with pytest.raises(PosymError, match="rows 1 and 2 repeat the point intervention none, extra_tokens 0"):
        lengthgen_summary(find_runs(mixed))
    _summary(mixed / "number" / "seed0", [("none", -5, 1.0)])
    with pytest.raises(PosymError, match=r"extra_tokens = '-5' is not an integer >= 0"):
        lengthgen_summary(find_runs(mixed))


@pytest.mark.parametrize("name", ["metrics.csv", "freq_table.csv", "purity_gamma0.1.csv", "ablation.csv"])
def test_a_garbage_run_table_is_one_line_naming_it(tmp_path, name):
    """Issue 34 (T4): a garbage metrics.csv read by the aggregation (pe-study, report) was a KeyError."""
    from posym.errors import PosymError
    from posym.report.aggregate import ablation_summary, freq_summary, purity_counts, training_summary

    run = tmp_path / "number" / "seed0"
    run.mkdir(parents=True)
    (run / name).write_text("garbage\n1\n")
    runs = {"number": {0: run}}
    with pytest.raises(PosymError, match=name.replace(".", r"\.")) as e:
        training_summary(runs), freq_summary(runs), purity_counts(runs, 0.1), ablation_summary(runs)
    assert "\n" not in str(e.value)
