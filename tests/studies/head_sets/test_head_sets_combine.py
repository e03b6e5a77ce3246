"""``posym head-sets-combine``: replicate models' head-set studies side by side, cell by cell, and every
way of mixing rows that differ refused in one line before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.runs import layout
from posym.stats import fisher_combined
from posym.studies.head_sets import combine_head_sets

CONFIG = {"task": "number", "preset": "paper", "arch": "gptj", "pe": "rope", "steps": 100, "batch_size": 8, "lr": 1e-4,
          "weight_decay": 1e-4, "eps": 1e-8, "warmup": 10, "max_grad_norm": 1.0, "betas": [0.95, 0.999],
          "precision": "fp32", "distractors": "pool", "final_model": "last", "epochs": None, "model_overrides": {}}
SETTINGS = {"task": "number", "doses": [1, 4], "directions": ["high"], "temperature": ["ntk:kappa=4"], "lengths": [0],
            "temperature_lengths": [0, 100], "n": 10, "readout_n": 0, "match": "count", "seed": 0, "controls": 5,
            "null": "K random head sets of as many heads, drawn from all heads outside the set"}


def _row(part, set_, what, k, extra, heads, acc_none, acc, ctrl_acc, p_bh):
    return {"task": "number", "part": part, "set": set_, "what": what, "intervention_kind": what.split(":")[0],
            "k": k, "extra_tokens": extra, "heads": heads, "n_prompts": 10, "n_controls": 5, "acc_none": acc_none,
            "acc": acc, "effect": acc_none - acc, "effect_lo": acc_none - acc - 0.1, "effect_hi": acc_none - acc + 0.1,
            "ctrl_acc_mean": ctrl_acc, "ctrl_effect_mean": acc_none - ctrl_acc, "p": p_bh / 2, "p_bh": p_bh,
            "acc_all_heads": np.nan}


def _study(tmp_path, name, seed, effects, sets=("positional",), config=None, **settings):
    run = tmp_path / f"run-{name}"
    run.mkdir()
    (run / layout.POSYM_JSON).write_text(json.dumps({"task": "number", "config": {**(config or CONFIG), "seed": seed}}))
    rows = []
    for s in sets:
        heads = f"L{seed}H0+L{seed + 1}H0"
        for k, e in zip((1, 4), effects):
            rows.append(_row("dose", s, "high", k, 0, heads, 1.0, 1.0 - e, 0.99, 0.01 if e > 0.3 else 0.8))
        for extra, acc in ((0, 1.0), (100, 0.3 + 0.1 * seed)):
            rows.append(_row("temperature", s, "ntk:kappa=4", np.nan, extra, heads, 1.0 if extra == 0 else 0.2, acc,
                             0.5, 0.9))
    d = tmp_path / f"study-{name}"
    d.mkdir()
    pd.DataFrame(rows).to_csv(d / layout.HEAD_SETS, index=False)
    (d / layout.HEAD_SETS_JSON).write_text(json.dumps({"model": str(run), **SETTINGS, **settings}))
    return d


@pytest.mark.medium  # figures written
def test_cells_side_by_side_with_each_models_effect(tmp_path):
    a = _study(tmp_path, "a", 0, (0.1, 0.7))
    b = _study(tmp_path, "b", 1, (0.0, 0.5))
    c = _study(tmp_path, "c", 2, (0.2, 0.6), sets=("positional", "mixed"))
    res = combine_head_sets([a, b, c], tmp_path / "out")
    t = res.table.set_index(["part", "set", "what", "k", "extra_tokens"])
    r = t.loc[("dose", "positional", "high", 4, 0)]
    assert r["n_models"] == 3 and r["labels"] == "seed 0;seed 1;seed 2"
    assert r["effect"] == pytest.approx(0.6) and r["effect_min"] == pytest.approx(0.5) and r["effect_max"] == pytest.approx(0.7)
    assert r["effects"] == "+0.700;+0.500;+0.600" and r["n_significant"] == 3
    assert r["heads"] == "L0H0+L1H0;L1H0+L2H0;L2H0+L3H0"
    assert r["p_fisher"] == pytest.approx(fisher_combined([0.005] * 3))  # the models' p (not BH-adjusted)
    assert r["p_fisher_bh"] == pytest.approx(min(1.0, r["p_fisher"] * len(t) / 1))  # the smallest of the cells
    assert list(res.table["part"][:2]) == ["dose", "dose"] and list(res.table["k"][:2]) == [1, 4]  # the studies' order
    assert t.loc[("dose", "positional", "high", 1, 0)]["n_significant"] == 0
    assert t.loc[("temperature", "positional", "ntk:kappa=4", 0, 100)]["acc"] == pytest.approx(0.4)
    assert t.loc[("dose", "mixed", "high", 4, 0)]["n_models"] == 1  # a set only one model has: never averaged silently
    long = pd.read_csv(tmp_path / "out" / layout.HEAD_SETS_COMBINED_MODELS)
    assert len(long) == 3 * 4 + 4 and set(long["label"]) == {"seed 0", "seed 1", "seed 2"}
    md = (tmp_path / "out" / layout.HEAD_SETS_COMBINED_MD).read_text()
    assert "| dose | positional | high | 4 | 0 | 3 of 3 | +0.700;+0.500;+0.600 | +0.600 [+0.500, +0.700]" in md
    assert "| dose | mixed | high | 4 | 0 | 1 of 3 |" in md
    for s in ("positional", "mixed"):
        for stem in (layout.FIG_HEAD_SETS_COMBINED_DOSES, layout.FIG_HEAD_SETS_COMBINED_INTERVENTION):
            assert (tmp_path / "out" / f"{stem.format(set=s)}.png").is_file()
    with pytest.raises(PosymError, match="exists"):  # nothing replaced without --force
        combine_head_sets([a, b], tmp_path / "out")
    assert combine_head_sets([a, b], tmp_path / "out", labels=["x", "y"], force=True).data["labels"] == ["x", "y"]


@pytest.mark.parametrize("case, msg", [
    ("one", "two or more"),
    ("not-a-study", "is not a posym head-sets study"),
    ("settings", "differ in n "),
    ("same-model", "measured the same model"),
    ("recipe", "differ in lr"),
    ("labels", "--labels: give 2 distinct labels"),
])
def test_mixing_rows_that_differ_is_one_line_and_writes_nothing(tmp_path, capsys, case, msg):
    a = _study(tmp_path, "a", 0, (0.1, 0.7))
    b = {"one": lambda: None, "same-model": lambda: None, "not-a-study": lambda: tmp_path,
         "settings": lambda: _study(tmp_path, "b", 1, (0.0, 0.5), n=20),
         "recipe": lambda: _study(tmp_path, "b", 1, (0.0, 0.5), config={**CONFIG, "lr": 3e-4}),
         "labels": lambda: _study(tmp_path, "b", 1, (0.0, 0.5))}[case]()
    studies = [a] if case == "one" else [a, a] if case == "same-model" else [a, b]
    extra = ["--labels", "x,x"] if case == "labels" else []
    assert main(["head-sets-combine", *map(str, studies), "--out", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.medium  # about 1 s: figures written
def test_frequency_controlled_studies_combine_and_never_mix_with_head_controlled_ones(tmp_path, capsys):
    """``--match ids`` studies (dose cells only: no per-head intervention part) combine as any other; ``match``
    is a setting, so an ids study beside a count study is one line."""
    from posym.studies.head_sets import NULLS

    ids = {"match": "ids", "null": NULLS["ids"], "temperature": [], "directions": ["high"]}
    studies = []
    for name, seed, eff in (("a", 0, (0.1, 0.7)), ("b", 1, (0.0, 0.5))):
        d = _study(tmp_path, name, seed, eff, **ids)
        t = pd.read_csv(d / layout.HEAD_SETS)
        t[t["part"] == "dose"].assign(match="ids").to_csv(d / layout.HEAD_SETS, index=False)
        studies.append(d)
    res = combine_head_sets(studies, tmp_path / "out")
    assert set(res.table["part"]) == {"dose"} and len(res.table) == 2 and set(res.table["n_models"]) == {2}
    assert NULLS["ids"] in (tmp_path / "out" / layout.HEAD_SETS_COMBINED_MD).read_text()
    assert (tmp_path / "out" / f"{layout.FIG_HEAD_SETS_COMBINED_DOSES.format(set='positional')}.png").is_file()
    c = _study(tmp_path, "c", 2, (0.2, 0.6))
    assert main(["head-sets-combine", str(studies[0]), str(c), "--out", str(tmp_path / "mixed")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "differ in" in err and not (tmp_path / "mixed").exists()
