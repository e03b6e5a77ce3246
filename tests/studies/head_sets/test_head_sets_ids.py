"""``posym head-sets --match ids`` (issue 37 points 2–3; docs/head_sets.md): the frequency control — the
typed set's own heads with k random frequency IDs dropped. Its draws are distinct, exhaustive when few and
never the tested IDs; on tests/known_heads' model (L1H2 carries the answer through ID 1) dropping that ID
inside the set sits at the p floor against the random-ID controls, a direction without it shows nothing;
the random direction and an explicit ``--intervene`` are one line, exit 2, under ids."""

from __future__ import annotations

import json
import math
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.errors import PosymError
from posym.studies.head_sets import NULLS, measure_head_sets, plot_dose_curves
from posym.studies.head_sets.tables import dropped_ids, id_control_draws

K = 6


def test_id_control_draws_are_distinct_exclude_the_tested_ids_and_are_all_of_them_when_few():
    # n_freq = 4, k = 2: C(4, 2) = 6 subsets, 5 other than the tested {1, 2}: K = 20 asks gives all 5
    draws = id_control_draws(2, 4, 20, 0, exclude=(1, 2))
    ids = [d for _, d in draws]
    assert len(ids) == 5 and len(set(ids)) == 5 and (1, 2) not in ids
    assert sorted(ids) == sorted(c for c in combinations(range(1, 5), 2) if c != (1, 2))
    # each draw is reproduced by its recorded seed (numpy.random.default_rng(seed + j).permutation(1..n)[:k], sorted)
    for s, d in draws:
        assert d == tuple(sorted(np.random.default_rng(s).permutation(np.arange(1, 5))[:2].tolist()))
        assert d == dropped_ids("random", 2, 4, s)
    assert [s for s, _ in draws] == sorted(s for s, _ in draws) and draws[0][0] >= 0
    # fewer asked than exist: K distinct, the first K of the same sequence
    assert id_control_draws(2, 4, 3, 0, exclude=(1, 2)) == draws[:3]
    # without exclude every subset may be drawn: all 6
    assert len(id_control_draws(2, 4, 20, 0)) == 6
    # many subsets: exactly K distinct, none the tested one
    many = id_control_draws(3, 32, 50, 7, exclude=(30, 31, 32))
    assert len(many) == 50 and len({d for _, d in many}) == 50 and (30, 31, 32) not in {d for _, d in many}
    assert all(len(d) == 3 and all(1 <= i <= 32 for i in d) for _, d in many)
    k1 = id_control_draws(1, 8, 100, 3, exclude=(1,))
    assert sorted(d for _, d in k1) == [(i,) for i in range(2, 9)] and len(k1) == math.comb(8, 1) - 1


@pytest.mark.parametrize("args, what", [((2, 2, 5, 0), "k = 2"), ((0, 8, 5, 0), "--doses"), ((1, 8, 0, 0), "--controls")])
def test_id_control_draws_bad_input_is_one_line(args, what):
    with pytest.raises(PosymError, match=what) as e:
        id_control_draws(*args)
    assert "\n" not in str(e.value)


def _readout(typed: str = "L1H2") -> pd.DataFrame:
    rows = [{"layer": ly, "head": h, "posym_type": "mixed"} for ly in range(2) for h in range(4)]
    df = pd.DataFrame(rows)
    mine = df["head"].astype(str).radd("H").radd(df["layer"].astype(str).radd("L"))
    df.loc[mine == typed if typed != "all" else slice(None), "posym_type"] = "positional"
    return df


@pytest.mark.medium  # about 1 s
def test_known_answer_under_ids():
    """L1H2 carries the answer through ID 1 (gptj): dropping ID 1 inside it (high, k = 1) hurts, every one of
    the 6 random single IDs does nothing (p at the floor 1/7, the smallest BH p); with k = 2 the controls
    that also drop ID 1 hurt as much and the others nothing, p = (1 + their number)/(1 + K); the low
    direction (IDs 8, 7+8) shows no effect; a set holding every head of the model is allowed."""
    from posym.interventions import intervened
    from posym.lengthgen.outcomes import prompt_outcomes

    from known_heads import build_known_answer_model

    torch.set_num_threads(1)
    model, ids, labels = build_known_answer_model("gptj", (1, 2), 1, n_prompts=32, length=6)
    memo: dict[str, pd.DataFrame] = {}

    def evaluate(iv: str, extra: int) -> pd.DataFrame:
        if iv not in memo:
            memo[iv] = prompt_outcomes(model, ids, labels, intervene=lambda: intervened(model, iv))
        return memo[iv]

    table, controls, notes = measure_head_sets(
        evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional",), controls=K, seed=0,
        doses=(1, 2), directions=("low", "high"), readout_name="hand-made", match="ids")
    assert notes == ["--match ids: the per-head intervention part is skipped (no frequency control; --match layer|count "
                     "measures it)"]
    assert set(table["part"]) == {"dose"} and set(table["match"]) == {"ids"} and set(table["heads"]) == {"L1H2"}
    assert set(controls["heads"]) == {"L1H2"} and (controls["intervention"].str.endswith(",heads=L1H2")).all()
    t = table.set_index(["what", "k"])
    hit = t.loc[("high", 1)]
    assert hit["effect"] > 0.5 and hit["effect_lo"] > 0.3 and hit["n_controls"] == K
    assert hit["p"] == pytest.approx(1 / (1 + K)) and hit["p_bh"] == table["p_bh"].min()
    for key in (("low", 1), ("low", 2)):
        assert t.loc[key, "effect"] == 0 and t.loc[key, "p"] == 1.0
    c = controls.set_index(["what", "k"])
    for (what, k), g in c.groupby(level=[0, 1]):
        own = t.loc[(what, k), "dropped"]
        assert len(g) == K and g["dropped"].nunique() == K and own not in set(g["dropped"])
        assert all(f"keep={'+'.join(str(i) for i in range(1, 9) if str(i) not in d.split('+'))}," in iv
                   for d, iv in zip(g["dropped"], g["intervention"]))
        with_pair = g["dropped"].str.split("+").apply(lambda x: "1" in x)
        assert (g.loc[with_pair, "effect"] > 0.5).all() and (g.loc[~with_pair, "effect"] == 0).all()
    g2 = c.loc[("high", 2)]
    m = int(g2["dropped"].str.split("+").apply(lambda x: "1" in x).sum())
    assert t.loc[("high", 2), "effect"] > 0.5 and t.loc[("high", 2), "p"] == pytest.approx((1 + m) / (1 + K))
    # k = 1 has 7 other IDs: asking 10 gives all 7 (the exact null, floor 1/8)
    t10, c10, _ = measure_head_sets(evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional",),
                                    controls=10, doses=(1,), directions=("high",), temperature=(), match="ids")
    assert t10["n_controls"].item() == 7 and sorted(c10["dropped"]) == [str(i) for i in range(2, 9)]
    assert t10["p"].item() == pytest.approx(1 / 8)
    # every head of the model typed: no head control exists, the frequency control does
    ta, ca, _ = measure_head_sets(evaluate, _readout("all"), n_layers=2, n_heads=4, n_freq=8, sets=("positional",),
                                  controls=3, doses=(1,), directions=("high",), temperature=(), match="ids")
    assert ta["n_heads"].item() == 8 and ta["effect"].item() > 0.5 and len(ca) == 3
    with pytest.raises(PosymError, match="cannot match"):
        measure_head_sets(evaluate, _readout("all"), n_layers=2, n_heads=4, n_freq=8, sets=("positional",),
                          controls=3, doses=(1,), directions=("high",), temperature=(), match="count")
    fig = plot_dose_curves(table, "positional")
    assert NULLS["ids"] in fig._suptitle.get_text() and f"(K = {K}," in fig._suptitle.get_text()
    assert "(K = 7–10," not in plot_dose_curves(t10, "positional")._suptitle.get_text()  # K = 7 there
    both = pd.concat([t10, table[table["what"] == "high"]])
    assert f"(K = {K}–7," in plot_dose_curves(both, "positional")._suptitle.get_text()


def test_ids_defaults_drop_random_with_a_note_and_explicit_random_or_intervene_is_refused():
    seen: list[str] = []

    def evaluate(iv: str, extra: int) -> pd.DataFrame:
        seen.append(iv)
        return pd.DataFrame({"correct": [1.0, 0.0], "rank": [0.0, 0.5]})

    t, _, notes = measure_head_sets(evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional",),
                                    controls=2, doses=(1,), match="ids")
    assert set(t["what"]) == {"low", "high"} and len(notes) == 2 and "random direction" in notes[0]
    for kw, what in (({"directions": ("high", "random")}, "--directions random"),
                     ({"temperature": ("temperature:beta=0.5,n_train=17",)}, "--match layer|count")):
        seen.clear()
        with pytest.raises(PosymError, match=what) as e:
            measure_head_sets(evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional",),
                              controls=2, doses=(1,), match="ids", **kw)
        assert "\n" not in str(e.value) and not seen
    # layer / count keep all three directions and the temperature by default
    t, _, notes = measure_head_sets(evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, sets=("positional",),
                                    controls=2, doses=(1,), temperature_lengths=(0,), match="count")
    assert set(t.loc[t["part"] == "dose", "what"]) == {"low", "high", "random"} and notes == []
    assert set(t.loc[t["part"] == "temperature", "intervention_kind"]) == {"temperature"}
    with pytest.raises(PosymError, match="--match: 'heads'"):
        measure_head_sets(evaluate, _readout(), n_layers=2, n_heads=4, n_freq=8, match="heads")


@pytest.fixture(scope="module")
def gptj_dir(tmp_path_factory):
    from posym.model import build_model, model_config, save_model
    from posym.tasks import get_vocab

    torch.set_num_threads(1)
    directory = tmp_path_factory.mktemp("gptj1ids") / "model"
    cfg = model_config("quick", get_vocab("number").size, n_layer=3, n_embd=16, n_head=1, n_inner=32, rotary_dim=8)
    save_model(build_model(cfg, seed=0), directory)
    readout = directory.parent / "readout.csv"
    pd.DataFrame({"layer": [0, 1, 2], "head": 0, "posym_type": ["positional", "symbolic", "symbolic"]}).to_csv(readout, index=False)
    return directory, readout


def _args(gptj_dir):
    directory, readout = gptj_dir
    return ["head-sets", str(directory), "--readout", str(readout), "--task", "number", "--controls", "3",
            "--doses", "1", "--n", "4", "--readout-n", "0", "--quiet", "--match", "ids"]


@pytest.mark.parametrize("extra, what", [(["--directions", "low,random"], "--directions random"),
                                         (["--intervene", "temperature:beta=1,n_train=17"], "--match layer|count")])
def test_cli_refuses_random_and_intervene_under_ids(gptj_dir, tmp_path, capsys, extra, what):
    assert main([*_args(gptj_dir), "--out", str(tmp_path / "o"), *extra]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and what in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.medium  # about 3 s: figures written
def test_cli_ids_on_a_one_head_per_layer_model(gptj_dir, tmp_path):
    out = tmp_path / "ids"
    assert main([*_args(gptj_dir), "--sets", "positional,symbolic", "--out", str(out)]) == 0
    t = pd.read_csv(out / "head_sets.csv")
    assert set(t["match"]) == {"ids"} and set(t["part"]) == {"dose"} and set(t["what"]) == {"low", "high"}
    assert set(t["heads"]) == {"L0H0", "L1H0+L2H0"} and set(t["n_controls"]) == {3}
    c = pd.read_csv(out / "head_sets_controls.csv", dtype={"dropped": str})
    assert len(c) == 3 * len(t) and set(c["heads"]) == {"L0H0", "L1H0+L2H0"} and c["dropped"].notna().all()
    meta = json.loads((out / "head_sets.json").read_text())
    assert meta["match"] == "ids" and meta["null"] == NULLS["ids"] and meta["temperature"] == []
    assert meta["directions"] == ["low", "high"] and len(meta["notes"]) == 2
    assert NULLS["ids"] in (out / "head_sets.md").read_text()
