"""Render an HTML report in headless Chromium (Debian package ``chromium``): a screenshot, and a
check that every image decodes. Used by the tests and, when Chromium is installed, by
``posym reproduce`` (``DIR/report_screenshot.png``)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from posym.errors import PosymError

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")

_CHECK_SCRIPT = ("<script>window.addEventListener('load',function(){var a=Array.prototype.slice.call("
                 "document.images);var ok=a.filter(function(i){return i.complete&&i.naturalWidth>0;}).length;"
                 "document.body.setAttribute('data-images-decoded',ok+'/'+a.length);});</script>")


def find_chromium() -> str | None:
    """Path of a Chromium executable (Debian package ``chromium``), or None."""
    for c in CHROMIUM_CANDIDATES:
        p = c if os.path.isabs(c) and os.access(c, os.X_OK) else shutil.which(c)
        if p:
            return p
    return None


def _chromium(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    exe = find_chromium()
    if exe is None:
        raise PosymError("Chromium is not installed (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="posym-chromium-") as profile:
        try:
            return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise PosymError(f"Chromium did not finish within {timeout:.0f} s") from exc


def screenshot(html_path: str | os.PathLike, png_path: str | os.PathLike, width: int = 1280, height: int = 4000,
               timeout: float = 120) -> Path:
    """Render ``html_path`` in headless Chromium and save a ``width`` × ``height`` PNG screenshot."""
    src, dst = Path(html_path).resolve(), Path(png_path).resolve()
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    res = _chromium([f"--screenshot={dst}", f"--window-size={width},{height}", "--virtual-time-budget=10000",
                     src.as_uri()], timeout)
    if not dst.is_file():
        last = [ln.strip() for ln in res.stderr.splitlines() if ln.strip()]
        raise PosymError(f"Chromium wrote no screenshot (exit {res.returncode}): "
                         f"{last[-1][-300:] if last else 'no message'}")  # one line: Chromium's last words
    return dst


def image_check(html_path: str | os.PathLike, timeout: float = 120) -> tuple[int, int]:
    """``(decoded, total)`` images of a page after it loads in headless Chromium: an inline script,
    added to a temporary copy, records how many ``<img>`` are ``complete`` with ``naturalWidth > 0``."""
    src = Path(html_path)
    text = src.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="posym-report-check-") as tmp:
        copy = Path(tmp) / src.name
        copy.write_text(text.replace("</body>", _CHECK_SCRIPT + "</body>", 1), encoding="utf-8")
        res = _chromium(["--virtual-time-budget=15000", "--dump-dom", copy.resolve().as_uri()], timeout)
    m = re.search(r'data-images-decoded="(\d+)/(\d+)"', res.stdout)
    if not m:
        raise PosymError(f"the page did not finish loading in Chromium (exit {res.returncode}): "
                         f"{res.stderr.strip()[-300:]}")
    return int(m.group(1)), int(m.group(2))


__all__ = ["find_chromium", "image_check", "screenshot"]
