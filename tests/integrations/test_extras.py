"""The snippets of docs/models.md, "From TransformerLens and nnsight", run as written (marker
``extras``: TransformerLens and nnsight live in their own environment, docs/models.md)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.extras

DOCS = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def snippets() -> list[str]:
    text = DOCS.read_text()
    section = text.split("## From TransformerLens and nnsight", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_docs_have_both_snippets():
    code = snippets()
    assert len(code) == 2 and "TransformerBridge" in code[0] and "NNsight" in code[1]


def test_transformerlens_bridge_snippet(tmp_path, monkeypatch):
    import transformer_lens  # noqa: F401  (the extras environment, docs/models.md; deselected elsewhere)
    from posym.heads import scores_fast

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ns: dict = {}
    exec(snippets()[0], ns)
    assert type(ns["bridge"]).__name__ == "TransformerBridge"
    plain = scores_fast(ns["model"], ns["batch"])
    np.testing.assert_array_equal(ns["res"].s_pos, plain.s_pos)
    np.testing.assert_array_equal(ns["res"].s_sym, plain.s_sym)
    assert set(ns["summary"]) >= {"posym/s_pos/layer_0", "posym/pure_symbolic"}
    assert (tmp_path / "runs/tl-tracked/scores.csv").is_file()


def test_nnsight_snippet(tmp_path, monkeypatch):
    import nnsight  # noqa: F401
    from posym.heads import scores_fast
    from posym.tasks import make_split

    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(snippets()[1], ns)
    plain = scores_fast(ns["model"], make_split("number", "val", n=32))
    np.testing.assert_array_equal(ns["res"].s_pos, plain.s_pos)
    np.testing.assert_array_equal(ns["res"].s_sym, plain.s_sym)
