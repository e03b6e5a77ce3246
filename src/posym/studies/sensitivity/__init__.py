"""The sensitivity study (``posym sensitivity``): which training choice moves which number of Paper A
(each variant a reproduction directory, or ``posym lengthgen`` tables for a Fig. 5B-only variant), and
whether the discrepancy Δ of trained heads (SPEC §4) predicts how far a model extrapolates (Fig. 5B).

``run.py`` the verb, ``tables.py`` the study table and the prediction, ``figures.py`` the prediction's
scatter, ``page.py`` the HTML page.
"""

from posym.studies.sensitivity.figures import plot_prediction
from posym.studies.sensitivity.run import sensitivity
from posym.studies.sensitivity.tables import (STUDY_ROWS, check_variants, extrapolation_prediction, rank_correlation,
                                              sensitivity_markdown, sensitivity_rows, sensitivity_table, variant_curves)

__all__ = ["STUDY_ROWS", "check_variants", "extrapolation_prediction", "plot_prediction", "rank_correlation",
           "sensitivity", "sensitivity_markdown", "sensitivity_rows", "sensitivity_table", "variant_curves"]
