"""The head-set study's fixed choices (docs/head_sets.md): the sets, the directions, the defaults and the
prediction written before anything was measured (docs/results/head_sets.md, from Papers A/B)."""

from __future__ import annotations

#: The head sets compared with their matched random controls (types of posym.heads.selection, SPEC §7).
DEFAULT_SETS: tuple[str, ...] = ("positional", "symbolic", "previous-token", "induction", "sink")
#: Which frequency IDs a dose drops (ID 1 = fastest, Paper B's numbering, as ``freq-mask``): ``low`` the k
#: slowest (the largest IDs), ``high`` the k fastest (IDs 1..k), ``random`` k drawn once per study seed
#: (a seeded permutation of the IDs, its first k: the random doses are nested).
DIRECTIONS: tuple[str, ...] = ("low", "high", "random")
#: The default inference-time temperature applied to one head set (docs/interventions.md).
DEFAULT_TEMPERATURE: tuple[str, ...] = ("temperature:beta=0.5,n_train=17",)
#: Added lengths of the temperature part (the dose curves default to +0).
TEMPERATURE_LENGTHS: tuple[int, ...] = (0, 50, 100, 200)
#: The null printed beside every figure and table (layer-matched controls, the default).
NULL = "K matched random head sets, same heads per layer"
#: The null of each ``--match`` (posym.heads.selection.MATCHES and :data:`IDS`): ``count`` for models whose layers
#: have too few other heads (posym's one-head-per-layer GPT-J); ``ids`` the frequency control.
NULLS: dict[str, str] = {"layer": NULL, "count": "K random head sets of as many heads, drawn from all heads outside the set",
                         "ids": "K random draws of k frequency IDs inside the same heads"}
#: The frequency control (``--match ids``): the set's own heads with k random frequency IDs dropped — it tests
#: WHICH FREQUENCIES a set uses given the set (``layer``/``count`` test WHICH HEADS carry the effect). It has
#: no ``random`` direction (random against random) and no per-head intervention part (no frequency in it).
IDS = "ids"


def null_text(match: str = "layer") -> str:
    """The null of a study matched by ``match`` (:data:`NULLS`)."""
    return NULLS[match]

#: The two parts of the study (the ``part`` column): (b) the dose curves, (a) a per-head intervention on the set
#: vs added length — named ``temperature`` in the tables (its first intervention; ``intervention_kind`` names
#: the one a row measured: any registered intervention whose ``Intervention.per_head`` is True).
DOSE, TEMPERATURE = "dose", "temperature"

#: The prediction written before any measurement (Papers A/B), per (set, part/direction, task).
PREDICTION: dict[tuple[str, str, str], str] = {
    ("positional", "high", "number"): "hurts far more than the controls: Index heads read the fastest pairs",
    ("positional", "low", "number"): "little effect, near the controls",
    ("symbolic", "low", "letter"): "hurts more than the controls: Retrieval heads read slow pairs",
    ("symbolic", "high", "letter"): "small effect, near the controls",
    ("symbolic", "temperature", "letter"): "recovers most of the all-heads gain at long lengths",
    ("positional", "temperature", "letter"): "none of the all-heads gain",
    ("positional", "temperature", "number"): "none of the all-heads gain",
}


def prediction(set_name: str, what: str, task: str) -> str:
    """The written prediction of a cell (``what``: a direction or an intervention's name, e.g.
    ``temperature``), "" when none was made."""
    return PREDICTION.get((set_name, what, task), "")


__all__ = ["DEFAULT_SETS", "DEFAULT_TEMPERATURE", "DIRECTIONS", "DOSE", "IDS", "NULL", "NULLS", "PREDICTION",
           "TEMPERATURE", "TEMPERATURE_LENGTHS", "null_text", "prediction"]
