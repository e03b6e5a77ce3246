"""Figures without global pyplot state: no module of ``src/posym`` switches the matplotlib backend or
imports pyplot, and importing the figure modules and drawing a figure leaves a notebook's backend
(and pyplot) alone."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "posym"

#: Modules still drawing with pyplot while they move to ``posym.studies``; converted after that move.
PENDING: tuple[str, ...] = ()


def pyplot_uses(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` of every ``matplotlib.use(...)`` call and every import of ``matplotlib.pyplot``
    in a source (any nesting level)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("matplotlib.pyplot")]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("matplotlib.pyplot") or (
                    node.module == "matplotlib" and any(a.name == "pyplot" for a in node.names)):
                out.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "use" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "matplotlib":
            out.append((node.lineno, "matplotlib.use(...)"))
    return sorted(out)


def test_the_checker_sees_every_spelling():
    src = textwrap.dedent("""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import pyplot
        def f():
            from matplotlib.pyplot import subplots
        """)
    assert [line for line, _ in pyplot_uses(src)] == [3, 4, 5, 7]
    assert pyplot_uses("import matplotlib\nfrom matplotlib.figure import Figure\nmatplotlib.colormaps['viridis']\n") == []


def test_no_module_uses_pyplot():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(PENDING):
            continue
        found += [f"{rel}:{line}: {what}" for line, what in pyplot_uses(path.read_text(encoding="utf-8"))]
    assert not found, "build figures with posym.report.figures.new_figure, not pyplot:\n" + "\n".join(found)


_DRAW = """
import sys
import matplotlib
matplotlib.use("svg")
import pandas as pd
import posym.report.figures as figures
import posym.report.flow_figures, posym.report.freq_figures, posym.studies.head_types.figures  # noqa: E401
import posym.studies.head_types.panels, posym.studies._figures  # noqa: E401
import posym.report.llm_figures, posym.report.llm_heads_figures  # noqa: E401
import posym.report.theory_figures  # noqa: F401
counts = pd.DataFrame({"step": [0, 10, 20], "positional": [0, 1, 1], "symbolic": [0, 0, 2]})
fig = figures.plot_pure_counts(counts)
paths = figures.save_figure(fig, sys.argv[1])
assert all(p.stat().st_size > 0 for p in paths), paths
print(matplotlib.get_backend(), "matplotlib.pyplot" in sys.modules)
"""


def test_drawing_keeps_the_backend(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC.parent), os.environ.get("PYTHONPATH", "")]))
    env.pop("MPLBACKEND", None)
    r = subprocess.run([sys.executable, "-c", _DRAW, str(tmp_path / "counts")], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["svg", "False"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counts.pdf", "counts.png"]
