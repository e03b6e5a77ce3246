"""The training-time encodings study (``posym pe-study``): known answers on hand-made reproduction
directories, the refusals, and one end-to-end run on tiny reproductions."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.studies.encodings.tables import (Q_DOMINANT, Q_DOMINANT_POSITIONAL, Q_INTERVENTION, Q_REACH, Q_SEEDS, Q_TEST,
                                            Q_UNROTATED, dominant_ids, dominant_text, goal_line, pure_count_curves,
                                            q_accuracy, q_milestone, q_pure, seed_reaches, study_markdown, study_table,
                                            unrotated_share, variant_pe)
from posym.runs import layout

HOPS = [f"acc_hop{h}" for h in range(1, 5)]


def make_run(root: Path, task: str, seed: int, pe: str | None, *, test_acc: float = 1.0,
             crossings: tuple = (100, 200, 300, 400), curve: dict | None = None, kinds: tuple = (),
             dominant: tuple = (), use: tuple = ()) -> Path:
    """A finished run directory with hand-made tables: validation accuracy of hop h jumps from 0.5 to 1
    at step ``crossings[h-1]`` (None: never), Fig. 5B ``curve`` {extra: acc}, final head ``kinds``,
    ``dominant`` (dominant_id, dominant_angle) per head and ``use`` (angle, use) per frequency term."""
    run = layout.run_dir(root, task, seed)
    run.mkdir(parents=True)
    config = {"steps": 500} | ({"pe": pe} if pe is not None else {})
    (run / layout.POSYM_JSON).write_text(json.dumps({"config": config, "task": task}))
    (run / layout.RESULTS).write_text("{}")
    steps = [0, 100, 200, 300, 400, 500]
    val = [{"split": "val", "step": s, **{h: (1.0 if c is not None and s >= c else 0.5) for h, c in zip(HOPS, crossings)}}
           for s in steps]
    for r in val:
        r["acc"] = sum(r[h] for h in HOPS) / 4
    test = {"split": "test", "step": 500, "acc": test_acc, **{h: test_acc / 2 for h in HOPS}}  # global != per hop
    pd.DataFrame(val + [test]).to_csv(run / layout.METRICS, index=False)
    if kinds:
        pd.DataFrame({"layer": range(len(kinds)), "head": 0, "kind": list(kinds),
                      "pure_from": [100 if k != "mixed" else None for k in kinds], "s_pos_final": 0.5,
                      "s_sym_final": 0.5}).to_csv(run / layout.purity(0.1), index=False)
        pd.DataFrame({"step": steps, "positional": [min(s // 100, kinds.count("positional")) for s in steps],
                      "symbolic": kinds.count("symbolic")}).to_csv(run / layout.pure_counts_csv(0.1), index=False)
    if curve:
        pd.DataFrame({"extra_tokens": list(curve), "acc_mean": list(curve.values()), "acc_sd": 0.0,
                      "n_seeds": 1}).to_csv(layout.summary_path(run / layout.LENGTHGEN), index=False)
    if dominant:
        pd.DataFrame({"layer": range(len(dominant)), "head": 0, "weighted_id": 1.0, "weighted_angle": 1.0,
                      "dominant_id": [d for d, _ in dominant], "dominant_angle": [a for _, a in dominant],
                      "nonrotary_share": 0.0}).to_csv(run / layout.FREQ_TABLE, index=False)
    if use:
        pd.DataFrame({"layer": 0, "head": 0, "freq_id": range(1, len(use) + 1), "angle": [a for a, _ in use],
                      "rotary": True, "use": [u for _, u in use]}).to_csv(run / layout.FREQ_USE, index=False)
    return run


def cell(table: pd.DataFrame, variant: str, task: str, quantity: str) -> pd.Series:
    r = table[(table.variant == variant) & (table.task == task) & (table.quantity == quantity)]
    assert len(r) == 1, (variant, task, quantity)
    return r.iloc[0]


@pytest.fixture
def study(tmp_path) -> dict[str, Path]:
    """Three hand-made variants of the number task (two seeds each):

    * ``rope``: test accuracy 1.00 / 0.98, reaches +20 / +10 (mean 15: the goal's bar is +150), hop 4
      never reaches 0.9 in seed 1;
    * ``nope``: test accuracy 1.00 / 1.00, reaches +200 / +100 (mean 150: exactly the bar);
    * ``prope``: test accuracy 0.95, reach +1,000 (the grid's end) in both seeds, heads on angle-0 pairs.
    """
    rope, nope, prope = tmp_path / "rope", tmp_path / "nope", tmp_path / "prope"
    make_run(rope, "number", 0, None, test_acc=1.0, curve={0: 1.0, 10: 0.95, 20: 0.92, 30: 0.85, 50: 0.6},
             kinds=("positional", "symbolic", "mixed"), dominant=((37, 0.01), (38, 0.009), (37, 0.01)),
             use=((1.0, 3.0), (0.1, 1.0)))
    make_run(rope, "number", 1, "rope", test_acc=0.98, crossings=(200, 300, 400, None),
             curve={0: 1.0, 10: 0.91, 20: 0.8, 30: 0.5, 50: 0.4}, kinds=("positional", "positional", "symbolic"),
             dominant=((37, 0.01), (12, 0.3), (12, 0.3)), use=((1.0, 1.0), (0.1, 1.0)))
    for seed, reach in ((0, 200), (1, 100)):
        make_run(nope, "number", seed, "nope", curve={0: 1.0, reach: 0.9, reach + 1: 0.5, 1000: 0.1},
                 kinds=("symbolic", "symbolic", "symbolic"), dominant=((1, 0.0), (2, 0.0), (3, 0.0)),
                 use=((0.0, 2.0), (0.0, 2.0)))
    for seed in (0, 1):
        make_run(prope, "number", seed, "p-rope:0.5", test_acc=0.95, curve={0: 1.0, 500: 0.95, 1000: 0.92},
                 kinds=("positional", "symbolic", "symbolic"), dominant=((1, 1.0), (40, 0.0), (41, 0.0)),
                 use=((1.0, 1.0), (0.0, 3.0)))
    return {"rope": rope, "nope": nope, "prope": prope}


def test_study_table_known_answers(study):
    t = study_table(study)
    assert dict(zip(t.variant, t.pe)) == {"rope": "rope", "nope": "nope", "prope": "p-rope:0.5"}
    assert cell(t, "rope", "number", Q_SEEDS).cell == "2 (0, 1)"
    acc = cell(t, "rope", "number", Q_TEST)
    assert acc["mean"] == pytest.approx(0.99) and acc.sd == pytest.approx(0.02 / math.sqrt(2))
    assert acc.cell == "0.990 ± 0.014"
    h1 = cell(t, "rope", "number", q_milestone(1))
    assert (h1["mean"], h1.n, h1.cell) == (150.0, 2, "150 ± 71")
    h4 = cell(t, "rope", "number", q_milestone(4))  # seed 1's hop 4 never crosses: left out, counted
    assert (h4["mean"], h4.n, h4.n_missing, h4.cell) == (400.0, 1, 1, "400 (1 never)")
    pos, sym = cell(t, "rope", "number", q_pure("positional")), cell(t, "rope", "number", q_pure("symbolic"))
    assert (pos["mean"], sym["mean"], pos.cell) == (1.5, 1.0, "1.5 ± 0.7 (of 3)")
    assert cell(t, "rope", "number", Q_DOMINANT).cell == "ID 37 ×3, 12 ×2, 38 ×1"
    assert cell(t, "nope", "number", Q_DOMINANT).cell == "6 heads on angle-0 pairs"  # no frequency ID at all
    assert cell(t, "prope", "number", Q_DOMINANT).cell == "ID 1 ×2; 4 heads on angle-0 pairs"
    # pure positional heads: rope seed 0 layer 0 (ID 37), seed 1 layers 0, 1 (IDs 37, 12); prope layer 0 (ID 1)
    assert cell(t, "rope", "number", Q_DOMINANT_POSITIONAL).cell == "ID 37 ×2, 12 ×1"
    assert cell(t, "prope", "number", Q_DOMINANT_POSITIONAL).cell == "ID 1 ×2"
    assert cell(t, "nope", "number", Q_DOMINANT_POSITIONAL).cell == "no such heads"
    assert cell(t, "rope", "number", Q_UNROTATED)["mean"] == 0.0
    assert cell(t, "nope", "number", Q_UNROTATED)["mean"] == 1.0
    assert cell(t, "prope", "number", Q_UNROTATED)["mean"] == pytest.approx(0.75)
    at10 = cell(t, "rope", "number", q_accuracy(50))  # Paper A's +50: mean over the seeds' curves
    assert at10["mean"] == pytest.approx(0.5) and at10.cell == "0.50 ± 0.14"
    assert cell(t, "rope", "number", q_accuracy(300)).cell == "— (not on the grid)"
    reach = cell(t, "rope", "number", Q_REACH)
    assert (reach["mean"], reach.cell) == (15.0, "+15 ± 7")
    assert cell(t, "prope", "number", Q_REACH).cell == "+1,000 ± 0 (2 at the grid end +1,000)"
    md = study_markdown(t, "GOAL")
    assert md.splitlines()[:3] == ["| task | quantity | rope | nope | prope |", "|---|---|---|---|---|",
                                   "|  | --pe (posym.json) | rope | nope | p-rope:0.5 |"]
    assert md.endswith("\n\nGOAL")


def test_goal_line_known_answers(study):
    t = study_table(study)
    head = "goal (number task: test accuracy ≥ 0.99 and reach ≥ 10 × rope's +15 = +150)"
    assert goal_line(t) == f"{head}: met by nope (reach +150, accuracy 1.000)"  # the bar itself counts
    t.loc[(t.variant == "nope") & (t.quantity == Q_REACH), "mean"] = 140.0
    assert goal_line(t) == (f"{head}: not met — the largest reach with accuracy ≥ 0.99 is nope (reach +140, "
                            "accuracy 1.000)")  # prope reaches further but does not learn the task to 0.99
    t.loc[(t.variant == "prope") & (t.quantity == Q_TEST), "mean"] = 0.995
    t.loc[(t.variant == "prope") & (t.quantity == Q_REACH), ["mean", "grid_end"]] = [100.0, 100]
    assert goal_line(t).endswith("nope (reach +140, accuracy 1.000)")
    t.loc[(t.variant == "nope") & (t.quantity == Q_TEST), "mean"] = 0.9
    assert goal_line(t).endswith("is prope (reach +100, accuracy 0.995); its grid ends at +100, below the bar: "
                                 "measure it on a longer grid")
    assert goal_line(t[t.variant != "rope"]).endswith("not evaluated — no variant's number-task runs were trained "
                                                       "with --pe rope")


def test_dominant_and_reach_helpers_on_hand_made_tables():
    ft = pd.DataFrame({"dominant_id": [5, 5, 9, 33, -1], "dominant_angle": [0.3, 0.3, 0.1, 0.0, float("nan")]})
    ids, unrotated, unused = dominant_ids([ft, ft])
    assert (ids, unrotated, unused) == (Counter({5: 4, 9: 2}), 2, 2)
    assert dominant_text(ids, unrotated, unused) == "ID 5 ×4, 9 ×2; 2 heads on angle-0 pairs; 2 without frequency use"
    assert dominant_text(Counter({1: 1, 2: 1, 3: 1, 4: 1}), 0) == "ID 1 ×1, 2 ×1, 3 ×1, …"
    assert unrotated_share(pd.DataFrame({"angle": [0.0, 0.5, 0.0], "use": [1.0, 2.0, 1.0]})) == 0.5
    assert math.isnan(unrotated_share(pd.DataFrame({"angle": [0.0], "use": [0.0]})))
    curve = lambda d: pd.DataFrame({"extra_tokens": list(d), "acc_mean": list(d.values())})  # noqa: E731
    reaches, never, at_end, end = seed_reaches([curve({0: 1.0, 10: 0.9, 20: 0.95, 30: 0.2}),
                                                curve({0: 0.5, 10: 1.0}), curve({0: 1.0, 10: 1.0})])
    assert (reaches, never, at_end, end) == ([20.0, 10.0], 1, 1, 10)


def test_pure_count_curves_over_seeds(study):
    c = pure_count_curves({"rope": study["rope"]})
    last = c[c.step == 500].iloc[0]
    assert (last.positional_mean, last.symbolic_mean, last.n_seeds) == (1.5, 1.0, 2)
    assert last.positional_sd == pytest.approx(math.sqrt(0.5))


def test_refusals(study, tmp_path, capsys):
    """Runs that disagree on --pe, a folder without runs, one directory under two names, an existing
    output: one line each, before anything is written."""
    make_run(study["nope"], "letter", 0, "rope-base:500000")
    with pytest.raises(PosymError, match=r"variant 'n': its runs disagree on the positional encoding .*nope.*"
                                          r"rope-base:500000"):
        variant_pe("n", study["nope"])
    out = tmp_path / "out"
    assert main(["pe-study", f"r={study['rope']}", f"n={study['nope']}", "--out", str(out)]) == 2
    assert "disagree on the positional encoding" in capsys.readouterr().err and not out.exists()
    (tmp_path / "empty").mkdir()
    assert main(["pe-study", f"e={tmp_path / 'empty'}", "--out", str(out)]) == 2
    assert "holds no finished run" in capsys.readouterr().err
    assert main(["pe-study", f"a={study['rope']}", f"b={study['rope']}/", "--out", str(out)]) == 2
    assert "are the same" in capsys.readouterr().err and not out.exists()
    assert main(["pe-study", f"a={study['rope']}", "--out", str(out)]) == 0
    assert main(["pe-study", f"a={study['rope']}", "--out", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err


def test_pe_study_writes_table_page_and_figures(study, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["pe-study", *[f"{k}={v}" for k, v in study.items()], "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "met by nope (reach +150, accuracy 1.000)" in printed
    table = pd.read_csv(out / layout.PE_STUDY)
    assert set(table.pe) == {"rope", "nope", "p-rope:0.5"}
    assert (out / layout.PE_STUDY_MD).read_text().startswith("| task | quantity | rope | nope | prope |")
    page = (out / layout.PE_STUDY_HTML).read_text()
    assert "p-rope:0.5" in page and "met by nope" in page and page.count("data:image/png;base64,") == 2
    counts = pd.read_csv(out / layout.PE_PURE_COUNTS)
    assert set(counts.variant) == {"rope", "nope", "prope"}
    curves = pd.read_csv(out / layout.VARIANT_CURVES)
    assert curves[(curves.variant == "nope") & (curves.extra_tokens == 0)].acc_mean.tolist() == [1.0]
    assert all((out / f"{stem}.png").is_file() for stem in (layout.FIG_PE_PURE_COUNTS, layout.FIG_VARIANT_CURVES))


def test_quick_preset_passes_train_pe_to_the_training(monkeypatch, tmp_path):
    """``posym reproduce --preset quick --set train.pe=p-rope:0.25``: the training stage builds its
    config with that encoding (the quick preset's own training, not the test preset's)."""
    import posym.verbs.train as verbs_train
    from posym.verbs.reproduce import Context, stage_train
    from posym.verbs.settings import overrides_from_pairs, preset_settings, validate_settings

    settings = preset_settings("quick", overrides_from_pairs({"train.pe": "p-rope:0.25"}))
    validate_settings(settings, ("number", "letter"))
    seen = {}

    class Done(Exception):
        pass

    def capture(cfg, out, **kw):
        seen["cfg"] = cfg
        raise Done

    monkeypatch.setattr(verbs_train, "train", capture)
    with pytest.raises(Done):
        stage_train(Context(out=str(tmp_path), settings=settings, progress=False), "number", 0)
    assert seen["cfg"].pe == "p-rope:0.25" and seen["cfg"].preset == "quick" and seen["cfg"].steps == 1500


def test_tiny_reproductions_of_two_encodings(tiny_repro, tmp_path):
    """``reproduce --set train.pe=nope`` writes nope into every run's posym.json; the study reads it and
    lines the two reproductions up (the tiny preset's runs: only the columns are checked, not values)."""
    from posym.verbs.reproduce import reproduce

    nope = tmp_path / "nope"
    reproduce("tiny", out=nope, seeds=1, jobs=1, llm=False, tasks=("number",), progress=False,
              overrides={"train": {"pe": "nope"}})
    assert layout.read_json(nope / "number" / "seed0" / layout.POSYM_JSON)["config"]["pe"] == "nope"
    assert variant_pe("rope", tiny_repro) == "rope" and variant_pe("nope", nope) == "nope"
    out = tmp_path / "study"
    assert main(["pe-study", f"rope={tiny_repro}", f"nope={nope}", "--out", str(out)]) == 0
    t = pd.read_csv(out / layout.PE_STUDY)
    assert set(t[t.variant == "nope"].task) == {"number"} and set(t[t.variant == "rope"].task) == {"number", "letter"}
    assert cell(t, "nope", "number", Q_UNROTATED)["mean"] == 1.0  # every NoPE angle is 0
    assert cell(t, "nope", "number", Q_DOMINANT).cell.endswith("heads on angle-0 pairs")
    assert "ID " not in cell(t, "nope", "number", Q_DOMINANT).cell
    assert cell(t, "rope", "number", Q_UNROTATED)["mean"] == 0.0


def test_pe_study_beside_an_interventions_study_makes_one_page(study, tmp_path):
    """pe-study into the folder of an interventions study: interventions.html gains the encodings section
    (its own table and figures stay); rebuilding the interventions page keeps it."""
    import json

    from posym.studies.intervention_study import study_summary
    from posym.studies._page import write_page

    out = tmp_path / "iv"
    out.mkdir()
    lg = pd.DataFrame([{"task": "number", "model": "number-s0", "intervention": iv, "extra_tokens": e, "seed": 0,
                        "acc": a} for iv, accs in (("none", (1.0, 0.5)), ("ntk:kappa=2", (1.0, 0.95)))
                       for e, a in zip((0, 10), accs)])
    study_summary(lg).to_csv(out / layout.INTERVENTIONS, index=False)
    (out / layout.INTERVENTIONS_JSON).write_text(json.dumps({"grid": [0, 10], "n": 8}))
    assert main(["pe-study", *[f"{k}={v}" for k, v in study.items()], "--out", str(out)]) == 0
    page = (out / layout.INTERVENTIONS_HTML).read_text()
    assert "Training-time encodings (posym pe-study)" in page and "met by nope" in page
    assert "ntk:kappa=2" in page and page.count("data:image/png;base64,") == 2  # the two pe-study figures
    write_page(out)  # what `posym interventions` does at the end of every call
    assert (out / layout.INTERVENTIONS_HTML).read_text().count("met by nope") == 1


def test_another_lengthgen_table_feeds_fig5b_and_the_reach(study, tmp_path, capsys):
    """``--lengthgen lengthgen_paper.csv``: the reach, the +N accuracies and Fig. 5B come from that table
    of each run (here a longer grid on which rope seed 0 reaches +3,000, seed 1 +1,000, where present);
    the other quantities do not change; a path or a table no run holds is refused in one line."""
    for seed, reach in ((0, 3000), (1, 1000)):
        run = layout.run_dir(study["rope"], "number", seed)
        pd.DataFrame({"extra_tokens": [0, reach, 5000], "acc_mean": [1.0, 0.95, 0.2], "acc_sd": 0.0,
                      "n_seeds": 1}).to_csv(layout.summary_path(run / "lengthgen_paper.csv"), index=False)
    default, other = study_table(study), study_table(study, lengthgen="lengthgen_paper.csv")
    assert cell(default, "rope", "number", Q_REACH).cell == "+15 ± 7"
    reach = cell(other, "rope", "number", Q_REACH)
    assert (reach["mean"], reach.cell) == (2000.0, "+2,000 ± 1,414")
    assert cell(other, "rope", "number", q_accuracy(5000))["mean"] == pytest.approx(0.2)
    assert cell(other, "nope", "number", Q_REACH).cell == "—"  # nope's runs have no such table
    (layout.summary_path(layout.run_dir(study["rope"], "number", 1) / "lengthgen_paper.csv")).unlink()
    one = study_table(study, lengthgen="lengthgen_paper.csv")  # only seed 0 has the table: said in the cells
    assert cell(one, "rope", "number", Q_REACH).cell == "+3,000 (1 of 2 models)"
    assert cell(one, "rope", "number", q_accuracy(5000)).cell == "0.20 (1 of 2 models)"
    assert cell(other, "rope", "number", Q_TEST).cell == cell(default, "rope", "number", Q_TEST).cell
    out = tmp_path / "out"
    args = ["pe-study", *[f"{k}={v}" for k, v in study.items()], "--out", str(out)]
    assert main([*args, "--lengthgen", "runs/lengthgen_paper.csv"]) == 2
    assert "not a path" in capsys.readouterr().err and not out.exists()
    assert main([*args, "--lengthgen", "lengthgen_long.csv"]) == 2
    assert "no run of these variants holds lengthgen_long_summary.csv" in capsys.readouterr().err
    assert main([*args, "--lengthgen", "lengthgen_paper.csv"]) == 0
    curves = pd.read_csv(out / layout.VARIANT_CURVES)
    assert sorted(curves[curves.variant == "rope"].extra_tokens) == [0, 3000, 5000]
    assert "read each run's lengthgen_paper.csv" in (out / layout.PE_STUDY_MD).read_text()
    layout.summary_path(layout.run_dir(study["rope"], "number", 0) / "lengthgen_paper.csv").write_text("")
    assert main([*args, "--lengthgen", "lengthgen_paper.csv", "--force"]) == 2  # a corrupt table: one line
    assert "lengthgen_paper_summary.csv is empty; measure it again" in capsys.readouterr().err


def test_a_length_table_of_two_interventions_shows_the_untouched_model(study, tmp_path, capsys):
    """`posym lengthgen RUN --intervene none --intervene ntk:kappa=4 --out RUN/lengthgen_iv.csv`: the old
    study showed the mean of the two (0.50 at +0) with their spread as an sd over 'n_seeds 1'."""
    run = layout.run_dir(study["rope"], "number", 0)
    pd.DataFrame([{"intervention": iv, "extra_tokens": x, "acc_mean": a, "acc_sd": 0.0, "n_seeds": 1}
                  for iv, pts in (("none", ((0, 1.0), (10, 0.95), (50, 0.5))),
                                  ("ntk:kappa=4", ((0, 0.0), (10, 0.0), (50, 0.0))))
                  for x, a in pts]).to_csv(layout.summary_path(run / "lengthgen_iv.csv"), index=False)
    t = study_table(study, lengthgen="lengthgen_iv.csv")
    at0 = cell(t, "rope", "number", q_accuracy(0))
    assert (at0["mean"], at0.n, at0.cell) == (1.0, 1, "1.00 (1 of 2 models)")
    assert cell(t, "rope", "number", Q_REACH).cell == "+10 (1 of 2 models)"
    assert cell(t, "rope", "number", Q_INTERVENTION).cell == ("untouched model (intervention none); the tables "
                                                              "also hold ntk:kappa=4 (not shown)")
    ntk = study_table(study, lengthgen="lengthgen_iv.csv", intervention="ntk:kappa=4")
    assert cell(ntk, "rope", "number", q_accuracy(0))["mean"] == 0.0
    assert cell(ntk, "rope", "number", Q_REACH).cell.startswith("never")
    out = tmp_path / "out"
    args = ["pe-study", *[f"{k}={v}" for k, v in study.items()], "--out", str(out), "--lengthgen", "lengthgen_iv.csv"]
    assert main(args) == 0
    curves = pd.read_csv(out / layout.VARIANT_CURVES)
    rope0 = curves[(curves.variant == "rope") & (curves.extra_tokens == 0)]
    assert len(rope0) == 1 and rope0.acc_mean.iloc[0] == 1.0 and rope0.n_seeds.iloc[0] == 1
    assert math.isnan(rope0.acc_sd.iloc[0]) and rope0.intervention.iloc[0] == "none"
    md = (out / layout.PE_STUDY_MD).read_text()
    assert "read each run's lengthgen_iv.csv — untouched model (intervention none); the tables also hold ntk" in md
    assert "untouched model (intervention none)" in (out / layout.PE_STUDY_HTML).read_text()
    assert main([*args, "--force", "--intervention", "ntk:kappa=2"]) == 2
    assert "holds rows of intervention 'ntk:kappa=2' (they hold none, ntk:kappa=4)" in capsys.readouterr().err
    assert main([*args, "--force", "--intervention", "ntk:kappa=4"]) == 0
    curves = pd.read_csv(out / layout.VARIANT_CURVES)
    assert set(curves.intervention) == {"ntk:kappa=4"} and set(curves.variant) == {"rope"}


def test_a_summary_value_out_of_range_is_refused_before_writing(study, tmp_path, capsys):
    """N7: a run's lengthgen_summary.csv with acc_mean 7.5 read 'accuracy at +0: 7.50'."""
    path = layout.summary_path(layout.run_dir(study["rope"], "number", 1) / layout.LENGTHGEN)
    path.write_text(path.read_text().replace("1.0,0.0,1", "7.5,0.0,1", 1))
    out = tmp_path / "out"
    assert main(["pe-study", *[f"{k}={v}" for k, v in study.items()], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "number/seed1/lengthgen_summary.csv row 1: acc_mean = '7.5' is not a number in [0, 1]" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_variants_of_two_architectures_are_refused(tmp_path, capsys):
    """The encodings study compares encodings of one architecture: a GPT-J variant beside a Llama one
    (posym train --arch llama) is one line, before anything is written."""
    gptj, llama = tmp_path / "gptj", tmp_path / "llama"
    make_run(gptj, "number", 0, "rope")
    run = make_run(llama, "number", 0, "rope")
    meta = json.loads((run / layout.POSYM_JSON).read_text())
    meta["config"]["arch"] = "llama"
    (run / layout.POSYM_JSON).write_text(json.dumps(meta))
    out = tmp_path / "out"
    assert main(["pe-study", f"g={gptj}", f"l={llama}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "the variants mix architectures (variant 'g': gptj, variant 'l': llama)" in err and not out.exists()
