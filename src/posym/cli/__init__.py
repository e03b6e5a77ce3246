"""``posym`` command line: argparse only. Each command calls one verb of :mod:`posym.verbs` with the
options the user gave (the verb's signature holds every default) and prints what it returns; one module
per group of commands builds its parsers (``add_parsers``).

Every bad value is refused at the edge by an argparse type (one line ``posym: error: …``, exit 2);
user errors raised by the API (``PosymError``) and the expected file-system failures (an unwritable
or read-only path, a file where a folder is needed, a full disk) print one line and exit 2 as well.
An unexpected exception still prints its traceback, so bugs stay visible.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import sys
import warnings
from typing import Sequence

from posym.cli import analyses, data, llm, reproduce, studies, train
from posym.cli.common import OneLineParser
from posym.errors import PosymError

#: The command groups, in the order ``posym --help`` lists their commands.
GROUPS = (data, train, analyses, llm, studies, reproduce)


def build_parser() -> argparse.ArgumentParser:
    """The ``posym`` parser: every group's sub-commands (``_stage``, run by a Slurm job, stays hidden)."""
    p = OneLineParser(prog="posym", description="Positional versus symbolic attention heads (Urrutia et al. 2026).")
    sub = p.add_subparsers(dest="verb", required=True, parser_class=OneLineParser)
    for group in GROUPS:
        group.add_parsers(sub)
    sub.metavar = "{" + ",".join(n for n in sub.choices if not n.startswith("_")) + "}"
    return p


#: File-system failures a user can fix (one line, exit 2); anything else keeps its traceback.
_USER_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR,
                errno.EEXIST, errno.ENOENT, errno.ENAMETOOLONG, errno.EMFILE}


@contextlib.contextmanager
def _posym_warnings():
    """Print each :class:`~posym.errors.PosymWarning` as one line ``posym: warning: …`` (others as Python does)."""
    from posym.errors import PosymWarning
    from posym.progress import clear_bars

    shown, previous = set(), warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, PosymWarning):
            return previous(message, category, filename, lineno, file, line)
        if str(message) not in shown:
            shown.add(str(message))
            clear_bars()
            print(f"posym: warning: {message}", file=sys.stderr)
    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (2 for every bad input, 130 on Ctrl-C)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed on one line)
        return int(exc.code or 0)
    from posym.progress import clear_bars, line_progress

    try:
        with line_progress(), _posym_warnings():  # progress bars as plain lines when stderr is not a terminal
            args.func(args)
    except PosymError as exc:
        clear_bars()  # the error gets its own line, not the end of a bar's
        print(f"posym: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        if exc.errno not in _USER_ERRNOS:
            raise
        clear_bars()
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"posym: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except MemoryError:
        clear_bars()
        print("posym: error: out of memory; use smaller sizes (--n, --grid, --batch-size)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        clear_bars()
        print("posym: interrupted (a run or reproduction continues with the same command and --resume / again)",
              file=sys.stderr)
        return 130
    return 0


__all__ = ["build_parser", "main"]
