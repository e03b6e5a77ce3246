"""Progress output in a log file (stderr not a terminal): plain lines, no carriage returns, and no
message glued onto a bar fragment (posym.progress; the workers of posym reproduce)."""

from __future__ import annotations

import io
import multiprocessing as mp
import sys

from tqdm.auto import tqdm

from posym.progress import LineProgress, clear_bars, line_progress


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_bars_become_periodic_plain_lines_and_stage_lines_stay_whole():
    buf, clock = io.StringIO(), Clock()
    stream = LineProgress(buf, every=30.0, clock=clock)
    for stage in ("train number/quick", "train letter/quick"):
        stream.write(f"[reproduce] start {stage}\n")
        bar = tqdm(total=120, desc=stage, file=stream, mininterval=0, miniters=1)
        for _ in range(120):
            clock.t += 1.0
            bar.update(1)
        bar.close()
        stream.write(f"[reproduce] done  {stage} in 120.0 s\n")
    text = buf.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    for stage in ("train number/quick", "train letter/quick"):
        bar_lines = [line for line in lines if line.startswith(stage)]
        assert 3 <= len(bar_lines) <= 6, bar_lines  # ≈ one per 30 s of 120 s, plus the final state
        assert "120/120" in bar_lines[-1]
        assert f"[reproduce] start {stage}" in lines and f"[reproduce] done  {stage} in 120.0 s" in lines
    assert all(line.startswith(("[reproduce] ", "train ")) for line in lines), lines  # nothing glued


def test_an_error_after_clearing_the_bars_has_its_own_line():
    buf = io.StringIO()
    stream = LineProgress(buf, every=30.0, clock=Clock())
    bar = tqdm(total=10, desc="lengthgen number", file=stream, mininterval=0)
    bar.update(1)
    clear_bars()
    stream.write("posym: error: too big\n")
    assert buf.getvalue() == "posym: error: too big\n"
    assert bar.disable  # closed: nothing more is drawn when it is collected


def test_other_output_interrupting_a_bar_ends_the_bar_line_first():
    buf = io.StringIO()
    stream = LineProgress(buf, every=30.0, clock=Clock())
    bar = tqdm(total=10, desc="scoring", file=stream, mininterval=0)
    bar.update(3)
    stream.write("a warning\n")
    bar.close()
    lines = buf.getvalue().splitlines()
    assert lines[0].startswith("scoring") and "3/10" in lines[0]
    assert lines[1] == "a warning" and "\r" not in buf.getvalue()


def test_line_progress_wraps_only_a_stderr_that_is_not_a_terminal(monkeypatch):
    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    with line_progress():
        assert isinstance(sys.stderr, LineProgress)
        with line_progress():  # nested: not wrapped twice
            assert isinstance(sys.stderr, LineProgress) and sys.stderr.stream is plain
    assert sys.stderr is plain

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    with line_progress():
        assert sys.stderr is tty


def test_reproduce_worker_writes_plain_lines_when_stderr_is_not_a_terminal(monkeypatch):
    from posym.launch.pool import worker_init

    plain = io.StringIO()
    monkeypatch.setattr(sys, "stderr", plain)
    _keep_tqdm_init(monkeypatch)
    worker_init(mp.get_context("spawn").Value("i", 0), tty=False)
    assert isinstance(sys.stderr, LineProgress) and sys.stderr.stream is plain
    monkeypatch.setattr(sys, "stderr", plain)
    worker_init(mp.get_context("spawn").Value("i", 1), tty=True)
    assert sys.stderr is plain


def _keep_tqdm_init(monkeypatch) -> None:
    """Undo :func:`posym.progress.set_bar_position` (it sets tqdm's class default) after the test."""
    from tqdm import std

    monkeypatch.setattr(std.tqdm, "__init__", std.tqdm.__dict__["__init__"])
    if "_posym_init" in std.tqdm.__dict__:
        monkeypatch.setattr(std.tqdm, "_posym_init", std.tqdm.__dict__["_posym_init"])
    else:
        monkeypatch.setattr(std.tqdm, "_posym_init", None, raising=False)


def _bar_position() -> int:
    """The terminal line (0 = the cursor's) of a bar made in this process (a worker's)."""
    bar = tqdm(total=2, file=io.StringIO(), mininterval=0)
    pos = abs(bar.pos)
    bar.close()
    return pos


def test_each_reproduce_worker_draws_its_bars_on_its_own_terminal_line(monkeypatch):
    # in this process (tqdm imported long before, as in a worker): the old TQDM_POSITION came too late
    from posym.launch.pool import worker_init

    _keep_tqdm_init(monkeypatch)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    counter = mp.get_context("spawn").Value("i", 1)
    worker_init(counter, tty=True)
    assert _bar_position() == 1
    buf = io.StringIO()
    bar = tqdm(total=2, file=buf, mininterval=0, desc="train letter/quick")
    bar.update(1)
    assert buf.getvalue().startswith("\n") and "\x1b[A" in buf.getvalue()  # drawn one line down, cursor back
    bar.close()
    explicit = tqdm(total=1, file=io.StringIO(), position=3)
    assert abs(explicit.pos) == 3  # a bar that names its line keeps it
    explicit.close()
    worker_init(counter, tty=True)  # a second call replaces the default (no stacking)
    assert _bar_position() == 2 and counter.value == 3

    # real worker processes of posym reproduce (spawned, as reproduce starts them)
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=worker_init,
                             initargs=(ctx.Value("i", 1), True, None)) as pool:
        assert pool.submit(_bar_position).result(timeout=120) == 1
