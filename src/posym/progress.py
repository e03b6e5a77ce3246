"""Progress output that suits where it goes: tqdm bars on a terminal; plain lines in a log file.

A tqdm bar redraws itself with a carriage return (``\\r``) several times a second. On a terminal that
is one live line; in a log file it is thousands of updates glued together, and any line printed
meanwhile lands on a bar fragment. :class:`LineProgress` wraps a stream that is not a terminal: it
turns the bar updates into one plain line every :data:`EVERY` seconds (and the bar's final state
when it ends), passes every other line through unchanged, and never writes ``\\r``.
:func:`clear_bars` removes the live bars before an error message, so the message gets its own line;
:func:`set_bar_position` gives a worker process's bars their own terminal line.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import time
from typing import Callable, Iterator, TextIO

#: Seconds between two progress lines in a log file (stderr not a terminal).
EVERY = 30.0

_SPLIT = re.compile(r"([\r\n])")


class LineProgress:
    """A text stream over ``stream`` that writes tqdm's ``\\r`` redraws as plain lines, at most one per
    ``every`` seconds; a bar's last state is written when it ends (``\\n``) or when other output
    interrupts it; a bar cleared without ending (``leave=False``) writes nothing more."""

    def __init__(self, stream: TextIO, every: float = EVERY, clock: Callable[[], float] = time.monotonic):
        self.stream = stream
        self.every = every
        self.clock = clock
        self._status: str | None = None  # the bar line being redrawn (None: no bar on the line)
        self._plain = ""  # other text of an unfinished line
        self._last = clock()  # time of the last progress line
        self._last_text = ""

    def _emit_status(self) -> str:
        text = (self._status or "").strip()
        self._status = None
        if not text or text == self._last_text:
            return ""
        self._last_text, self._last = text, self.clock()
        return text + "\n"

    def write(self, text: str) -> int:
        if not text:
            return 0
        out = []
        if self._status is not None and not text.startswith(("\r", "\n")):
            out.append(self._emit_status())  # other output interrupts a bar: its state on its own line
        for part in _SPLIT.split(text):
            if part == "\r":
                if self._plain:
                    out.append(self._plain + "\n")
                    self._plain = ""
                if self._status is not None and self.clock() - self._last >= self.every:
                    out.append(self._emit_status())
                self._status = ""
            elif part == "\n":
                if self._status is not None:
                    out.append(self._emit_status())
                else:
                    out.append(self._plain + "\n")
                    self._plain = ""
            elif part:
                if self._status is not None:
                    self._status += part
                else:
                    self._plain += part
        chunk = "".join(out)
        if chunk:
            self.stream.write(chunk)
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self.stream.fileno()


def is_terminal(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    return bool(getattr(stream, "isatty", lambda: False)())


@contextlib.contextmanager
def line_progress(every: float = EVERY) -> Iterator[None]:
    """Within the block, progress on a stderr that is not a terminal comes as plain lines
    (:class:`LineProgress`); a terminal (or an already wrapped stderr) is left as it is."""
    if is_terminal() or isinstance(sys.stderr, LineProgress):
        yield
        return
    saved = sys.stderr
    sys.stderr = LineProgress(saved, every)  # type: ignore[assignment]
    try:
        yield
    finally:
        if isinstance(sys.stderr, LineProgress):
            sys.stderr = saved


def set_bar_position(position: int) -> None:
    """Draw every tqdm bar made from now on in this process on terminal line ``position`` below the
    cursor (0: the cursor's line), unless the bar names its own: the workers of ``posym reproduce
    --jobs N`` each draw on their own line. (tqdm reads ``TQDM_POSITION`` once, when it is imported —
    too early for a worker that learns its index after the import — so the default is set on tqdm's
    class; a later call replaces it.)"""
    from tqdm import std

    cls = std.tqdm
    original = cls.__dict__.get("_posym_init") or cls.__dict__["__init__"]
    cls._posym_init = original
    cls.__init__ = functools.partialmethod(original, position=int(position))


def clear_bars() -> None:
    """Close every live tqdm bar without leaving its line, so that what is printed next (an error) starts
    on a clean line."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return
    for bar in list(getattr(tqdm, "_instances", ())):
        try:
            bar.leave = False
            bar.close()
        except Exception:  # noqa: BLE001 - best effort, never hide the error being reported
            pass


__all__ = ["EVERY", "LineProgress", "clear_bars", "is_terminal", "line_progress", "set_bar_position"]
