"""Shared fixture of the reproduction tests: one tiny end-to-end reproduction (2 tasks x 2 seeds)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_repro(tmp_path_factory) -> Path:
    """``posym reproduce`` with the testing preset ``tiny`` (2-layer models, 30 steps, tiny analyses),
    both tasks, seeds 0 and 1, two worker processes, no LLM. Treat as read-only: copy it first."""
    from posym.verbs.reproduce import reproduce

    out = tmp_path_factory.mktemp("repro") / "dir"
    report = reproduce("tiny", out=out, seeds=2, jobs=2, llm=False, progress=False)
    assert report == out / "report.html"
    return out


@pytest.fixture
def repro_copy(tiny_repro, tmp_path) -> Path:
    """A private copy of the tiny reproduction that a test may change."""
    dst = tmp_path / "copy"
    shutil.copytree(tiny_repro, dst)
    return dst


#: Fixtures that make a test an integration test (a whole reproduction, a trained model in a fixture).
INTEGRATION_FIXTURES = {"tiny_repro", "repro_copy"}


def pytest_collection_modifyitems(config, items):
    """Tier the suite: a test that uses a reproduction fixture is ``integration`` (see pyproject)."""
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
