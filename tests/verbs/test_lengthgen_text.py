"""``posym lengthgen`` prints the sd over one data seed as "n/a" (issue 38), as the report does
(``posym.report.format.fmt_ms``); ``lengthgen_summary.csv`` keeps its number (0.0, SPEC §5 Fig. 5B)."""

from __future__ import annotations

import pandas as pd

from posym.model import build_model, model_config, save_model
from posym.verbs.lengthgen import _curve_text, lengthgen


def _summary(n_seeds: int, sd: float) -> pd.DataFrame:
    row = {"extra_tokens": 0, "acc_mean": 0.5, "acc_sd": sd, **{f"acc_hop{h}_mean": 0.5 for h in range(1, 5)},
           **{f"acc_hop{h}_sd": sd for h in range(1, 5)}, "n_seeds": n_seeds}
    return pd.DataFrame([row, {**row, "extra_tokens": 30}])


def _sd_cells(text: str) -> list[str]:
    head, *rows = text.splitlines()
    i = head.split().index("acc_sd")
    return [r.split()[i] for r in rows]


def test_one_seed_prints_n_a_and_two_seeds_a_number():
    assert _sd_cells(_curve_text(_summary(1, 0.0))) == ["n/a", "n/a"]
    assert _sd_cells(_curve_text(_summary(2, 0.0125))) == ["0.013", "0.013"]  # fmt_num: 3 decimals


def test_the_verb_prints_n_a_and_keeps_the_csv_number(tmp_path):
    save_model(build_model(model_config("quick", 129, n_layer=1, n_embd=16, n_inner=16, rotary_dim=16), seed=0),
               tmp_path / "hf")
    result = lengthgen(tmp_path / "hf", task="letter", grid="0,10", n=4, seeds=1, progress=False)
    assert _sd_cells(result.summary.split("\nlargest")[0]) == ["n/a", "n/a"]
    assert "acc_sd 0.0" not in result.summary
    assert list(pd.read_csv(tmp_path / "hf/lengthgen_summary.csv")["acc_sd"]) == [0.0, 0.0]
