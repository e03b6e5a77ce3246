"""``posym head-sets --intervene``: any intervention whose registry class is per head
(``Intervention.per_head``) is applied to each set, named in ``intervention_kind`` and the figures; one
that is not per head is refused in one line — keyed on the flag, never on the name."""

import pandas as pd
import pytest
import torch

from posym.errors import PosymError
from posym.interventions import REGISTRY, intervened
from posym.lengthgen.outcomes import prompt_outcomes
from posym.studies.head_sets import measure_head_sets, plot_intervention_curve
from posym.studies.head_sets.run import check_settings

from known_heads import build_known_answer_model

SETTINGS = dict(sets=("positional",), controls=3, directions=("high",), lengths=(0,), temperature_lengths=(0,),
                doses=(1,), n=1)


def test_any_per_head_intervention_runs_on_the_set():
    torch.set_num_threads(1)
    model, ids, labels = build_known_answer_model("llama", (1, 2), 2, n_prompts=32, length=6)
    readout = pd.DataFrame([{"layer": ly, "head": h, "posym_type": "positional" if (ly, h) == (1, 2) else "mixed"}
                            for ly in range(2) for h in range(4)])
    drop2 = "freq-mask:keep=1+3+4+5+6+7+8"  # per head, not a temperature: the answer pair dropped
    table, controls, _ = measure_head_sets(
        lambda iv, e: prompt_outcomes(model, ids, labels, intervene=lambda: intervened(model, iv)), readout,
        n_layers=2, n_heads=4, n_freq=8, sets=("positional",), controls=3, doses=(1,), directions=("high",),
        temperature=(drop2, "temperature:beta=0.5,n_train=17"), temperature_lengths=(0,))
    iv = table[table["part"] == "temperature"].set_index("intervention_kind")
    assert list(iv.index) == ["freq-mask", "temperature"] and set(table.loc[table["part"] == "dose",
                                                                           "intervention_kind"]) == {"freq-mask"}
    assert iv.loc["freq-mask", "intervention"] == drop2 + ",heads=L1H2" and iv.loc["freq-mask", "effect"] > 0.5
    assert iv.loc["freq-mask", "acc_all_heads"] < 0.5 and iv.loc["freq-mask", "alternative"] == "two-sided"
    assert iv.loc["temperature", "intervention"] == "temperature:beta=0.5,n_train=17,floor=1,heads=L1H2"
    fig = plot_intervention_curve(table, "positional")
    assert "freq-mask, temperature on the set only" in fig._suptitle.get_text()


def test_the_per_head_flag_decides(monkeypatch):
    assert check_settings(temperature=["temperature:beta=1"], **SETTINGS)[1] == ["temperature:beta=1,n_train=17,floor=1"]
    monkeypatch.setattr(REGISTRY["temperature"], "per_head", False)
    with pytest.raises(PosymError, match="temperature is not exact per query head; the head-set study takes per-head"):
        check_settings(temperature=["temperature:beta=1"], **SETTINGS)
    assert REGISTRY["ntk"].per_head  # per head since issue 37: accepted unchanged
    assert check_settings(temperature=["ntk:kappa=4"], **SETTINGS)[1] == ["ntk:kappa=4"]
    for bad, msg in (("temperature:beta=1,heads=L0H0", "without heads= or layers="),
                     ("temperature:beta=1,layers=0", "without heads= or layers="), ("none", "--intervene none")):
        monkeypatch.setattr(REGISTRY["temperature"], "per_head", True)
        with pytest.raises(PosymError, match=msg):
            check_settings(temperature=[bad], **SETTINGS)
