"""The interventions page shows the prediction only for the models it was written for (the paper preset's
GPT-J, SPEC §2; issue 38) and, for a study of other models, the added lengths it measured instead of the
paper setting's report lengths (docs/interventions.md)."""

from __future__ import annotations

import json
import re

import pandas as pd

from posym.report.html import escape
from posym.runs import layout
from posym.studies._page import MAX_LENGTH_COLUMNS, own_length_columns, write_page
from posym.studies.intervention_study import study_summary
from posym.studies.intervention_study.page import NO_PREDICTION
from posym.studies.intervention_study.study import (PREDICTED_ARCHITECTURE, PREDICTION, REPORT_LENGTHS,
                                                    prediction_applies)

LLAMA = ["llama", 2, 2, 32]


def _lengthgen(grid) -> pd.DataFrame:
    rows = [{"task": "letter", "model": model, "intervention": interv, "extra_tokens": e, "seed": 0,
             "acc": max(0.0, 1.0 - e / (700 if interv == "none" else 900)) - 0.01 * k}
            for k, model in enumerate(("letter-s0", "letter-s1")) for interv in ("none", "ntk:kappa=4") for e in grid]
    return pd.DataFrame(rows)


def _study(tmp_path, grid, archs) -> str:
    lg = _lengthgen(grid)
    study_summary(lg).to_csv(tmp_path / layout.INTERVENTIONS, index=False)
    lg.to_csv(tmp_path / layout.INTERVENTIONS_LENGTHGEN, index=False)
    call = {"runs": {m: f"runs/{m}" for m in ("letter-s0", "letter-s1")}, "grid": list(grid), "n": 8,
            "architectures": {m: list(a) for m, a in zip(("letter-s0", "letter-s1"), archs)}}
    (tmp_path / layout.INTERVENTIONS_JSON).write_text(json.dumps({"calls": [call]}))
    return write_page(tmp_path).read_text()


def _headers(page: str) -> list[str]:
    return re.findall(r"<th[^>]*>(acc \+[\d,]+)</th>", page)


def test_the_paper_setting_keeps_todays_page(tmp_path):
    page = _study(tmp_path, [0, 10, 100, 300, 1000], [PREDICTED_ARCHITECTURE] * 2)
    assert escape(PREDICTION[("ntk", "letter")]) in page and escape(NO_PREDICTION) not in page
    assert "The prediction was written before anything was measured." in page
    assert _headers(page) == [f"acc +{e:,}" for e in REPORT_LENGTHS]  # +5,000 shown as "—" as before
    assert "this study measured" not in page


def test_a_llama_study_gets_no_prediction_and_its_own_lengths(tmp_path):
    page = _study(tmp_path, [0, 20, 50, 200], [LLAMA] * 2)
    assert escape(NO_PREDICTION) in page and not any(escape(p) in page for p in PREDICTION.values())
    assert "The prediction was written" not in page
    assert _headers(page) == ["acc +0", "acc +20", "acc +50", "acc +200"]
    assert "The “acc +L” columns are the added lengths this study measured." in page
    # a cell: mean ± sd over the two models of each model's accuracy there
    header, rows = own_length_columns(study_summary(_lengthgen([0, 20, 50, 200])), _lengthgen([0, 20, 50, 200]))
    none = [1.0 - 50 / 700, 1.0 - 50 / 700 - 0.01]
    assert rows[0][2] == f"{sum(none) / 2:.2f} ± {pd.Series(none).std():.2f}"


def test_a_quick_preset_gptj_is_not_the_paper_model(tmp_path):
    quick = ["gptj", 8, 1, 128]
    assert not prediction_applies({"calls": [{"architectures": {"number-s0": quick}}]})
    assert prediction_applies({"calls": [{"architectures": {"number-s0": list(PREDICTED_ARCHITECTURE)}}]})
    assert prediction_applies({"grid": [0, 10]})  # an older record (posym runs only): today's page
    assert escape(NO_PREDICTION) in _study(tmp_path, [0, 100, 1000], [quick, quick])


def test_a_long_own_grid_is_spread_over_at_most_max_columns(tmp_path):
    grid = list(range(0, 2001, 100))
    page = _study(tmp_path, grid, [LLAMA] * 2)
    shown = _headers(page)
    assert len(shown) == MAX_LENGTH_COLUMNS and shown[0] == "acc +0" and shown[-1] == "acc +2,000"
