"""The HTML report: one self-contained file, rendered in headless Chromium."""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from posym.report.html import PNG_SIGNATURE, write_report
from posym.report.render import find_chromium, image_check, screenshot

REPO = Path(__file__).resolve().parents[2]


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(page: str) -> list[tuple[str, dict]]:
    p = _Tags()
    p.feed(page)
    return p.tags


def test_report_is_self_contained(tiny_repro):
    page = (tiny_repro / "report.html").read_text(encoding="utf-8")
    tags = _tags(page)
    for tag, attrs in tags:
        for key in ("src", "href", "srcset", "data", "poster", "action"):
            v = (attrs.get(key) or "").strip().lower()
            assert not v.startswith(("http:", "https:", "//", "file:", "ftp:")), (tag, key, v[:80])
            if tag == "a" and key == "href" and v:
                assert v.startswith("#"), v  # only in-page links
    assert not any(tag in ("link", "iframe", "object", "embed") for tag, _ in tags)
    assert not any(tag == "script" and attrs.get("src") for tag, attrs in tags)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page)  # no remote CSS resources
    imgs = [attrs["src"] for tag, attrs in tags if tag == "img"]
    assert len(imgs) >= 15
    for src in imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1], validate=True).startswith(PNG_SIGNATURE)


def test_report_content(tiny_repro):
    page = (tiny_repro / "report.html").read_text(encoding="utf-8")
    for anchor in ("summary", "fig2", "pure", "fig3", "table1", "fig5a", "fig5b", "table3", "configs", "versions"):
        assert f'id="{anchor}"' in page, anchor
    for needle in ("Summary: paper vs posym", "difference", "first step acc_hop1 &gt;= 0.9", "2,050",
                   "positional heads (of 2)", "weighted frequency ID", "Δ(n = 8)", "0.303", "accuracy at +0 tokens",
                   "not run: --no-llm", "git commit", "torch", "transformers", "number seed 1", "letter seed 0",
                   "mean ± sd over seeds", "per seed", 'class="verdict"', "11 of 12"):
        assert needle in page, needle
    # a 2-layer model: no row-by-row "paper (layer)" column beside Paper A's 12 layers, a note instead
    assert "paper (layer)" not in page and "Layers are not comparable one to one" in page
    assert "flow-number-test" in page and '<div class="grid"><figure><img alt="number, seed 0, ' not in page


def test_report_rewrite_is_deterministic_but_for_the_timestamp(repro_copy):
    path = write_report(repro_copy)
    assert path == repro_copy / "report.html"
    a = path.read_text(encoding="utf-8")
    b = write_report(repro_copy).read_text(encoding="utf-8")
    strip = lambda s: re.sub(r"Written [^<]+\.", "", s)
    assert "Written " in a and strip(a) == strip(b)  # from saved tables only: same inputs, same page


def _check_png(path: Path, size: tuple[int, int]) -> None:
    from PIL import Image

    assert path.read_bytes().startswith(PNG_SIGNATURE)
    with Image.open(path) as im:
        im.load()
        assert im.size == size
        px = np.asarray(im.convert("L"), dtype=float)
    assert px.std() > 5  # not blank
    assert (px < 200).mean() > 0.01  # some ink: text, tables, figures


def test_report_renders_in_headless_chromium(tiny_repro, tmp_path):
    if find_chromium() is None:
        pytest.fail("Chromium is not installed; install it with `apt-get install -y chromium` (Debian), "
                    "CI does this in .ci/run")
    report = tiny_repro / "report.html"
    decoded, total = image_check(report)
    assert total >= 15 and decoded == total, f"only {decoded} of {total} images decoded"
    shot = screenshot(report, tmp_path / "report_screenshot.png", width=1280, height=4000)
    _check_png(shot, (1280, 4000))
    # posym reproduce saves one too when Chromium is present
    _check_png(tiny_repro / "report_screenshot.png", (1280, 4000))


def test_fig8_and_fig4b_are_shown_one_per_row_and_fig2_names_what_it_draws_of_paper_a(tiny_repro):
    # the tiny preset's 30 steps: Paper A's 0.9-crossings (steps 2,050–3,400) are not drawn, and the caption says so
    page = (tiny_repro / "report.html").read_text(encoding="utf-8")
    assert "Paper A&#x27;s points (open circles) lie beyond this run&#x27;s 30 steps" in page
    assert "open circles: the step" not in page
    # Fig. 8 and Fig. 4B at the page width (drawn for it), not three to a row at 0.3 ×
    for task in ("number", "letter"):
        assert f'<div class="wide"><figure><img alt="Fig. 8: frequency use per layer, {task}, seed 0"' in page
        assert '<div class="grid"><figure><img alt="Fig. 8' not in page
    assert page.count('<figure><img alt="Fig. 4B: query/key geometry') == 2


@pytest.mark.parametrize("last, drawn", [(1500, False), (4000, True)])
def test_fig2_caption_says_whether_paper_a_points_are_drawn(last, drawn):
    import matplotlib.pyplot as plt
    import pandas as pd

    from posym.report import paper
    from posym.report.aggregate import plot_accuracy_bands
    from posym.report.html import paper_steps_caption

    steps = np.linspace(0, last, 6)
    acc = np.linspace(0, 1, 6)
    curves = pd.DataFrame({"task": "number", "step": steps, "n_seeds": 1,
                           **{f"{c}_{k}": (acc if k == "mean" else np.nan)
                              for c in ("acc", "acc_hop1", "acc_hop2", "acc_hop3", "acc_hop4") for k in ("mean", "sd")}})
    fig = plot_accuracy_bands(curves, "number", paper_steps=paper.HOP_09_STEP["number"])
    circles = [line for line in fig.axes[0].lines if line.get_marker() == "o"]
    plt.close(fig)
    caption = paper_steps_caption(curves, "number")
    assert bool(circles) == drawn  # the caption and the figure agree
    if drawn:
        assert caption == "open circles: the steps at which Paper A's curves cross 0.9 (steps 2,050–3,400)."
    else:
        assert caption == ("Paper A's points (open circles) lie beyond this run's 1,500 steps (Paper A crosses 0.9 "
                           "at steps 2,050–3,400): not drawn.")
    assert "lie beyond the drawn steps" in paper_steps_caption(curves.iloc[:0], "number")
