"""Child processes that a test stops with Ctrl-C (SIGINT)."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: a shell that starts a command in the background starts it
    with SIGINT ignored, and Python then installs no KeyboardInterrupt handler; give the child the
    default handler so the test's SIGINT acts as a Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
