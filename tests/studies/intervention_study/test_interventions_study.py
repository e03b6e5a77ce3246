"""``posym interventions``: the study on tiny runs of both tasks — per-model tables and heads, the
study table with the prediction column, figures and page; re-running continues without re-measuring;
``--best-of`` picks each family's best setting; the summary rules on known tables; errors."""

import math

import pandas as pd
import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.studies.intervention_study import (PREDICTION, as_setting, best_settings, drop_lowest, family, for_model,
                                              model_reach, study_grid, study_settings, study_summary, summary_markdown)
from posym.studies.intervention_study import interventions

TINY = ["--steps", "4", "--eval-every", "2", "--checkpoint-every", "2", "--set", "n_layer=2", "--set", "n_embd=16",
        "--set", "n_inner=32", "--set", "rotary_dim=8", "--track-prompts", "4"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for task in ("number", "letter"):
        assert main(["train", "--task", task, "--out", str(root / task), "--quiet", *TINY]) == 0
    return root


@pytest.mark.integration
def test_the_study_writes_tables_figures_page_and_continues(runs, tmp_path, monkeypatch):
    out = tmp_path / "study"
    args = dict(intervene=["ntk:kappa=4", "temperature:beta=1"], grid=[0, 20], n=8, heads_lengths=[0, 20], heads_n=2,
                progress=False)
    res = interventions([runs / "number", runs / "letter"], out, **args)
    s = res.table
    assert set(zip(s["task"], s["intervention"])) == {(t, i) for t in ("number", "letter") for i in
                                                       ("none", "ntk:kappa=4", "temperature:beta=1,n_train=17,floor=1")}
    # the prediction was written for the paper preset's GPT-J, not for this tiny one: the column stays empty
    assert (s.loc[s["intervention"] == "ntk:kappa=4", "prediction"].fillna("") == "").all()
    for f in ("interventions.csv", "interventions.md", "interventions.html", "interventions.json",
              "interventions_lengthgen.csv", "fig5b_interventions_number.png", "intervention_heads_letter.png",
              "number-s0/lengthgen.csv", "number-s0/intervention_heads.csv"):
        assert (out / f).is_file(), f
    heads = pd.read_csv(out / "number-s0" / "intervention_heads.csv")
    assert len(heads) == 3 * 2 * 2 and set(heads["n_prompts"]) == {2}  # 3 interventions x 2 lengths x 2 layers
    html = (out / "interventions.html").read_text()
    # a tiny GPT-J is not the paper preset's model: the page shows no prediction for it (issue 38, point 5)
    assert "data:image/png;base64" in html and "No prediction was written for this model" in html
    import posym.lengthgen.trained as trained
    import posym.studies.intervention_study.run as verb
    monkeypatch.setattr(trained, "evaluate_length", lambda *a, **k: pytest.fail("re-measured a point"))
    monkeypatch.setattr(verb, "_head_rows", lambda *a, **k: pytest.fail("re-measured heads"))
    again = interventions([runs / "number", runs / "letter"], out, **args).table
    pd.testing.assert_frame_equal(again, s)


@pytest.mark.integration
def test_best_of_picks_each_familys_best_setting(runs, tmp_path):
    search = tmp_path / "search"
    interventions([runs / "number"], search, intervene=["ntk:kappa=2", "ntk:kappa=8"], grid=[0, 10], n=8,
                  heads_lengths=[], progress=False)
    s = pd.read_csv(search / "interventions.csv")
    best = best_settings(s)
    full = interventions([runs / "number"], tmp_path / "full", best_of=search, grid=[0, 10, 30], n=8,
                         heads_lengths=[], progress=False).table
    assert set(full["intervention"]) == {"none", best[("number", "ntk")]}


def test_summary_rules_on_known_tables():
    rows = []
    for model, accs in (("m0", {0: 1.0, 10: 0.95, 20: 0.5}), ("m1", {0: 1.0, 10: 0.8, 20: 0.9})):
        for e, a in accs.items():
            rows.append({"task": "number", "model": model, "intervention": "none", "extra_tokens": e, "seed": 0,
                         "acc": a})
            rows.append({"task": "number", "model": model, "intervention": "ntk:kappa=2", "extra_tokens": e,
                         "seed": 0, "acc": 1.0 if e < 20 else 0.95})
            rows.append({"task": "number", "model": model, "intervention": "ntk:kappa=4", "extra_tokens": e,
                         "seed": 0, "acc": 0.98})
    lg = pd.DataFrame(rows)
    per = model_reach(lg)
    assert per.set_index(["model", "intervention"]).loc[("m0", "none"), "reach"] == 10
    assert per.set_index(["model", "intervention"]).loc[("m1", "none"), "reach"] == 0  # 0.8 at +10 stops it
    s = study_summary(lg)
    none = s[s["intervention"] == "none"].iloc[0]
    assert none["reach_mean"] == 5 and math.isclose(none["reach_sd"], math.sqrt(50))
    assert best_settings(s) == {("number", "ntk"): "ntk:kappa=2"}  # κ=4 costs accuracy at +0 (0.98 < 0.99)
    assert "grid end" in summary_markdown(s)


def test_grid_and_family_helpers():
    assert drop_lowest(8, 0.25) == [1, 2, 3, 4, 5, 6] and drop_lowest(8, 0.75) == [1, 2]
    grid = study_grid(8, [3, 1])
    assert grid[0] == "none" and "freq-mask:keep=1+2,layers=1+3" in grid and len(grid) == 16
    assert family("freq-mask:keep=1+2,layers=1+3") == "freq-mask@index" and family("ntk:kappa=2") == "ntk"
    fams = {family(g) for g in grid} - {"none"}
    assert all((f, t) in PREDICTION for f in fams for t in ("number", "letter"))
    from posym.interventions import describe, parse_intervention

    assert all(describe(parse_intervention(g)) == g for g in grid)  # canonical strings (the floor written)
    assert "temperature:beta=0.5,n_train=17,floor=1" in grid
    assert "freq-mask:keep=none" in study_grid(2)  # 75 % of 2 IDs dropped: none kept, said so


def test_layers_index_is_each_models_own_index_layers():
    mask = "freq-mask:keep=1+2,layers=index"
    assert for_model(mask, [3, 1]) == "freq-mask:keep=1+2,layers=1+3" and for_model(mask, []) is None
    assert for_model("ntk:kappa=2", []) == "ntk:kappa=2"
    assert as_setting("freq-mask:keep=1+2,layers=1+3", [1, 3]) == mask
    assert as_setting("freq-mask:keep=1+2,layers=1", [1, 3]) == "freq-mask:keep=1+2,layers=1"  # not its Index layers
    # two seeds with different Index layers: one study row with both models
    lg, hd = [], []
    for model, layers in (("number-s0", [1]), ("number-s1", [0, 2])):
        for interv in ("none", for_model(mask, layers)):
            lg += [{"task": "number", "model": model, "intervention": interv, "extra_tokens": e, "seed": 0,
                    "acc": 1.0 if e == 0 else 0.5} for e in (0, 10)]
        hd += [{"task": "number", "model": model, "intervention": "none", "extra_tokens": 0, "layer": l, "head": 0,
                "s_pos": 1.0 if l in layers else 0.0, "s_sym": 0.0 if l in layers else 1.0} for l in range(3)]
    lg, hd = study_settings(pd.DataFrame(lg), pd.DataFrame(hd))
    s = study_summary(lg, hd).set_index("intervention")
    assert s.loc[mask, "n_models"] == 2 and s.loc[mask, "family"] == "freq-mask@index"


@pytest.mark.integration
def test_the_study_resolves_layers_index_per_model(runs, tmp_path, monkeypatch):
    import posym.studies.intervention_study.tables as rep
    layers_of = {"verb": [1]}  # the Index layers the verb finds on the model it measures

    def fake(t):
        return ([1] if t["model"].iloc[0].startswith("number") else []) if "model" in t else layers_of["verb"]
    monkeypatch.setattr(rep, "index_layers", fake)
    out, kw = tmp_path / "s", dict(intervene=["freq-mask:keep=1,layers=index"], grid=[0], n=4, heads_lengths=[],
                                   heads_n=2, progress=False)
    s = interventions([runs / "number"], out, **kw).table
    assert set(pd.read_csv(out / "number-s0" / "lengthgen.csv")["intervention"]) == {"none", "freq-mask:keep=1,layers=1"}
    assert set(s["intervention"]) == {"none", "freq-mask:keep=1,layers=index"}
    layers_of["verb"] = []  # a model without Index layers: the setting is not measured there, and said so
    res = interventions([runs / "letter"], out, **kw)
    assert "no Index layers, not measured: freq-mask:keep=1,layers=index" in res.summary
    assert set(pd.read_csv(out / "letter-s0" / "lengthgen.csv")["intervention"]) == {"none"}
    s = res.table
    assert set(zip(s["task"], s["intervention"])) == {("number", "none"), ("letter", "none"),
                                                       ("number", "freq-mask:keep=1,layers=index")}


@pytest.mark.integration
@pytest.mark.parametrize("kw,msg", [
    ({"intervene": ["ntk:kappa=0"]}, ">= 1"), ({"intervene": ["x:y=1"]}, "unknown intervention"),
    ({"intervene": ["ntk:kappa=2"], "best_of": "somewhere"}, "not both"),
    ({"best_of": "nowhere"}, "no interventions.csv")])
def test_bad_input_is_refused_before_any_work(runs, tmp_path, kw, msg):
    with pytest.raises(PosymError, match=msg):
        interventions([runs / "number"], tmp_path / "s", grid=[0], n=4, heads_lengths=[], progress=False, **kw)
    assert not (tmp_path / "s").exists()


@pytest.mark.integration
def test_not_a_run_and_the_same_model_twice(runs, tmp_path):
    with pytest.raises(PosymError, match="neither a posym run directory, an HF Trainer output_dir"):
        interventions([tmp_path], tmp_path / "s", progress=False)
    with pytest.raises(PosymError, match="both number-s0"):
        interventions([runs / "number", runs / "number"], tmp_path / "s", progress=False)


@pytest.mark.integration
def test_a_head_readout_of_another_prompt_count_is_refused_not_mixed(runs, tmp_path):
    out = tmp_path / "s"
    kw = dict(intervene=["ntk:kappa=2"], grid=[0], n=4, heads_lengths=[0], progress=False)
    interventions([runs / "number"], out, heads_n=2, **kw)
    before = (out / "number-s0" / "intervention_heads.csv").read_bytes()
    with pytest.raises(PosymError, match="not 3"):
        interventions([runs / "number"], out, heads_n=3, **kw)
    assert (out / "number-s0" / "intervention_heads.csv").read_bytes() == before


def test_layers_index_is_explicit_and_a_layer_number_stays_a_layer_number():
    """Item 7: ``layers=1000000`` was the stand-in for ``layers=index``, so that literal became
    ``layers=index``; now the keyword is kept apart and a layer list is a layer list."""
    from posym.studies.intervention_study.run import _settings

    assert _settings(["freq-mask:keep=1,layers=1000000"]) == ["freq-mask:keep=1,layers=1000000"]
    assert _settings(["temperature:beta=1,layers=1000000"]) == ["temperature:beta=1,n_train=17,floor=1,layers=1000000"]
    assert _settings(["freq-mask:keep=2+1,layers=index", "temperature:beta=1,layers=index"]) == [
        "freq-mask:keep=1+2,layers=index", "temperature:beta=1,n_train=17,floor=1,layers=index"]
    assert _settings(["ntk:kappa=2,layers=index"]) == ["ntk:kappa=2,layers=index"]  # per layer since issue 37
    for texts, msg in ((["freq-mask:keep=1,layers=index,layers=0"], "not a new key|given twice"),
                       (["freq-mask:keep=1,layers=index", "freq-mask:keep=1, layers=index"], "repeats")):
        with pytest.raises(PosymError, match=msg):
            _settings(texts)


@pytest.mark.integration
@pytest.mark.parametrize("setting", ["freq-mask:keep=1,layers=1000000", "temperature:beta=1,layers=1000000",
                                     "ntk:kappa=1e300", "rope-base:theta=1e-300"])
def test_an_out_of_range_setting_is_refused_and_leaves_no_model_folder(runs, tmp_path, setting):
    out = tmp_path / "s"
    with pytest.raises(PosymError) as e:
        interventions([runs / "number"], out, intervene=[setting], grid=[0], n=4, heads_lengths=[], progress=False)
    assert "\n" not in str(e.value)
    assert not (out / "number-s0").exists()


@pytest.mark.integration
def test_a_call_into_a_run_still_training_leaves_no_folder(runs, tmp_path):
    import json
    import os
    import shutil

    from posym.runs.layout import LOCK

    run = tmp_path / "live"
    shutil.copytree(runs / "number", run)  # held by a live writer (our parent), as posym train holds it
    (run / LOCK).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "started": 0}))
    with pytest.raises(PosymError, match="still training"):
        interventions([runs / "number"], run, intervene=["ntk:kappa=2"], grid=[0], n=4, heads_lengths=[],
                      progress=False)
    assert not (run / "number-s0").exists()


def test_heads_n_zero_is_refused_as_the_cli_does(tmp_path):
    with pytest.raises(PosymError, match="heads_n=0"):
        interventions([tmp_path], tmp_path / "s", heads_n=0, heads_lengths=[0], progress=False)
    assert not (tmp_path / "s").exists()


def test_settings_display_shows_each_models_settings_when_they_differ():
    from posym.studies.intervention_study import settings_display

    a = {"runs": {"number-s0": "r/n"}, "grid": [0, 10], "n": 16}
    b = {"runs": {"letter-s0": "r/l"}, "grid": [0, 20], "n": 8}
    shown = settings_display({"calls": [a, b]})
    assert "different settings" in shown["note"]
    assert shown["number-s0"] == {"run": "r/n", "grid": [0, 10], "n": 16}
    assert shown["letter-s0"] == {"run": "r/l", "grid": [0, 20], "n": 8}
    same = settings_display({"calls": [a, {**a, "runs": {"number-s1": "r/n1"}}]})
    assert same == {"models": {"number-s0": "r/n", "number-s1": "r/n1"}, "grid": [0, 10], "n": 16}
    assert settings_display({"grid": [0, 10], "n": 8})["grid"] == [0, 10]  # an older record: one call


@pytest.mark.integration
def test_two_calls_into_one_folder_keep_both_calls_settings(runs, tmp_path):
    import json

    out = tmp_path / "mix"
    interventions([runs / "number"], out, intervene=["ntk:kappa=2"], grid=[0, 10], n=4, heads_lengths=[0], heads_n=2,
                  progress=False)
    interventions([runs / "letter"], out, intervene=["temperature:beta=1"], grid=[0, 20], n=8, heads_lengths=[0],
                  heads_n=3, progress=False)
    calls = json.loads((out / "interventions.json").read_text())["calls"]
    assert [(list(c["runs"]), c["grid"], c["n"], c["heads_n"]) for c in calls] == [
        (["number-s0"], [0, 10], 4, 2), (["letter-s0"], [0, 20], 8, 3)]
    page = (out / "interventions.html").read_text()
    assert "different settings" in page and "number-s0" in page and "letter-s0" in page


def test_a_string_setting_and_a_folder_of_other_files(runs, tmp_path):
    """``intervene="ntk:kappa=2"`` (a str) is one setting, not its characters; a study written into a
    folder of other files says so and replaces nothing (issue 34: both were silent)."""
    out = tmp_path / "notes"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    res = interventions([runs / "number"], out, intervene="ntk:kappa=2", grid=[0], n=4, heads_lengths=[],
                        progress=False)
    assert set(res.data["lengthgen"]["intervention"]) == {"none", "ntk:kappa=2"}
    assert "held other files and no study" in res.summary and (out / "mine.txt").read_text() == "keep"


@pytest.mark.integration
def test_a_lengthgen_refusal_inside_the_study_names_no_force(runs, tmp_path):
    out, kw = tmp_path / "s", dict(intervene=["ntk:kappa=2"], grid=[0], heads_lengths=[], progress=False)
    interventions([runs / "number"], out, n=4, **kw)
    with pytest.raises(PosymError) as e:
        interventions([runs / "number"], out, n=8, **kw)
    assert "--force to" not in str(e.value) and "has no --force" in str(e.value) and "number-s0" in str(e.value)


@pytest.fixture(scope="module")
def study(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("iv") / "study"
    interventions([runs / "number", runs / "letter"], out, intervene=["ntk:kappa=2"], grid=[0, 10], n=4,
                  heads_lengths=[0], heads_n=2, progress=False)
    return out


def _copy(study, tmp_path):
    import shutil

    dst = tmp_path / "cor"
    shutil.copytree(study, dst)
    for p in dst.rglob("*.parquet"):
        p.unlink()
    return dst


@pytest.mark.integration
@pytest.mark.parametrize("where, text, msg", [
    ("letter-s0/lengthgen.csv", "garbage\x00\x01\n", "lacks the column"),
    ("letter-s0/lengthgen.csv", "", "empty"),
    ("number-s0/intervention_heads.csv", "garbage\n", "lacks the column"),
    ("number-s0/intervention_heads.csv", "", "empty"),
    ("number-s0/intervention_heads.csv", "intervention,extra_tokens\nnone,0\n", "lacks the column"),
    ("number-s0/intervention_heads.csv", "s_pos=7.5", "not a score in"),
    ("number-s0/intervention_heads.csv", "duplicate", "repeat the point")])
def test_corrupt_model_folder_tables_are_one_line_errors(study, tmp_path, where, text, msg):
    """Probe T3/N6: KeyError / EmptyDataError tracebacks, or a corrupt row (s_pos 7.5, a row twice) kept."""
    out = _copy(study, tmp_path)
    path = out / where
    if text == "s_pos=7.5":
        t = pd.read_csv(path)
        t.loc[0, "s_pos"] = 7.5
        t.to_csv(path, index=False)
    elif text == "duplicate":
        t = pd.read_csv(path)
        pd.concat([t, t.iloc[[0]]]).to_csv(path, index=False)
    else:
        path.write_text(text)
    before = path.read_bytes()
    with pytest.raises(PosymError, match=msg) as e:
        interventions([runs_of(study, "number")], out, intervene=["ntk:kappa=2"], grid=[0, 10], n=4,
                      heads_lengths=[0], heads_n=2, progress=False)
    assert "\n" not in str(e.value) and path.read_bytes() == before


def runs_of(study, task):
    import json

    return json.loads((study / "interventions.json").read_text())["calls"][0]["runs"][f"{task}-s0"]


@pytest.mark.integration
@pytest.mark.parametrize("text, msg", [("garbage\n", "lacks the column"), ("", "cannot read"),
                                       ("task,intervention,family,acc_0_mean,reach_mean,acc_grid_mean\n", "no rows")])
def test_a_corrupt_best_of_table_is_a_one_line_error(runs, tmp_path, text, msg):
    search = tmp_path / "search"
    search.mkdir()
    (search / "interventions.csv").write_text(text)
    with pytest.raises(PosymError, match=msg) as e:
        interventions([runs / "number"], tmp_path / "s", best_of=search, grid=[0], n=4, heads_lengths=[], progress=False)
    assert "\n" not in str(e.value) and not (tmp_path / "s").exists()
