"""The head readout under the ablation (issue 37 point 2): each dose cell's ``s_pos_none, s_pos, s_sym_none,
s_sym`` are the typed set's mean scores (posym's score engine) untouched and under the cell's own
``freq-mask`` — equal to a direct score call under the same intervention; cached like the outcomes."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.heads.tracking import lengthened_score_table, score_table
from posym.interventions import intervened
from posym.lengthgen.outcomes import prompt_outcomes
from posym.model import build_model, model_config, save_model
from posym.runs.resolve import resolve_model
from posym.studies.head_sets import measure_head_sets
from posym.studies.head_sets.tables import READOUT_COLUMNS
from posym.tasks import get_vocab

from known_heads import build_known_answer_model


def _direct(model, ids, iv: str, heads) -> tuple[float, float]:
    with intervened(model, iv):
        t = score_table(model, ids)
    t = t.set_index(["layer", "head"]).loc[list(heads)]
    return float(t["s_pos"].mean()), float(t["s_sym"].mean())


def test_readout_columns_equal_a_direct_score_call_on_the_known_heads_model():
    torch.set_num_threads(1)
    model, ids, labels = build_known_answer_model("llama", (1, 2), 2, n_prompts=16, length=8)
    readout = pd.DataFrame([{"layer": ly, "head": h, "posym_type": "positional" if (ly, h) == (1, 2) else "mixed"}
                            for ly in range(2) for h in range(4)])
    table, _, _ = measure_head_sets(
        lambda iv, e: prompt_outcomes(model, ids, labels, intervene=lambda: intervened(model, iv)), readout,
        n_layers=2, n_heads=4, n_freq=8, sets=("positional",), controls=2, doses=(1, 2), directions=("high",),
        temperature=("temperature:beta=1",), temperature_lengths=(0,),
        read_heads=lambda iv, e: _read(model, ids, iv))
    dose = table[table["part"] == "dose"]
    for r in dose.itertuples(index=False):
        p1, s1 = _direct(model, ids, r.intervention, [(1, 2)])
        p0, s0 = _direct(model, ids, "none", [(1, 2)])
        assert (r.s_pos, r.s_sym, r.s_pos_none, r.s_sym_none) == pytest.approx((p1, s1, p0, s0), abs=1e-12)
    hit = dose[dose["dropped"] == "1+2"].iloc[0]
    # untouched: pure positional (s_POS 1, s_SYM ~0); its answer pair dropped: uniform, s_SYM 1 (no longer pure)
    assert hit.s_pos_none > 0.99 and hit.s_sym_none < 0.01 and hit.s_sym > 0.99
    assert table.loc[table["part"] == "temperature", list(READOUT_COLUMNS)].isna().all().all()  # dose cells only


def _read(model, ids, iv):
    with intervened(model, iv):
        return score_table(model, ids)


@pytest.fixture(scope="module")
def gptj_dir(tmp_path_factory):
    torch.set_num_threads(1)
    directory = tmp_path_factory.mktemp("gptj2") / "model"
    cfg = model_config("quick", get_vocab("number").size, n_layer=2, n_embd=16, n_head=2, n_inner=32, rotary_dim=8)
    save_model(build_model(cfg, seed=1), directory)
    readout = directory.parent / "readout.csv"
    pd.DataFrame({"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                  "posym_type": ["positional", "mixed", "mixed", "mixed"]}).to_csv(readout, index=False)
    return directory, readout


def test_the_verb_writes_the_readout_and_caches_it(gptj_dir, tmp_path, monkeypatch):
    directory, readout = gptj_dir
    out = tmp_path / "study"
    args = ["head-sets", str(directory), "--readout", str(readout), "--task", "number", "--sets", "positional",
            "--controls", "1", "--doses", "1", "--directions", "low", "--temperature-lengths", "0", "--n", "4",
            "--readout-n", "6", "--quiet", "--out", str(out)]
    assert main(args) == 0
    t = pd.read_csv(out / "head_sets.csv")
    row = t[t["part"] == "dose"].iloc[0]
    model = resolve_model(directory, "number").model
    with intervened(model, row["intervention"]):
        under = lengthened_score_table(model, "number", 6, 0, 0).set_index(["layer", "head"]).loc[(0, 0)]
    none = lengthened_score_table(model, "number", 6, 0, 0).set_index(["layer", "head"]).loc[(0, 0)]
    assert np.allclose([row["s_pos"], row["s_sym"], row["s_pos_none"], row["s_sym_none"]],
                       [under["s_pos"], under["s_sym"], none["s_pos"], none["s_sym"]], atol=1e-6)
    assert json.loads((out / "head_sets.json").read_text())["readout_n"] == 6
    import posym.studies.head_sets.run as run
    monkeypatch.setattr(run, "lengthened_score_table", lambda *a, **k: pytest.fail("re-read the heads"))
    assert main([*args, "--force"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out / "head_sets.csv"), t)
