"""``posym report``: the self-contained HTML report of a reproduction directory (or its summary table)."""

from __future__ import annotations

import os
from pathlib import Path

from posym.errors import PosymError
from posym.runs import layout
from posym.verbs import Outputs, VerbResult


def report(directory: str | os.PathLike, *, screenshot: str | os.PathLike | None = None, markdown: bool = False,
           force: bool = True) -> VerbResult:
    """Rewrite ``DIR/report.html`` (and ``DIR/aggregate/``) from saved tables; ``markdown`` returns the
    paper-vs-posym table instead; ``screenshot`` renders the page to a PNG in headless Chromium.

    The report is derived data, rewritten from the tables on every call (``force`` defaults to True);
    a ``screenshot`` file that exists needs ``force``."""
    from posym.report.html import summary_markdown, write_report
    from posym.report.render import screenshot as render

    directory = Path(directory)
    if not directory.is_dir():
        raise PosymError(f"no such reproduction directory: {directory}")
    if not (directory / layout.REPRODUCE_JSON).is_file() and not layout.find_runs(directory):
        raise PosymError(f"{directory} is not a reproduction directory (no {layout.REPRODUCE_JSON}, no "
                         "<task>/seed<k> runs); posym report reads what posym reproduce writes")
    if markdown:
        return VerbResult(None, [], summary_markdown(directory).rstrip("\n"))
    if screenshot is not None:
        Outputs([screenshot], force).check()
    path = write_report(directory)
    files, lines = [path], [f"wrote {path}"]
    if screenshot is not None:
        files.append(render(path, screenshot))
        lines.append(f"wrote {files[-1]}")
    return VerbResult(None, files, "\n".join(lines))


__all__ = ["report"]
