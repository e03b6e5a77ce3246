"""Chromium's failure is one line (issue 34: its own stderr lines followed the error)."""

from __future__ import annotations

import subprocess

import pytest

from posym.errors import PosymError
from posym.report import render


def test_no_screenshot_is_one_line_with_chromiums_last_words(tmp_path, monkeypatch):
    err = "[1:2:ERROR] first complaint\n\n[3:4:FATAL] the last one\n"
    monkeypatch.setattr(render, "_chromium", lambda args, timeout: subprocess.CompletedProcess(args, 1, "", err))
    (tmp_path / "r.html").write_text("<p>x</p>")
    with pytest.raises(PosymError) as e:
        render.screenshot(tmp_path / "r.html", tmp_path / "r.png")
    assert str(e.value) == "Chromium wrote no screenshot (exit 1): [3:4:FATAL] the last one"
