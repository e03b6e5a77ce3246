"""The studies: questions posym asks of many runs at once, each in a folder of its own — its verb
(``run.py``, called by the CLI), its compute over saved tables (``tables.py``), its figures, its HTML page
and its constants (goal, prediction, grids) as data beside them.

* :mod:`posym.studies.intervention_study` — ``posym interventions``: inference-time interventions on
  trained models (docs/interventions.md);
* :mod:`posym.studies.encodings` — ``posym pe-study``: training-time positional encodings side by side
  (docs/encodings.md; SPEC §2.1);
* :mod:`posym.studies.sensitivity` — ``posym sensitivity``: Paper A's numbers under training choices;
* :mod:`posym.studies.head_types` — ``posym head-types``: positional/symbolic scores beside the classic
  head detectors on real LLMs (SPEC §7).

The studies sit above the verbs (they compose verbs and analyses) and below the CLI; no study imports
another (the page the interventions and encodings studies share is :mod:`posym.studies._page`).
"""
