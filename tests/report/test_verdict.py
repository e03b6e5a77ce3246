"""Verdicts of the "paper vs posym" rows and the verdict lines at the top of the report."""

from __future__ import annotations

import html
import re
import math

import pandas as pd
import pytest

from posym.reading import HOW_TO_READ
from posym.report import verdict as V
from posym.report.aggregate import paper_vs_posym
from posym.report.html import write_report


def test_llm_at_chance_is_not_evidence_for_an_upper_bound():
    v, note = V.llm_bound(0.10, "<", 0.5, chance=0.10)
    assert v == V.NOT_EVIDENCE and "at chance (0.10 vs chance 0.10)" in note and "meets" not in note
    assert V.llm_bound(0.0, "<", 0.1, chance=None)[0] == V.NOT_EVIDENCE  # chance unknown: no claim
    v, note = V.llm_bound(0.30, "<", 0.5, chance=0.10)
    assert v == V.REPRODUCED and "meets the paper's bound" in note
    assert V.llm_bound(0.15, ">", 0.88, chance=0.10)[0] == V.NOT_REPRODUCED
    assert V.llm_bound(0.95, ">", 0.88, chance=0.10)[0] == V.REPRODUCED


def _llm_tables(model="SmolLM2"):
    gen = pd.DataFrame([{"model": model, "task": t, "length": n, "mean": m, "sd": 0.1, "runs": 2, "n": 10}
                        for t, n, m in [("number", 32, 0.10), ("number", 100, 0.0), ("letter", 32, 0.15),
                                        ("letter", 100, 0.0)]])
    choice = gen.assign(protocol="choice", mean=0.1, chance=[0.10, 0.05, 0.125, 0.04])
    return {"llm": gen, "llm_models": pd.concat([gen.assign(protocol="generate"), choice], ignore_index=True)}


def test_table3_rows_take_chance_into_account(tmp_path):
    pv = paper_vs_posym(tmp_path, _llm_tables())
    t3 = pv[pv["section"].str.startswith("Table 3")].set_index(["task", "quantity"])
    num32 = t3.loc[("number", "accuracy at length 32")]
    assert num32["verdict"] == V.NOT_EVIDENCE
    assert "at chance (0.10 vs chance 0.10): not evidence" in num32["note"]
    assert "meets" not in " ".join(t3.loc["number", "note"])
    assert (t3.loc["letter", "verdict"] == V.NOT_REPRODUCED).all()


def test_pure_head_counts_of_another_model_size(tmp_path):
    pc = pd.DataFrame([{"task": "letter", "gamma": 0.1, "quantity": "symbolic heads (of 8)", "mean": 7.0,
                        "sd": math.nan, "n": 1, "n_missing": 0, "per_seed": "7", "paper": 11.0}])
    pv = paper_vs_posym(tmp_path, {"purity_counts": pc})
    r = pv.iloc[0]
    assert r["paper_text"] == "11 (of 12)"
    assert math.isnan(r["difference"])  # 7 of 8 minus 11 of 12 is no difference
    assert r["verdict"] == V.REPRODUCED and "7/8 = 0.88 vs 11/12 = 0.92" in r["note"]


def test_verdict_lines_say_what_reproduced_with_sizes():
    pv = pd.DataFrame([
        {"section": "Fig. 5A (discrepancy)", "task": "index", "quantity": "Δ(n = 8)", "paper_text": "0.303",
         "posym_mean": 0.304, "difference": 0.001, "verdict": V.REPRODUCED, "note": ""},
        {"section": "Fig. 5B (length generalization)", "task": "letter", "quantity": "accuracy at +1000 tokens",
         "paper_text": "0.87", "posym_mean": 0.40, "difference": -0.47, "verdict": V.NOT_REPRODUCED, "note": ""},
        {"section": "Fig. 2 (training)", "task": "number", "quantity": "first step acc_hop1 >= 0.9",
         "paper_text": "2050", "posym_mean": 500.0, "difference": -1550.0, "verdict": V.NOT_COMPARABLE,
         "note": "quick preset: 1500 steps — steps not comparable"},
        {"section": "Table 3 (1-hop LLM prompts)", "task": "number", "quantity": "accuracy at length 32",
         "paper_text": "< 0.5", "posym_mean": 0.1, "difference": math.nan, "verdict": V.NOT_EVIDENCE,
         "note": "at chance (0.10 vs chance 0.10): not evidence for the paper's bound"},
    ])
    lines = V.verdict_lines(pv)
    assert lines[0].startswith("Reproduced: 1 of the 2 numbers")
    assert "largest |difference| 0.001" in lines[0]
    assert "letter, accuracy at +1000 tokens: 0.40 vs paper 0.87 (-0.47)" in lines[1]
    assert "1 row(s) not comparable" in lines[2] and "steps not comparable" in lines[2]
    assert "1 row(s) not evidence" in lines[3] and "at chance" in lines[3]


def test_report_opens_with_the_verdict_and_explains_the_scores(tmp_path):
    (tmp_path / "theory").mkdir()
    pd.DataFrame([{"mechanism": "index", "n": 8, "delta": 0.303, "bound": 0.3033},
                  {"mechanism": "retrieval", "n": 2, "delta": 0.20, "bound": 0.2891}]).to_csv(
        tmp_path / "theory" / "discrepancy.csv", index=False)
    page = write_report(tmp_path).read_text()
    verdict_at, summary_at = page.index('class="verdict"'), page.index('id="summary"')
    assert verdict_at < summary_at
    box = html.unescape(page[verdict_at:summary_at])
    assert "Fig. 5A (discrepancy) 2/2 within the bound" in box and "Not reproduced" not in box
    first = " ".join(HOW_TO_READ.split("\n- ")[0].split())
    assert html.escape(first) in page
    assert page.index(html.escape(first)) < page.index('id="pure"')


def _discrepancy_csv(root, rows):
    (root / "theory").mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{"mechanism": m, "n": n, "delta": d, "bound": b} for m, n, d, b in rows]).to_csv(
        root / "theory" / "discrepancy.csv", index=False)


def test_fig5a_rows_are_judged_against_the_theorem_bound_and_not_counted_as_not_reproduced(tmp_path):
    # the quick preset's values: Paper A's Fig. 5A plots Theorem 3.2's bounds (0.303, 0.16), which the exact
    # worst-case Δ lies below; the old verdict called both rows "not reproduced"
    _discrepancy_csv(tmp_path, [("index", 8, 0.2244, 0.3033), ("index", 80, 0.0002, 0.0031),
                                ("retrieval", 2, 0.2929, 0.2891), ("retrieval", 80, 0.1371, 0.1578)])
    pv = paper_vs_posym(tmp_path, {})
    rows = pv[pv["section"] == "Fig. 5A (discrepancy)"].set_index(["task", "quantity"])
    assert rows.loc[("index", "Δ(n = 8)"), "verdict"] == V.WITHIN_BOUND
    assert rows.loc[("retrieval", "Δ(n = 80)"), "verdict"] == V.WITHIN_BOUND
    assert rows.loc[("retrieval", "Δ(n = 2)"), "verdict"] == V.VIOLATES_BOUND  # SPEC's off-by-one (documented)
    assert rows.loc[("retrieval", "Δ(n = 80)"), "paper_text"] == "≤ 0.1578 (Theorem 3.2 bound)"
    assert rows.loc[("retrieval", "Δ(n = 80)"), "difference"] == pytest.approx(0.1371 - 0.1578)
    assert "plots this bound (0.16; ours agrees within ±0.01)" in rows.loc[("retrieval", "Δ(n = 80)"), "note"]
    assert not (pv["verdict"].isin([V.REPRODUCED, V.NOT_REPRODUCED])).any()
    lines = V.verdict_lines(pv)
    assert not any(x.startswith(("Reproduced", "Not reproduced")) for x in lines), lines
    assert lines == ["Theorem bounds (a bound is not a measurement of Paper A: not counted above): Fig. 5A "
                     "(discrepancy) 3/4 within the bound; violates the bound: retrieval, Δ(n = 2): 0.2929 > bound "
                     "0.2891 (+0.0038)."]
    assert V.upper_bound(0.3033, 0.3033) == V.WITHIN_BOUND and V.upper_bound(math.nan, 1.0) == ""


def test_the_largest_difference_of_a_section_is_given_per_unit():
    # Fig. 5B holds accuracies and one length in tokens: the old line said "largest |difference| 200"
    row = {"section": "Fig. 5B (length generalization)", "task": "letter", "note": "", "verdict": V.REPRODUCED}
    pv = pd.DataFrame([
        {**row, "quantity": "accuracy at +0 tokens", "paper_text": "1", "posym_mean": 0.98, "difference": -0.02},
        {**row, "quantity": "accuracy at +300 tokens", "paper_text": "0.99", "posym_mean": 0.94, "difference": -0.05},
        {**row, "quantity": "largest added length with accuracy >= 0.9", "paper_text": "≈ 750–850",
         "posym_mean": 1000.0, "difference": 200.0},
        {"section": "Fig. 2 (training)", "task": "number", "quantity": "first step acc_hop1 >= 0.9",
         "paper_text": "2050", "posym_mean": 2200.0, "difference": 150.0, "verdict": V.REPRODUCED, "note": ""},
        {"section": "Fig. 2 (training)", "task": "number", "quantity": "test acc", "paper_text": "1",
         "posym_mean": 0.97, "difference": -0.03, "verdict": V.REPRODUCED, "note": ""},
    ])
    line = V.verdict_lines(pv)[0]
    assert "Fig. 5B (length generalization) 3/3, largest |difference| 0.05 (accuracy), 200 (tokens)" in line
    assert "Fig. 2 (training) 2/2, largest |difference| 150 (steps), 0.03 (accuracy)" in line
    assert [V.unit(q) for q in ("accuracy at +50 tokens", "largest added length with accuracy >= 0.9",
                                "val acc at step 2000", "Δ(n = 8)", "positional heads (of 8)",
                                "weighted frequency ID, layer 3", "median step")] == [
        "accuracy", "tokens", "accuracy", "Δ", "heads", "frequency ID", "steps"]


def test_report_names_the_architecture_of_its_runs(tmp_path):
    """A reproduction of --set train.arch=llama says so in its header and a note; GPT-J's does not add the note."""
    import json

    run = tmp_path / "number" / "seed0"
    run.mkdir(parents=True)
    (run / "results.json").write_text("{}")
    (run / "posym.json").write_text(json.dumps({"task": "number", "config": {"arch": "llama"}}))
    text = lambda: html.unescape(re.sub(r"<[^>]+>", "", write_report(tmp_path).read_text()))
    page = text()
    assert "architecture llama" in page and "Architecture: llama (posym train --arch" in page
    (run / "posym.json").write_text(json.dumps({"task": "number", "config": {}}))
    page = text()
    assert "architecture gptj" in page and "Architecture: " not in page
