"""The paired unit of ``posym head-sets`` (posym.lengthgen.outcomes): LLM ``choice`` records read as per-prompt
outcomes with the protocol's own rank rule; an answer outside the candidates is one line."""

import numpy as np
import pytest

from posym.errors import PosymError
from posym.lengthgen.llm_tables import normalised_rank
from posym.lengthgen.outcomes import OUTCOME_COLUMNS, candidate_ranks, choice_outcomes


def test_choice_records_become_outcomes_in_sample_order():
    recs = [{"protocol": "choice", "intervention": "none", "task": "letter", "length": 10, "run": r, "index": i,
             "correct": i == 0, "target_rank": 1 + i, "n_candidates": 5} for r in (1, 0) for i in (1, 0)]
    recs.append({**recs[0], "intervention": "temperature:beta=1"})
    recs.append({**recs[0], "protocol": "generate"})
    out = choice_outcomes(recs, intervention="none", task="letter", length=10)
    assert list(out.columns) == list(OUTCOME_COLUMNS) and len(out) == 4
    assert out["correct"].tolist() == [1, 0, 1, 0]
    assert out["rank"].tolist() == [normalised_rank(1, 5), normalised_rank(2, 5)] * 2
    assert choice_outcomes(recs, intervention="none", task="number", length=10).empty


def test_an_answer_outside_its_candidates_is_one_line():
    with pytest.raises(PosymError, match="prompt 0: its answer 7 is not one of its candidates"):
        candidate_ranks(np.zeros((1, 8)), np.array([7]), np.array([[1, 2, 3]]))
