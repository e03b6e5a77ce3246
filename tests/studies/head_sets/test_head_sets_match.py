"""``posym head-sets --match count`` (issue 37): on posym's one-head-per-layer GPT-J the layer-matched
control does not exist (one line naming ``--match count``, exit 2, nothing written); the count-matched
study runs, draws its controls from the other layers' heads and says so in its null."""

import json

import pandas as pd
import pytest
import torch

from posym.cli import main
from posym.model import build_model, model_config, save_model
from posym.studies.head_sets import NULLS
from posym.tasks import get_vocab


@pytest.fixture(scope="module")
def gptj_dir(tmp_path_factory):
    torch.set_num_threads(1)
    directory = tmp_path_factory.mktemp("gptj1") / "model"
    cfg = model_config("quick", get_vocab("number").size, n_layer=3, n_embd=16, n_head=1, n_inner=32, rotary_dim=8)
    save_model(build_model(cfg, seed=0), directory)
    readout = directory.parent / "readout.csv"
    pd.DataFrame({"layer": [0, 1, 2], "head": 0, "posym_type": ["positional", "symbolic", "mixed"]}).to_csv(readout, index=False)
    return directory, readout


def test_one_head_per_layer_runs_under_count_and_is_refused_under_layer(gptj_dir, tmp_path, capsys):
    directory, readout = gptj_dir
    args = ["head-sets", str(directory), "--readout", str(readout), "--task", "number", "--sets", "positional",
            "--controls", "2", "--doses", "1", "--directions", "high", "--temperature-lengths", "0", "--n", "4", "--readout-n", "0",
            "--quiet"]
    assert main([*args, "--out", str(tmp_path / "layer")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "cannot match random:positional" in err[0] and "use --match count" in err[0], err
    assert not (tmp_path / "layer").exists()
    out = tmp_path / "count"
    assert main([*args, "--out", str(out), "--match", "count"]) == 0
    t = pd.read_csv(out / "head_sets.csv")
    assert set(t["heads"]) == {"L0H0"} and set(t["match"]) == {"count"} and len(t) == 2
    c = pd.read_csv(out / "head_sets_controls.csv")
    assert set(c["heads"]) <= {"L1H0", "L2H0"} and len(c) == 2 * len(t)
    assert NULLS["count"] in (out / "head_sets.md").read_text()
    assert json.loads((out / "head_sets.json").read_text())["null"] == NULLS["count"]


def test_the_known_answer_is_still_found_under_count_matching():
    """tests/known_heads: L1H2 carries the answer through ID 2; count-matched controls (any other head of
    either layer) find nothing, the set's cell sits at the p floor."""
    from posym.interventions import intervened
    from posym.lengthgen.outcomes import prompt_outcomes
    from posym.studies.head_sets import measure_head_sets

    from known_heads import build_known_answer_model

    torch.set_num_threads(1)
    model, ids, labels = build_known_answer_model("llama", (1, 2), 2, n_prompts=32, length=6)
    readout = pd.DataFrame([{"layer": ly, "head": h, "posym_type": "positional" if (ly, h) == (1, 2) else "mixed"}
                            for ly in range(2) for h in range(4)])
    table, controls, _ = measure_head_sets(
        lambda iv, e: prompt_outcomes(model, ids, labels, intervene=lambda: intervened(model, iv)), readout,
        n_layers=2, n_heads=4, n_freq=8, sets=("positional",), controls=5, doses=(1, 2), directions=("high",),
        temperature=(), match="count")
    hit = table["dropped"] == "1+2"
    assert set(table["match"]) == {"count"} and hit.sum() == 1
    assert (table.loc[hit, "effect"] > 0.5).all() and table.loc[hit, "p"].item() == pytest.approx(1 / 6)
    assert (table.loc[~hit, "effect"] == 0).all() and (controls["effect"] == 0).all()
    assert any(h.startswith("L0H") for h in controls["heads"])  # drawn across layers
