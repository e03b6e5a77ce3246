"""The interventions study's fixed choices (docs/interventions.md): the grids, the cost bound of a
rescue, the ``layers=index`` setting and the prediction written before anything was measured."""

from __future__ import annotations

from typing import Any, Mapping

from posym.presets import PRESETS

#: Accuracy at +0 an intervention must keep to count as a rescue (docs/interventions.md, "The study": the
#: best setting of a family keeps mean accuracy ≥ 0.99 at +0).
MIN_ACC_AT_ZERO = 0.99
#: The added lengths the summary reports accuracy at.
REPORT_LENGTHS: tuple[int, ...] = (0, 100, 1000, 5000)
#: The added lengths of the cheap parameter-search grid (Paper A's grid is the full one).
SEARCH_GRID: tuple[int, ...] = (0, 10, 20, 30, 40, 60, 100, 200, 300, 500, 1000)
#: Added lengths of the head readout.
HEAD_LENGTHS: tuple[int, ...] = (0, 100, 1000)
#: ``layers=index`` in a study setting: the model's own Index layers
#: (:func:`~posym.studies.intervention_study.tables.index_layers`), so one setting means the same thing
#: on every seed although their Index layers differ.
INDEX_LAYERS = "index"
#: The intervention families in the order the figures show them.
FAMILY_ORDER: tuple[str, ...] = ("temperature", "ntk", "rope-base", "interpolate", "freq-mask", "freq-mask@index")

#: The prediction written before the study measured anything (docs/interventions.md, "Prediction"),
#: per intervention family and task: what the theory (Δ(n) of the Index and Retrieval constructions
#: under the intervention) says the family does to the task's reach.
PREDICTION: dict[tuple[str, str], str] = {
    ("temperature", "number"): "small lift +30..+100 at most; β = 2 may cost at +0 (early queries flipped)",
    ("temperature", "letter"): "lifts +100..+300 (dilution), not past the slow angle's crossing; reach ≈ +300",
    ("ntk", "number"): "costs at +0: the Index heads' stored offsets are detuned; no rescue",
    ("ntk", "letter"): "reach grows ≈ 1/r (κ = 8: ≈ +500), little cost at +0",
    ("interpolate", "number"): "fixed: breaks at +0; dynamic: exact at +0, breaks beyond",
    ("interpolate", "letter"): "dynamic: the only candidate for ≥ +1,000; fixed: a cost at +0",
    ("freq-mask", "number"): "−25 %: no change; −50/75 %: removes ID ≈ 38, costs at +0",
    ("freq-mask", "letter"): "−25 %: no change; −50/75 %: removes the slow IDs, collapses at +0",
    ("freq-mask@index", "number"): "as freq-mask: the Index layers use the removed IDs",
    ("freq-mask@index", "letter"): "no Index layers: not measured",
}

#: The models :data:`PREDICTION` was written for: the paper preset's GPT-J (SPEC §2), as
#: :func:`posym.runs.resolve.model_architecture` records it (model type, layers, heads, width).
PREDICTED_ARCHITECTURE: tuple = ("gptj", PRESETS["paper"].model["n_layer"], PRESETS["paper"].model["n_head"],
                                 PRESETS["paper"].model["n_embd"])


def prediction_applies(record: Mapping[str, Any]) -> bool:
    """Whether :data:`PREDICTION` speaks of a study's models: every model in its record
    (``interventions.json``, every call's ``architectures``) is the paper preset's GPT-J
    (:data:`PREDICTED_ARCHITECTURE`). A record from before the architectures were recorded (posym
    runs only) keeps the prediction."""
    calls = record.get("calls", []) if "calls" in record else [record]
    archs = [tuple(a) for c in calls if isinstance(c, Mapping) for a in (c.get("architectures") or {}).values()]
    return all(a == PREDICTED_ARCHITECTURE for a in archs)


__all__ = ["FAMILY_ORDER", "HEAD_LENGTHS", "INDEX_LAYERS", "MIN_ACC_AT_ZERO", "PREDICTED_ARCHITECTURE", "PREDICTION",
           "REPORT_LENGTHS", "SEARCH_GRID", "prediction_applies"]
