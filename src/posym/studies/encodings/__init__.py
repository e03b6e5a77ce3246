"""The training-time encodings study (``posym pe-study``; docs/interventions.md, "Training-time
encodings"; the encodings are SPEC §2.1): reproductions trained with different ``--pe`` values side by
side — what each model learns (heads, milestones, frequencies) and how far it extrapolates (Fig. 5B, the
reach) — and whether a variant meets the goal (:data:`~posym.studies.encodings.study.GOAL_FACTOR` × the
``rope`` variant's reach at test accuracy ≥ :data:`~posym.studies.encodings.study.GOAL_ACCURACY`).

``run.py`` the verb, ``study.py`` the goal and the quantity names, ``tables.py`` the study table,
``figures.py`` Fig. 2C of every variant, ``page.py`` the HTML page.
"""

from posym.studies.encodings.run import pe_study
from posym.studies.encodings.study import (BASELINE_PE, COLUMNS, GOAL_ACCURACY, GOAL_FACTOR, Q_DOMINANT,
                                           Q_DOMINANT_POSITIONAL, Q_INTERVENTION, Q_REACH, Q_SEEDS, Q_TEST, Q_UNROTATED,
                                           q_accuracy, q_milestone, q_pure)
from posym.studies.encodings.tables import check_variants, goal_line, study_markdown, study_rows, study_table, variant_pe

__all__ = ["BASELINE_PE", "COLUMNS", "GOAL_ACCURACY", "GOAL_FACTOR", "Q_DOMINANT", "Q_DOMINANT_POSITIONAL",
           "Q_INTERVENTION", "Q_REACH", "Q_SEEDS", "Q_TEST", "Q_UNROTATED", "check_variants", "goal_line", "pe_study",
           "q_accuracy", "q_milestone", "q_pure", "study_markdown", "study_rows", "study_table", "variant_pe"]
