"""Every relative Markdown link and image in README.md and docs/ points at an existing file, and every
``#anchor`` at a heading of that file (GitHub's heading ids). Fast, no network."""
from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines of ``text`` outside fenced code blocks."""
    lines, fenced = [], False
    for i, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((i, line))
    return lines


def _slug(heading: str) -> str:
    """GitHub's id of a heading: lower case, punctuation dropped (letters, digits, '-', '_' and spaces
    kept), spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c in "-_ " or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The heading ids of a Markdown file (a repeated heading gets -1, -2, … as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            slug = _slug(m.group(1).replace("`", ""))
            n = seen.get(slug, 0)
            out.add(slug if n == 0 else f"{slug}-{n}")
            seen[slug] = n + 1
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every relative link and image of ``path``."""
    out = []
    for i, line in _prose(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                out.append((i, target))
    return out


def test_the_docs_have_links():
    assert sum(len(links(p)) for p in DOCS) > 50


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    bad = []
    for line, target in links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{doc.relative_to(ROOT)}:{line}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{doc.relative_to(ROOT)}:{line}: {target} (no heading #{anchor})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_fences_are_closed(doc):
    fences = [line for line in doc.read_text(encoding="utf-8").split("\n") if FENCE.match(line)]
    assert len(fences) % 2 == 0, f"{doc.relative_to(ROOT)}: a code block is never closed"


def test_slug_follows_github():
    assert _slug("Theory: Δ(n) under each intervention") == "theory-δn-under-each-intervention"
    assert _slug("Both offline models, both protocols: the SPEC §1.5 grid") == \
        "both-offline-models-both-protocols-the-spec-15-grid"
    assert _slug("Scoring your own sequences (posym scores --text / --ids)") == \
        "scoring-your-own-sequences-posym-scores---text----ids"


TEST_PATH = re.compile(r"\btests/[\w/]+\.py\b")
API_NAME = re.compile(r"`(posym(?:\.[A-Za-z_]\w*)+)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_test_files_exist(doc):
    """A test file a doc cites as the proof of a promise (docs/reliability.md) exists where it says."""
    text = doc.read_text(encoding="utf-8")
    missing = sorted({m for m in TEST_PATH.findall(text) if not (ROOT / m).is_file()})
    assert not missing, f"{doc.relative_to(ROOT)} cites test files that moved or went: {missing}"


def _resolves(dotted: str) -> bool:
    """Whether ``posym.a.b.c`` names a module or an attribute of one (the longest importable prefix)."""
    import importlib

    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_python_names_exist(doc):
    """Every ``posym.…`` name a doc gives in code quotes is importable (a module, or a name in one)."""
    text = doc.read_text(encoding="utf-8")
    names = {m.rstrip(".") for m in API_NAME.findall(text)} - {"posym.json"}  # a run's file, not a name
    bad = sorted(m for m in names if not m.endswith("_") and not _resolves(m))  # "scores_*": a pattern
    assert not bad, f"{doc.relative_to(ROOT)} cites names posym does not have: {bad}"
