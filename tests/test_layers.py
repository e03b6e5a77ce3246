"""The layer rule of docs/architecture.md: every import inside ``src/posym`` (function-level ones
included) points down the floors, so no package imports one above it and no two packages import
each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "posym"

#: Floor of each package (and top-level module); a package may import only lower floors and itself.
FLOORS: dict[str, int] = {
    "errors": 0,
    "__init__": 1, "resources": 1, "checks": 1,  # the posym package itself (PosymError, __version__); size and value checks
    "progress": 1,  # progress bars on a terminal, plain lines in a log file
    "files": 1, "constants": 1,  # the one atomic writer; the paper's fixed numbers and posym's named conventions
    "presets": 1,  # one record per preset: model, training and reproduction settings
    "reading": 1,  # how to read s_POS / s_SYM: the text of --help, the report and the printed tables
    "tasks": 2, "model": 2,
    "stats": 2,  # paired bootstrap, matched-control p-values, Benjamini-Hochberg (docs/statistics.md); uses checks
    "runs": 3,
    "train": 4,
    "heads": 5, "theory": 5, "lengthgen": 5,
    "interventions": 5,  # inference-time changes to attention / RoPE (docs/interventions.md)
    "report": 6, "integrations": 6,  # the callback and hook for other people's training loops
    "launch": 7,  # running stages: the local worker pool and Slurm jobs
    "verbs": 8,
    "studies": 9,  # one folder per study: its runs, tables, figures, page, goal and prediction
    "cli": 10,
}


def _package(module: str) -> str:
    """``posym.heads.scores`` -> ``heads``; ``posym`` -> ``__init__``."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def imports_of(source: str) -> list[tuple[str, int]]:
    """Every ``posym`` module a source imports (any nesting level), with its line number."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "posym":
            if node.module == "posym":
                out += [(f"posym.{a.name}", node.lineno) for a in node.names]
            else:
                out.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.split(".")[0] == "posym"]
    return out


def violations(package: str, source: str, where: str = "<source>") -> list[str]:
    """The imports of ``source`` (a module of ``package``) that do not point down the floors."""
    bad = []
    for module, line in imports_of(source):
        target = _package(module)
        if target == package:
            continue
        if target not in FLOORS:
            bad.append(f"{where}:{line}: imports {module} (package {target!r} has no floor)")
        elif FLOORS[target] >= FLOORS[package]:
            bad.append(f"{where}:{line}: {package} (floor {FLOORS[package]}) imports {module} "
                       f"(floor {FLOORS[target]})")
    return bad


def _modules() -> list[tuple[str, Path]]:
    out = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        package = rel.parts[0][:-3] if len(rel.parts) == 1 else rel.parts[0]
        out.append((package, f))
    return out


def test_every_package_has_a_floor():
    packages = {p for p, _ in _modules()}
    assert packages <= set(FLOORS), sorted(packages - set(FLOORS))


def test_imports_point_down():
    bad = [v for package, f in _modules() for v in violations(package, f.read_text(), str(f.relative_to(SRC)))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package, source", [
    ("heads", "def f():\n    from posym.report.figures import save_figure\n"),  # a function-level upward import
    ("train", "import posym.heads.tracking\n"),
    ("tasks", "from posym.model import gptj\n"),  # same floor, another package: would allow a cycle
    ("runs", "from posym import verbs\n"),
])
def test_the_check_catches_an_upward_import(package, source):
    assert violations(package, source)


def test_the_check_allows_downward_and_own_imports():
    assert not violations("verbs", "from posym.heads.scores import scores_fast\nfrom posym.verbs import Outputs\n")
    assert not violations("heads", "def f():\n    from posym.runs.resolve import resolve_model\n")


#: The most lines a module may hold (docs/architecture.md, "Module sizes"); a CLI module is argparse and
#: one verb call per command, so it stays far smaller.
MAX_LINES, MAX_CLI_LINES = 750, 500


def test_no_module_outgrows_its_room():
    sizes = {str(f.relative_to(SRC)): len(f.read_text(encoding="utf-8").splitlines()) for f in SRC.rglob("*.py")}
    big = [f"{m}: {n} lines (at most {MAX_CLI_LINES if m.startswith('cli') else MAX_LINES})" for m, n in sorted(sizes.items())
           if n > (MAX_CLI_LINES if m.startswith("cli") else MAX_LINES)]
    assert not big, "split these modules by job:\n" + "\n".join(big)


def test_every_study_is_one_folder_of_studies():
    """A study's verb lives in ``studies/<study>/run.py``, not in ``verbs/`` or ``report/``."""
    studies = {p.name for p in (SRC / "studies").iterdir() if p.is_dir() and not p.name.startswith("_")
               and p.name != "__pycache__"}
    assert studies >= {"intervention_study", "encodings", "sensitivity", "head_types"}, studies
    assert all((SRC / "studies" / s / "run.py").is_file() for s in studies)
    for gone in ("verbs/interventions.py", "verbs/pe_study.py", "verbs/sensitivity.py", "verbs/head_types.py",
                 "report/interventions.py", "report/pe_study.py", "report/sensitivity.py", "cli.py"):
        assert not (SRC / gone).exists(), gone
