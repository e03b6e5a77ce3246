"""One home for each small rule (docs/architecture.md): a rule that posym defines once must not get a
second definition elsewhere in ``src/posym``. Parses every module with ``ast`` (comments and docstrings
cannot trip it) and fails naming the file and line of each second home.

The rules and their homes:

* the atomic write (a temporary sibling, then ``os.replace``) and the exchange of directories:
  ``posym/files.py`` (``os.replace``/``os.rename`` elsewhere only where :data:`ALLOWED` says why);
* ``mean ± sd`` over seeds: ``posym/report/format.py`` (``def mean_sd``);
* the tasks ``("number", "letter")``, Paper A's γ = 0.1, the reach threshold 0.9 and the data-seed
  offsets 1,000,000 / 2,000,000: ``posym/constants.py``;
* the integer checks: ``posym/checks.py``;
* the reach of a length-generalization curve: ``posym/lengthgen/trained.py`` (``def largest_length_above``);
* the name of every run file: ``posym/runs/layout.py``.

:data:`PENDING` lists the copies that remain in modules being rewritten elsewhere; the entries are
removed as those modules take the homes, and an entry that is no longer needed fails
:func:`test_pending_entries_are_still_needed`.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "posym"

#: Rule -> {module (relative to src/posym): why it may hold the rule's pattern}. Permanent.
ALLOWED: dict[str, dict[str, str]] = {
    "os.replace": {
        "files.py": "the home: write_atomic and exchange_dirs",
        "train/checkpoints.py": "swaps a whole checkpoint directory (old one renamed aside, new one renamed in); "
                                "files.write_atomic writes one file",
        "integrations/tracker.py": "rotates scores.csv (and its Parquet copy) aside to scores.previous.csv: "
                                   "a move of a finished file, not a write",
        "runs/lock.py": "takes a stale lock over by renaming it aside (only one contender's rename succeeds); "
                        "the lock record itself is written by files.write_text_atomic",
    },
    "def mean_sd": {"report/format.py": "the home"},
    "tasks literal": {"constants.py": "the home"},
    "gamma default": {"constants.py": "the home"},
    "threshold default": {"constants.py": "the home"},
    "seed offset": {"constants.py": "the home"},
    "int check": {"checks.py": "the home"},
    "def largest_length_above": {"lengthgen/trained.py": "the home (int | None; report.aggregate.curve_reach "
                                                         "is its NaN form)"},
    "run file name": {"runs/layout.py": "the home"},
}

#: Rule -> {module: what is left to do}. Copies in modules that are being rewritten elsewhere; empty
#: each entry once its module uses the home.
PENDING: dict[str, dict[str, str]] = {}


_INT_CHECKS = {"check_int", "check_positive_int", "positive_int", "_positive", "_check_int", "check_count",
               "_positive_int", "_nonneg_int"}
_FILE_NAME = re.compile(r"[\w.]+\.(csv|json|jsonl|md|html|png|pdf|pt|parquet|lock)")


def _modules() -> dict[str, ast.Module]:
    return {p.relative_to(SRC).as_posix(): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(SRC.rglob("*.py"))}


def _run_file_names() -> set[str]:
    """The run-file names that runs/layout.py gives as module-level string constants."""
    tree = ast.parse((SRC / "runs" / "layout.py").read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and _FILE_NAME.fullmatch(value.value):
            names.add(value.value)
    return names


def _const(node: ast.AST | None, value: object) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, ast.AST | None]]:
    a = fn.args
    pos = a.posonlyargs + a.args
    return ([(x.arg, d) for x, d in zip(pos[len(pos) - len(a.defaults):], a.defaults)]
            + [(x.arg, d) for x, d in zip(a.kwonlyargs, a.kw_defaults)])


def _hits(tree: ast.Module, file_names: set[str]) -> list[tuple[str, int, str]]:
    """(rule, line, what) of every pattern of the rules in one module."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("replace", "rename") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "os":
            out.append(("os.replace", node.lineno, f"os.{node.func.attr}("))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if node.name.lstrip("_") == "mean_sd":
                out.append(("def mean_sd", node.lineno, f"def {node.name}"))
            if node.name in _INT_CHECKS:
                out.append(("int check", node.lineno, f"def {node.name}"))
            if node.name == "largest_length_above":
                out.append(("def largest_length_above", node.lineno, "def largest_length_above"))
            for arg, default in _defaults(node):
                if arg == "gamma" and _const(default, 0.1):
                    out.append(("gamma default", node.lineno, f"{node.name}(gamma=0.1)"))
                if arg == "threshold" and _const(default, 0.9):
                    out.append(("threshold default", node.lineno, f"{node.name}(threshold=0.9)"))
        elif isinstance(node, (ast.Tuple, ast.List)) and len(node.elts) == 2 \
                and _const(node.elts[0], "number") and _const(node.elts[1], "letter"):
            out.append(("tasks literal", node.lineno, '("number", "letter")'))
        elif isinstance(node, ast.Assign) and _const(node.value, 0.1) \
                and any(isinstance(t, ast.Name) and "GAMMA" in t.id for t in node.targets):
            out.append(("gamma default", node.lineno, "GAMMA = 0.1"))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) \
                and any(_const(x, 1_000_000) or _const(x, 2_000_000) for x in (node.left, node.right)):
            out.append(("seed offset", node.lineno, "1_000_000 / 2_000_000 + ..."))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in file_names:
            out.append(("run file name", node.lineno, repr(node.value)))
    return out


@functools.lru_cache(maxsize=1)
def _all_hits() -> dict[str, dict[str, list[str]]]:
    """rule -> module -> ["line: what", ...]."""
    names = _run_file_names()
    found: dict[str, dict[str, list[str]]] = {}
    for rel, tree in _modules().items():
        for rule, line, what in _hits(tree, names):
            found.setdefault(rule, {}).setdefault(rel, []).append(f"{line}: {what}")
    return found


def test_the_file_names_are_found():
    names = _run_file_names()
    assert {"posym.json", "metrics.csv", "scores.csv", "lengthgen.csv", ".posym.lock"} <= names
    assert "checkpoints" not in names  # a folder name is no file name


@pytest.mark.parametrize("rule", sorted(ALLOWED))
def test_one_home(rule):
    found = _all_hits().get(rule, {})
    extra = {rel: where for rel, where in found.items()
             if rel not in ALLOWED[rule] and rel not in PENDING.get(rule, {})}
    assert not extra, (f"a second home of the rule '{rule}' (use the one home, or say why in ALLOWED of "
                       f"tests/test_one_home.py): " + "; ".join(f"src/posym/{r} line {', '.join(w)}" for r, w in extra.items()))


def test_pending_entries_are_still_needed():
    found = _all_hits()
    stale = [f"{rule}: {rel}" for rule, mods in PENDING.items() for rel in mods if rel not in found.get(rule, {})]
    assert not stale, f"these modules use the home now; remove them from PENDING in tests/test_one_home.py: {stale}"


def test_the_checks_see_a_second_home():
    src = '''
import os
def mean_sd(v): pass
def positive_int(v, name): pass
def f(x, gamma=0.1, threshold=0.9): pass
TASKS = ("number", "letter")
GAMMA = 0.1
os.replace("a", "b")
seed = 1_000_000 + 3
name = "metrics.csv"
'''
    rules = {rule for rule, _, _ in _hits(ast.parse(src), {"metrics.csv"})}
    assert rules == {"os.replace", "def mean_sd", "int check", "gamma default", "threshold default", "tasks literal",
                     "seed offset", "run file name"}
