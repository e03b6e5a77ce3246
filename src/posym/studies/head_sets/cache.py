"""The head-set study's cache (``head_sets_outcomes.jsonl``; docs/head_sets.md): one JSON line per measured
(intervention, added length) — the per-prompt outcomes (``correct``, ``rank``) or, ``kind: readout``, the
head readout (``layer``, ``head``, ``s_pos``, ``s_sym`` of every head) — appended as soon as measured, so a
killed run resumes where it stopped. Append-only; a torn last line is ignored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pandas as pd

#: The ``kind`` of an outcome record (written without the field, as before the readout existed) and of a readout record.
OUTCOMES, READOUT = "outcomes", "readout"
#: The columns each kind stores, and which of them are integers.
COLUMNS: dict[str, tuple[str, ...]] = {OUTCOMES: ("correct", "rank"), READOUT: ("layer", "head", "s_pos", "s_sym")}
_INTS = ("correct", "layer", "head")


class OutcomeCache:
    """Records of one ``kind`` whose ``key`` fields (model, task, n, data seed, …) equal ``key``, by
    (intervention, added length); :meth:`put` appends one and keeps it."""

    def __init__(self, path: Path, key: dict, kind: str = OUTCOMES, columns: Sequence[str] | None = None):
        self.path, self.key, self.kind = Path(path), dict(key), kind
        self.columns = tuple(columns or COLUMNS[kind])
        self.data: dict[tuple[str, int], pd.DataFrame] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line of a killed run
                if r.get("kind", OUTCOMES) == kind and {k: r.get(k) for k in self.key} == self.key:
                    self.data[(r["intervention"], int(r["extra_tokens"]))] = pd.DataFrame({c: r[c] for c in self.columns})

    def get(self, intervention: str, extra: int) -> pd.DataFrame | None:
        """The stored table of ``(intervention, extra)``, None when not measured."""
        return self.data.get((intervention, int(extra)))

    def put(self, intervention: str, extra: int, out: pd.DataFrame) -> None:
        """Keep ``out``'s :attr:`columns` and append them as one line."""
        self.data[(intervention, int(extra))] = out[list(self.columns)].reset_index(drop=True)
        rec = {**self.key, **({} if self.kind == OUTCOMES else {"kind": self.kind}), "intervention": intervention,
               "extra_tokens": int(extra)}
        rec.update({c: [int(x) if c in _INTS else float(x) for x in out[c]] for c in self.columns})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")


__all__ = ["COLUMNS", "OUTCOMES", "OutcomeCache", "READOUT"]
