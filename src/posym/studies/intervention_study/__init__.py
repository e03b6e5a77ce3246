"""The interventions study (``posym interventions``; docs/interventions.md): which inference-time change
to attention or RoPE (the mechanisms of :mod:`posym.interventions`) lifts which task's length
generalization (Fig. 5B of Paper A), and which heads stay pure (SPEC §3) on lengthened inputs under it —
every trained model of both tasks under each intervention, beside the prediction the theory (Δ(n),
SPEC §4) made before anything was measured.

``run.py`` the verb, ``study.py`` the grids and the prediction, ``tables.py`` the study table,
``figures.py`` its figures, ``page.py`` the HTML page.
"""

from posym.studies.intervention_study.study import (FAMILY_ORDER, HEAD_LENGTHS, INDEX_LAYERS, MIN_ACC_AT_ZERO, PREDICTION,
                                                    REPORT_LENGTHS, SEARCH_GRID)
from posym.studies.intervention_study.tables import (as_setting, best_settings, drop_lowest, family, for_model,
                                                     index_layers, model_reach, prediction_rows, pure_head_counts,
                                                     settings_display, study_grid, study_settings, study_summary,
                                                     summary_markdown, summary_rows)
from posym.studies.intervention_study.figures import plot_head_readout, plot_intervention_curves
from posym.studies.intervention_study.run import interventions

__all__ = ["FAMILY_ORDER", "HEAD_LENGTHS", "INDEX_LAYERS", "MIN_ACC_AT_ZERO", "PREDICTION", "REPORT_LENGTHS",
           "SEARCH_GRID", "as_setting", "best_settings", "drop_lowest", "family", "for_model", "index_layers",
           "interventions", "model_reach", "plot_head_readout", "plot_intervention_curves", "prediction_rows",
           "pure_head_counts", "settings_display", "study_grid", "study_settings", "study_summary",
           "summary_markdown", "summary_rows"]
