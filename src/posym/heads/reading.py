"""Moved to :mod:`posym.reading` (torch-free, floor 1, so that ``--help`` can show it); this name stays for
existing imports."""

from posym.reading import HEADS_RECIPE, HOW_TO_READ, MIN_MASS, READ_POINTER

__all__ = ["HEADS_RECIPE", "HOW_TO_READ", "MIN_MASS", "READ_POINTER"]
