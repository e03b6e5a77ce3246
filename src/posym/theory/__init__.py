"""RoPE theory (SPEC §4, §6): exact constructions, discrepancy (Thm 3.2, Fig. 5A), frequency-restricted heads.
Compute only: the verb ``posym theory`` (``posym.verbs.theory``) writes the tables and figures.

* :mod:`posym.theory.constructions` — T_Index / T_Retrieval as one-head RoPE attention modules, a stacked
  Index model for the number task.
* :mod:`posym.theory.discrepancy` — ``Δ`` of logits, exact ``Δ(n)`` of both constructions, the bounds.
* :mod:`posym.theory.intervened` — ``Δ(n)`` and the weight on the correct key of both constructions under
  inference-time interventions (temperature, base change, interpolation, frequency mask) as plain numbers.
* :mod:`posym.theory.trained` — ``Δ`` of every head of a trained GPT-J vs added tokens.
* :mod:`posym.theory.restricted` — one-layer attention-only toys with a restricted RoPE frequency band
  (:func:`~posym.theory.restricted.restricted_table`) and ``restrict_frequencies`` for HF GPT-J.
"""

from posym.theory.discrepancy import discrepancy_of_logits, discrepancy_table

__all__ = ["discrepancy_of_logits", "discrepancy_table"]
