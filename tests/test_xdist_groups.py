"""The suite's xdist groups hold (tests/conftest.py ``_xdist_group_ids``): under ``-n 2 --dist loadgroup`` the
tests of one ``xdist_group`` run on one worker, its module fixture set up once. pytest >= 9.2 ignores the
node-id suffix pytest-xdist 3.8 assigns, so without the conftest's own suffix the real-Slurm tests ran on both
workers, two clusters at once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("xdist")

CONFTEST = Path(__file__).with_name("conftest.py")


def test_a_group_runs_on_one_worker_with_one_fixture_setup(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import importlib.util
        import pytest
        spec = importlib.util.spec_from_file_location("posym_tests_conftest", {str(CONFTEST)!r})
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(config, items):
            suite._xdist_group_ids(config, items)
    """))
    (tmp_path / "test_group.py").write_text(textwrap.dedent("""
        import os
        import pytest
        pytestmark = pytest.mark.xdist_group("g")

        @pytest.fixture(scope="module")
        def setup_log(tmp_path_factory):
            with open(os.environ["SETUP_LOG"], "a") as f:
                f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")

        @pytest.mark.parametrize("i", range(6))
        def test_member(setup_log, i):
            with open(os.environ["RUN_LOG"], "a") as f:
                f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
    """))
    (tmp_path / "test_other.py").write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    env = {"SETUP_LOG": str(tmp_path / "setup.log"), "RUN_LOG": str(tmp_path / "run.log"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "-p", "no:randomly", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = (tmp_path / "run.log").read_text().split()
    assert len(runs) == 6 and len(set(runs)) == 1, runs  # one worker ran the whole group
    assert len((tmp_path / "setup.log").read_text().split()) == 1  # its module fixture set up once
