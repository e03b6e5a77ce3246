"""One public function per CLI verb: resolve the run, compute, write the tables, draw, return.

``posym <verb>`` calls ``posym.verbs.<verb>.<verb>(...)`` (the module and the function share the
verb's name) and prints its :class:`VerbResult`; ``posym reproduce`` schedules the same functions.
This is the only layer that composes analyses (``heads``, ``theory``, ``lengthgen``) with the
report's figures and the run directory's file names (``posym.runs.layout``).

**One overwrite rule** (:class:`Outputs`): every output a verb would write is checked before any work
starts; an existing one is refused without ``force``; with ``force`` it is replaced atomically
(written to a temporary file beside it, then renamed), so an interrupted write never leaves a half
file where a good one was. No output may land in a run that is still being trained
(``posym.runs.lock.refuse_live_outputs``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd

from posym.errors import PosymError
from posym.files import write_atomic
from posym.runs.lock import refuse_live_outputs
from posym.runs.tables import parquet_available, parquet_path, to_parquet


@dataclass
class VerbResult:
    """What a verb returns: its main table, every file it wrote, and the text the CLI prints."""

    table: pd.DataFrame | None = None
    files: list[Path] = field(default_factory=list)
    summary: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def _writable_dir(d: Path) -> None:
    """PosymError unless ``d`` is (or can become) a writable directory."""
    probe = d
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise PosymError(f"cannot write under {d}: {probe} is a file, not a folder")
    if probe.exists() and not os.access(probe, os.W_OK | os.X_OK):
        raise PosymError(f"cannot write under {d}: {probe} is not writable")


class Outputs:
    """The files a verb writes, checked up front and written atomically (module doc)."""

    def __init__(self, paths: Iterable[str | os.PathLike], force: bool = False):
        self.paths = [Path(p) for p in paths]
        self.force = force
        self.written: list[Path] = []

    def check(self) -> "Outputs":
        """Refuse (PosymError) an existing output without ``force``, a folder where a file goes, an
        unwritable location, or one inside a run still being trained — before any work is done."""
        derived = [parquet_path(p) for p in self.paths if p.suffix == ".csv"] if parquet_available() else []
        for p in self.paths + derived:
            if p.is_dir():
                raise PosymError(f"{p} is a folder; give a file path")
            if p.exists() and not self.force:
                raise PosymError(f"{p} exists; pass --force to replace it")
            _writable_dir(p.parent)
        refuse_live_outputs(self.paths)
        return self

    def _write(self, path: Path, writer: Callable[[Path], None]) -> Path:
        path = Path(path)
        try:
            write_atomic(path, writer)
        except OSError as exc:
            raise PosymError(f"cannot write {path}: {exc.strerror or exc}") from exc
        self.written.append(path)
        return path

    def csv(self, df: pd.DataFrame, path: str | os.PathLike) -> Path:
        """The table as CSV and, when pyarrow is installed, as Parquet beside it (``posym.runs.tables``)."""
        out = self._write(Path(path), lambda p: df.to_csv(p, index=False))
        if parquet_available():
            self._write(parquet_path(out), lambda p: to_parquet(df, p))
        return out

    def text(self, text: str, path: str | os.PathLike) -> Path:
        return self._write(Path(path), lambda p: p.write_text(text))

    def json(self, data: Any, path: str | os.PathLike) -> Path:
        return self._write(Path(path), lambda p: p.write_text(json.dumps(data, indent=2) + "\n"))

    def figure(self, fig, stem: str | os.PathLike) -> list[Path]:
        """``stem.png`` and ``stem.pdf`` (the figure is closed afterwards)."""
        from posym.report.figures import close_figure

        out = [self._write(Path(f"{stem}{ext}"), lambda p, ext=ext: fig.savefig(p, dpi=150, bbox_inches="tight",
                                                                               format=ext[1:]))
               for ext in (".png", ".pdf")]
        close_figure(fig)
        return out


def figure_paths(stem: str | os.PathLike) -> list[Path]:
    """The two files a figure ``stem`` becomes (for :meth:`Outputs.check`)."""
    return [Path(f"{stem}.png"), Path(f"{stem}.pdf")]


__all__ = ["Outputs", "VerbResult", "figure_paths"]
