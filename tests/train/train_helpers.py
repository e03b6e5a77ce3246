"""Helpers shared by the training tests: a callback that interrupts training at a given step."""


class Interrupt(Exception):
    """Raised by :func:`interrupt_at` to stop a training run from inside its evaluation callback."""


def interrupt_at(step):
    """An evaluation callback raising :class:`Interrupt` at ``step`` (a run killed there, for resume tests)."""
    def cb(s, model, run_dir):
        if s == step:
            raise Interrupt
    return cb
