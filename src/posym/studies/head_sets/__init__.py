"""The head-set study (``posym head-sets``; docs/head_sets.md, issue 37): which heads and which rotary
frequencies carry each mechanism — frequency-ablation dose curves and a temperature inside typed head
sets (positional, symbolic, previous-token, induction, sink; SPEC §7), each against K matched random
head sets (same heads per layer, or as many heads in all) or, for the dose curves, against the same heads
with k random frequency IDs dropped (``match="ids"``), with paired bootstrap CIs, permutation p-values and
Benjamini–Hochberg over the cells (docs/statistics.md).

``run.py`` the verb and :func:`measure_head_sets` (the study on any ``evaluate`` callable), ``combine.py``
several models' studies side by side (``posym head-sets-combine``), ``study.py``
the sets, directions and the prediction, ``tables.py`` the plan and the statistics, ``figures.py`` the figures.
"""

from posym.studies.head_sets.study import (DEFAULT_SETS, DEFAULT_TEMPERATURE, DIRECTIONS, NULL, NULLS, PREDICTION,
                                           TEMPERATURE_LENGTHS, prediction)
from posym.studies.head_sets.tables import Cell, cell_rows, dropped_ids, id_control_draws, plan_cells, study_table, \
    table_markdown
from posym.studies.head_sets.figures import plot_dose_curves, plot_intervention_curve, plot_temperature_curve
from posym.studies.head_sets.run import OutcomeCache, default_doses, head_sets, match_settings, measure_head_sets, \
    resolve_sets
from posym.studies.head_sets.combine import combine_head_sets, combine_tables

__all__ = ["Cell", "DEFAULT_SETS", "DEFAULT_TEMPERATURE", "DIRECTIONS", "NULL", "NULLS", "OutcomeCache", "PREDICTION",
           "TEMPERATURE_LENGTHS", "cell_rows", "combine_head_sets", "combine_tables",
           "default_doses", "dropped_ids", "head_sets", "id_control_draws", "match_settings", "measure_head_sets",
           "plan_cells", "plot_dose_curves", "plot_intervention_curve", "plot_temperature_curve", "prediction",
           "resolve_sets", "study_table", "table_markdown"]
