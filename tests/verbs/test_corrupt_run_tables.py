"""A garbage ``metrics.csv`` / ``scores.csv`` read by ``posym dynamics`` or ``posym select`` is one line
naming the file, and ``select --force`` leaves its output untouched (issue 34, T4: tracebacks)."""

from __future__ import annotations

import shutil

import pytest

from posym.errors import PosymError
from posym.verbs.dynamics import dynamics
from posym.verbs.select import select

from tiny_runs import tiny_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("corrupt") / "run")


@pytest.mark.parametrize("table, content", [("metrics.csv", "garbage\n"), ("metrics.csv", ""),
                                            ("scores.csv", "garbage\n"), ("scores.csv", "a,b\n\"x\n")])
def test_dynamics_and_select_of_a_corrupt_table_are_one_line(run, tmp_path, table, content):
    bad = tmp_path / "run"
    shutil.copytree(run, bad)
    (bad / table).write_text(content)
    (bad / table.replace(".csv", ".parquet")).unlink(missing_ok=True)
    with pytest.raises(PosymError, match=table) as e:
        dynamics(bad, out=tmp_path / "dyn")
    assert "\n" not in str(e.value)
    out = tmp_path / "sel"
    select(run, out, final_model="last", progress=False)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(PosymError, match=table):
        select(bad, out, final_model="last", force=True, progress=False)
    assert sorted(p.name for p in out.iterdir()) == before  # nothing removed before the check
