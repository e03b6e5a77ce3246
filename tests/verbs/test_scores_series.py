"""``posym scores --series``: one table is one model over training, so the series' folders must agree
on the architecture and on the training-time positional encoding (checked before a model is loaded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posym.cli import main
from posym.errors import PosymError
from posym.verbs.scores import check_targets


def _folder(root: Path, name: str, pe: str | None) -> Path:
    d = root / name
    d.mkdir()
    cfg = {"model_type": "posym_gptj", "n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 256}
    if pe is not None:
        cfg["posym_pe"] = pe
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_a_series_of_two_encodings_is_refused(tmp_path, capsys):
    """N9: a rope-base:500000 and a NoPE checkpoint of one architecture made one table without a word."""
    a, b = _folder(tmp_path, "step-100", "rope-base:500000"), _folder(tmp_path, "step-200", "nope")
    out = tmp_path / "s.csv"
    assert main(["scores", "--series", str(a), str(b), "--task", "number", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not out.exists()
    assert "the series mixes positional encodings" in err[0] and "rope-base:500000" in err[0] and "nope" in err[0]


def test_absent_posym_pe_is_rope_and_one_encoding_passes_the_check(tmp_path):
    plain, rope = _folder(tmp_path, "c1", None), _folder(tmp_path, "c2", "rope")
    check_targets([(1, plain), (2, rope)], "number")  # absent = rope: one encoding
    other = _folder(tmp_path, "c3", "p-rope:0.5")
    with pytest.raises(PosymError, match=r"c1 has rope but .*c3 has p-rope:0\.5"):
        check_targets([(1, plain), (3, other)], "number")
