"""posym: positional versus symbolic attention heads (Urrutia et al. 2026).

Task generators, GPT-J training, head scores, RoPE theory and length generalization.
"SPEC §N" in the code refers to ``docs/spec.md`` (shipped with the project); "Paper A" / "Paper B"
are Urrutia et al. 2026 and Urrutia et al., ICLR 2026.
"""

from posym.errors import PosymError

__version__ = "0.1.0"
__all__ = ["PosymError", "__version__"]
