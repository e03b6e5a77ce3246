"""``posym report``: the self-contained HTML report of a reproduction directory (or its summary table)."""

from __future__ import annotations

import os
from pathlib import Path

from posym.errors import PosymError
from posym.runs import layout
from posym.verbs import Outputs, VerbResult


def report(directory: str | os.PathLike, *, screenshot: str | os.PathLike | None = None, markdown: bool = False,
           force: bool = False) -> VerbResult:
    """Rewrite ``DIR/report.html`` (and ``DIR/aggregate/``) from saved tables; ``markdown`` returns the
    paper-vs-posym table instead; ``screenshot`` renders the page to a PNG in headless Chromium.

    Like every verb, an existing ``report.html`` (or ``screenshot``) is replaced only with ``force``
    (``posym reproduce`` rewrites its own report whenever a stage ran)."""
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
    Outputs([directory / layout.REPORT_HTML] + ([screenshot] if screenshot is not None else []), force).check()
    path = write_report(directory)
    files, lines = [path], [f"wrote {path}"]
    if screenshot is not None:
        files.append(render(path, screenshot))
        lines.append(f"wrote {files[-1]}")
    return VerbResult(None, files, "\n".join(lines))


__all__ = ["report"]
