"""Test hook for tests/verbs/test_slurm_cluster.py, active only with POSYM_TEST_PAUSE_AT set: a training
stops at its evaluation of step POSYM_TEST_PAUSE_AT (before that step's checkpoint), writes
POSYM_TEST_PAUSE_FILE and waits there, so that the test can ``scancel`` a job that is surely
training. Python imports this module at start-up when its folder is on PYTHONPATH."""

import os

if os.environ.get("POSYM_TEST_PAUSE_AT"):
    import time

    import posym.verbs.train as _verbs_train

    _real_loop = _verbs_train.train_loop
    _at = int(os.environ["POSYM_TEST_PAUSE_AT"])

    def _pause(step, model, run_dir):
        if step >= _at:
            with open(os.environ["POSYM_TEST_PAUSE_FILE"], "w") as fh:
                fh.write(f"{step}\n")
            while True:
                time.sleep(0.2)

    def _loop(*args, callbacks=(), **kwargs):
        return _real_loop(*args, **kwargs, callbacks=[*callbacks, _pause])

    _verbs_train.train_loop = _loop
