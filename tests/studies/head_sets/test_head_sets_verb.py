"""``posym head-sets`` on a tiny Llama model folder (GQA): the tables record heads, readout and seeds; controls
are matched per layer and disjoint from the set; a rerun reuses every measured cell; bad input is one line and
exit 2 before any work; the figures draw with the null in their text."""

import json

import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.model import save_model
from posym.studies.head_sets import NULL, plot_dose_curves, plot_temperature_curve
from posym.tasks import get_vocab

from family_models import build_family

ARGS = ["--task", "number", "--sets", "positional,symbolic", "--controls", "3", "--doses", "1,2", "--directions",
        "low,high", "--temperature-lengths", "0,4", "--n", "6", "--quiet"]


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    torch.set_num_threads(1)
    directory = tmp_path_factory.mktemp("llama") / "model"
    save_model(build_family("llama", vocab_size=get_vocab("number").size), directory)
    readout = directory.parent / "head_types.csv"
    df = pd.DataFrame([{"layer": ly, "head": h, "posym_type": "mixed", "classic_type": "none", "is_sink": False}
                       for ly in range(4) for h in range(4)])
    df.loc[[1, 2, 9], "posym_type"] = "positional"  # L0H1, L0H2, L2H1
    df.to_csv(readout, index=False)
    return directory, readout


@pytest.mark.integration
def test_tables_controls_rerun_and_figures(llama_dir, tmp_path, capsys, monkeypatch):
    directory, readout = llama_dir
    out = tmp_path / "study"
    assert main(["head-sets", str(directory), "--readout", str(readout), "--out", str(out), *ARGS]) == 0
    printed = capsys.readouterr().out
    assert "note: symbolic: no head of this type in the readout; skipped" in printed
    t = pd.read_csv(out / "head_sets.csv")
    assert set(t["heads"]) == {"L0H1+L0H2+L2H1"} and set(t["readout"]) == {str(readout)} and set(t["data_seed"]) == {0}
    assert set(t["control_seeds"]) == {"0..2"} and set(t["n_controls"]) == {3} and set(t["n_prompts"]) == {6}
    assert len(t) == 2 * 2 + 2  # (low, high) x k in (1, 2), temperature at +0 and +4
    assert {"effect", "effect_lo", "effect_hi", "p", "p_bh", "ctrl_effect_mean", "rank", "rank_none",
            "acc_all_heads", "intervention", "dropped"} <= set(t.columns)
    assert t.loc[t["what"] == "high", "dropped"].astype(str).tolist() == ["1", "1+2"]
    c = pd.read_csv(out / "head_sets_controls.csv")
    assert len(c) == 3 * len(t) and set(c["control_seed"]) == {0, 1, 2}
    for heads in c["heads"]:
        hs = heads.split("+")
        assert sorted(h[:2] for h in hs) == ["L0", "L0", "L2"] and not set(hs) & {"L0H1", "L0H2", "L2H1"}
    record = json.loads((out / "head_sets.json").read_text())
    assert record["control_seeds"] == {"positional": [0, 1, 2]} and record["n_controls"] == {"positional": 3}
    assert record["notes"] and record["measured_now"] > 0
    for f in ("head_sets.md", "head_sets_doses_positional.png", "head_sets_temperature_positional.png"):
        assert (out / f).stat().st_size > 0, f
    assert NULL in (out / "head_sets.md").read_text()
    # a rerun reuses every cell: nothing is measured, the table is identical
    import posym.studies.head_sets.run as run
    monkeypatch.setattr(run, "task_outcomes", lambda *a, **k: pytest.fail("re-measured a cell"))
    assert main(["head-sets", str(directory), "--readout", str(readout), "--out", str(out), "--force", *ARGS]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "head_sets.csv"), t)
    assert json.loads((out / "head_sets.json").read_text())["measured_now"] == 0
    # the figures carry the null and n
    for fig in (plot_dose_curves(t, "positional"), plot_temperature_curve(t, "positional")):
        assert NULL in fig._suptitle.get_text() and "n = 6 prompts" in fig._suptitle.get_text()


@pytest.mark.parametrize("args, msg", [
    (["--sets", "sink"], "a classic type needs the classic_type column"),
    (["--doses", "8"], "--doses: k = 8 drops every rotary pair"),
    (["--sets", "bogus"], "--sets: unknown set 'bogus'"),
    (["--controls", "0"], "--controls"),
    (["--directions", "up"], "unknown direction 'up'"),
    (["--intervene", "ntk:kappa=4,layers=0"], "without heads= or layers="),
])
def test_bad_input_is_one_line_before_any_work(llama_dir, tmp_path, capsys, args, msg):
    directory, readout = llama_dir
    thin = tmp_path / "thin.csv"
    pd.read_csv(readout).drop(columns=["classic_type", "is_sink"]).to_csv(thin, index=False)
    out = tmp_path / "study"
    assert main(["head-sets", str(directory), "--readout", str(thin), "--out", str(out), "--task", "number",
                 "--quiet", "--sets", "positional", *args]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and msg in err[0], err
    assert not out.exists()


def test_a_missing_type_and_an_unmatchable_set(llama_dir, tmp_path, capsys):
    directory, readout = llama_dir
    full = tmp_path / "full.csv"
    df = pd.read_csv(readout)
    df.loc[df["layer"] == 3, "posym_type"] = "symbolic"  # every head of layer 3: no other head to draw from
    df.to_csv(full, index=False)
    for sets, msg in (("induction", "no head set has heads"), ("symbolic", "cannot match random:symbolic")):
        assert main(["head-sets", str(directory), "--readout", str(full), "--out", str(tmp_path / "o"), "--task",
                     "number", "--sets", sets, "--quiet"]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(err) == 1 and msg in err[0], err
