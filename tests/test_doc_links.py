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
