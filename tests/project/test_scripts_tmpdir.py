"""scripts/ keeps its temporary files in TMPDIR: scripts/test.sh's PostgreSQL folder among them.

``scripts/test.sh --fast`` runs for real with a stand-in for Python (it installs nothing and runs
no suite; it lists the temporary directory when the suite would start): the throwaway PostgreSQL
server's folder is made in ``TMPDIR`` and removed afterwards. A ``TMPDIR`` the postgres user cannot
enter gets one ``error:`` line naming it. Every ``mktemp`` of scripts/ and .ci/run names ``TMPDIR``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

STAND_IN = """#!/usr/bin/env bash
case "$1 $2" in
  "-m pip"|"-m uv"|"-m compileall"|"-m ruff") exit 0 ;;
  "-m pytest")
    ls -d "$TMPDIR"/gyreflow-pg.* > "$SEEN"
    echo "${GYREFLOW_TEST_POSTGRES_URL%%@*}" >> "$SEEN"
    exit 0 ;;
esac
exec PYTHON "$@"
"""

needs_postgres_user = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None
    or subprocess.run(["id", "postgres"], capture_output=True, check=False).returncode != 0,
    reason="scripts/postgres.sh runs the server as the postgres user when started as root")


def fast_test_command(tmp_path: Path, temporary: Path) -> subprocess.CompletedProcess:
    stand_in = tmp_path / "python"
    stand_in.write_text(STAND_IN.replace("PYTHON", sys.executable), encoding="utf-8")
    stand_in.chmod(0o755)
    env = {key: value for key, value in os.environ.items()
           if key != "GYREFLOW_TEST_POSTGRES_URL"}
    env.update(PYTHON=str(stand_in), TMPDIR=str(temporary), SEEN=str(tmp_path / "seen.txt"))
    return subprocess.run(["bash", "scripts/test.sh", "--fast"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.processes
@needs_postgres_user
def test_the_postgres_folder_of_the_test_command_is_made_in_tmpdir(tmp_path):
    temporary = Path(tempfile.mkdtemp(prefix="gyreflow-tmpdir-test-"))  # the postgres user enters it
    temporary.chmod(0o755)
    try:
        out = fast_test_command(tmp_path, temporary)
        assert out.returncode == 0, out.stdout + out.stderr
        folder, url = (tmp_path / "seen.txt").read_text(encoding="utf-8").splitlines()
        assert Path(folder).parent == temporary
        assert re.fullmatch(r"gyreflow-pg\.\w{6}", Path(folder).name)
        assert url == "postgresql+psycopg://gyreflow"
        assert list(temporary.iterdir()) == []  # the server stopped, its folder removed
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


@pytest.mark.processes
@needs_postgres_user
def test_a_tmpdir_the_postgres_user_cannot_enter_is_named(tmp_path):
    temporary = tmp_path / "private"
    temporary.mkdir(mode=0o700)
    out = fast_test_command(tmp_path, temporary)
    assert out.returncode == 1, out.stdout + out.stderr
    line, = out.stderr.splitlines()
    assert re.fullmatch(
        re.escape(f"error: the postgres user cannot enter {temporary}/gyreflow-pg.") + r"\w{6}"
        + re.escape(" (a folder above it is private to root): choose a folder it can reach, "
                    "e.g. TMPDIR=/tmp"), line), line
    assert list(temporary.iterdir()) == []  # the folder is removed
    assert "running the in-process tests" not in out.stdout  # the command stopped there


def test_every_mktemp_of_the_scripts_names_tmpdir():
    scripts = [*sorted((REPO / "scripts").glob("*.sh")), REPO / ".ci" / "run"]
    calls = [(path.name, line.strip()) for path in scripts
             for line in path.read_text(encoding="utf-8").splitlines()
             if re.search(r"\bmktemp\b", line) and not line.lstrip().startswith("#")]
    assert calls, "no mktemp found: the check reads the wrong files"
    assert [call for call in calls if '"${TMPDIR:-/tmp}/' not in call[1]] == []
