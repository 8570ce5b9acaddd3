"""A test worker that dies ends the suite with that test named, instead of a run that never ends.

``scripts/test.sh`` runs pytest-xdist with ``--dist loadgroup``. When a worker dies (a segmentation
fault in an extension module), pytest-xdist 3.8 replaces it and can then wait for ever at the end of
the run (pytest-xdist issues 1323, 1327, 1378); ``--max-worker-restart 0`` ends the run instead.
Checked on a small suite written here, run by pytest in a process of its own with the options
``scripts/test.sh`` gives it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SUITE = textwrap.dedent('''
    import os
    import signal
    import time

    import pytest


    @pytest.mark.xdist_group("shared")
    def test_before():
        time.sleep(0.3)


    @pytest.mark.xdist_group("shared")
    def test_dies():
        os.kill(os.getpid(), signal.SIGSEGV)


    @pytest.mark.xdist_group("shared")
    def test_after():
        pass


    def test_elsewhere():
        time.sleep(0.5)
''')


def pytest_commands() -> list[str]:
    """The pytest commands of scripts/test.sh, each joined into one line."""
    text = (REPO / "scripts" / "test.sh").read_text(encoding="utf-8").replace("\\\n", " ")
    return [line for line in text.splitlines() if "-m pytest" in line]


def test_every_pytest_command_of_the_test_script_ends_on_a_dead_worker():
    commands = pytest_commands()
    assert len(commands) == 2, commands  # the whole suite and --fast
    for command in commands:
        assert "--dist loadgroup" in command, command
        assert re.search(r"--max-worker-restart 0\b", command), command


def run_small_suite(folder: Path) -> subprocess.CompletedProcess:
    """pytest on the small suite with the options of scripts/test.sh, in a process of its own.

    pytest-xdist 3.8 itself sometimes ends such a run with an INTERNALERROR ("cannot send (already
    closed?)": its scheduler sending work to the worker that has just died). That run still ends,
    but not the way this test describes: it is run again, at most twice, when that is all it said.
    """
    for _attempt in range(3):
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
             "-n", "1", "--dist", "loadgroup", "--max-worker-restart", "0", "test_small.py"],
            cwd=folder, capture_output=True, text=True, timeout=120, check=False)
        if not (run.returncode == 3 and "already closed" in run.stdout + run.stderr):
            break
    return run


@pytest.mark.processes
def test_a_dead_worker_fails_its_test_and_the_run_ends(tmp_path):
    (tmp_path / "test_small.py").write_text(SUITE, encoding="utf-8")
    run = run_small_suite(tmp_path)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert "crashed while running 'test_small.py::test_dies" in run.stdout, run.stdout[-3000:]
    assert "FAILED test_small.py::test_dies" in run.stdout, run.stdout[-3000:]
