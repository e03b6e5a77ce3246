"""User-facing errors: the CLI prints them as one line and exits non-zero (no traceback)."""


class PosymError(Exception):
    """A problem with the user's input (bad task name, impossible layout, missing checkpoint, ...).

    Raised by the public API for anything the user can fix; ``posym.cli`` catches it, prints
    ``posym: error: <message>`` and exits with status 2.
    """


class PosymWarning(UserWarning):
    """Something that still runs but that a researcher should know (e.g. a model given the other
    task's prompts); the CLI prints it as one line ``posym: warning: <message>``."""
