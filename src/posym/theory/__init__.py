"""RoPE theory (SPEC §4, §6): exact constructions, discrepancy (Thm 3.2, Fig. 5A), frequency-restricted heads.

* :mod:`posym.theory.constructions` — T_Index / T_Retrieval as one-head RoPE attention modules, a stacked
  Index model for the number task.
* :mod:`posym.theory.discrepancy` — ``Δ`` of logits, exact ``Δ(n)`` of both constructions, the bounds,
  :func:`run_discrepancy` (``posym theory discrepancy``).
* :mod:`posym.theory.restricted` — one-layer attention-only toys with a restricted RoPE frequency band,
  :func:`run_restricted` (``posym theory restricted``), and :func:`restrict_frequencies` for HF GPT-J.
"""

from posym.theory.discrepancy import discrepancy_of_logits, discrepancy_table, run_discrepancy

__all__ = ["discrepancy_of_logits", "discrepancy_table", "run_discrepancy", "run_restricted", "restrict_frequencies"]


def __getattr__(name):  # lazy: restricted pulls in training code
    if name in ("run_restricted", "restrict_frequencies"):
        from posym.theory import restricted

        return getattr(restricted, name)
    raise AttributeError(name)
