"""Provenance of results: library versions and the git commit of the code that wrote them."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def versions() -> dict[str, str]:
    """Python, platform, library versions, posym and its git commit (when in a git checkout)."""
    from importlib import metadata

    import posym

    out = {"python": platform.python_version(), "platform": platform.platform(),
           "cpus": str(os.cpu_count()), "posym": posym.__version__}
    for pkg in ("torch", "transformers", "numpy", "pandas", "matplotlib", "safetensors", "gguf", "accelerate"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    out["git commit"] = git_commit(Path(posym.__file__).resolve().parent)
    return out


def git_commit(where: str | os.PathLike) -> str:
    """``<hash>`` of the checkout containing ``where`` (``+ uncommitted changes`` when dirty), or
    ``unavailable``."""
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        if head.returncode != 0:
            return "unavailable"
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
        return head.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unavailable"


__all__ = ["git_commit", "versions"]
