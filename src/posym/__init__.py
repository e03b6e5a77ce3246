"""posym: positional versus symbolic attention heads (Urrutia et al. 2026).

Task generators, GPT-J training, head scores, RoPE theory and length generalization.
See ``shared/SPEC.md`` for the specification each module cites.
"""

from posym.errors import PosymError

__version__ = "0.1.0"
__all__ = ["PosymError", "__version__"]
