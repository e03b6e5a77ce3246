"""The identity of a model's weights: a short digest of its checkpoint's weight file(s).

Tables that can be resumed or appended (``lengthgen.csv``) store it, so that rows measured on
another model are recognised and refused (docs/reliability.md, "Every table knows what it measured").
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from posym.errors import PosymError
from posym.runs.layout import WEIGHTS

#: Hex digits kept of the SHA-256 (64 bits: two different weight files never share one in practice).
DIGEST_CHARS = 16


def weights_digest(checkpoint_dir: str | os.PathLike) -> str:
    """SHA-256 (first :data:`DIGEST_CHARS` hex digits) of the weight files of a checkpoint folder:
    ``model.safetensors``, else every ``*.safetensors`` / ``*.bin`` file in name order (sharded HF
    folders). PosymError when the folder holds no weight file."""
    root = Path(checkpoint_dir)
    files = [root / WEIGHTS] if (root / WEIGHTS).is_file() else sorted(
        p for p in root.iterdir() if p.is_file() and p.suffix in (".safetensors", ".bin")) if root.is_dir() else []
    if not files:
        raise PosymError(f"{root} holds no weight file to identify the model by")
    h = hashlib.sha256()
    for f in files:
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:DIGEST_CHARS]


__all__ = ["DIGEST_CHARS", "weights_digest"]
