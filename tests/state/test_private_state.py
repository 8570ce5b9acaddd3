"""Private state: state directories 0700 and database files 0600 whatever the umask; a state location
that another user owns, or can write, is refused before any data moves (exit 3, one line); the Spark
log lives in a private per-user directory and is never opened through a symbolic link; ``gyreflow
config`` masks passwords and secrets."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gyreflow.api.cli import main
from gyreflow.runtime.spark.session import spark_log_path
from gyreflow.state.shared.private import UnsafeLocationError, ensure_private_dir, private_file

ROOT = Path(__file__).resolve().parents[2]
LINES = ["a b", "b c", "c d a"]


def run_word_count(tmp_path: Path, state: Path, backend: str, umask: int = 0o022):
    data = tmp_path / "in.txt"
    data.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__BACKEND": backend,
                "GYREFLOW_STATE__PATH": str(state), "COLUMNS": "400"})
    code = (f"import os, runpy, sys; os.umask({umask}); sys.argv = sys.argv[1:]; "
            "runpy.run_module('gyreflow', run_name='__main__')")
    return subprocess.run(
        [sys.executable, "-c", code, "gyreflow", "run", "--quiet", str(ROOT / "examples" / "word_count.py"),
         "--", "--input", str(data), "--window", "1", "--output", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=120, check=False)


def modes(root: Path) -> dict[str, int]:
    found = {str(root): stat.S_IMODE(os.lstat(root).st_mode)}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(folder, name)
            found[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return found


@pytest.mark.parametrize("backend", ["rocksdb", "jdbc"])
def test_state_is_private_whatever_the_umask(backend, tmp_path):
    state = tmp_path / "nested" / "state"
    done = run_word_count(tmp_path, state, backend, umask=0o000)
    assert done.returncode == 0, done.stderr
    found = modes(state)
    for path in (tmp_path / "nested", state):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700, path
    if backend == "jdbc":
        database = state / "snapshots.db"
        assert stat.S_IMODE(os.lstat(database).st_mode) == 0o600
        leaky = {p: oct(m) for p, m in found.items() if m & 0o077 and os.path.isfile(p)}
        assert not leaky, leaky
    # Whatever RocksDB writes later, nothing under the state is reachable by others: its top is 0700.
    assert found[str(state)] == 0o700


def test_a_state_location_of_another_user_is_refused(tmp_path):
    nobody = pwd.getpwnam("nobody")
    if os.geteuid() != 0:
        pytest.skip("needs root to give a directory to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    os.chown(theirs, nobody.pw_uid, nobody.pw_gid)
    done = run_word_count(tmp_path, theirs / "state", "rocksdb")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert str(theirs) in lines[0] and "another user" in lines[0], lines[0]
    assert not (theirs / "state").exists()
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_a_directory_writable_by_others_above_the_state_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # no sticky bit: anyone may rename what is inside
    with pytest.raises(UnsafeLocationError, match="written by other users"):
        ensure_private_dir(str(shared / "state"))
    os.chmod(shared, 0o1777)  # sticky, as /tmp: others cannot replace what is ours
    assert ensure_private_dir(str(shared / "state")) == str(shared / "state")


def test_the_spark_log_is_private_and_never_followed_through_a_link(tmp_path):
    path = spark_log_path()
    directory = os.path.dirname(path)
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    assert os.stat(directory).st_uid == os.geteuid()
    assert str(os.geteuid()) in os.path.basename(directory)
    target = tmp_path / "elsewhere.log"
    link = tmp_path / "link.log"
    link.symlink_to(target)
    with pytest.raises(OSError):
        private_file(str(link))
    assert not target.exists()


def test_config_masks_secrets(monkeypatch):
    for name in [n for n in os.environ if n.startswith("GYREFLOW_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GYREFLOW_STATE__URL", "postgresql://app:hunter2@db.example/jobs")
    monkeypatch.setenv("GYREFLOW_SPARK__CONF",
                       '{"spark.authenticate.secret": "s3cr3t", "spark.executor.memory": "2g"}')
    monkeypatch.setenv("GYREFLOW_STATE__SECRET", "state-k3y")
    result = CliRunner().invoke(main, ["config"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output and "s3cr3t" not in result.output
    assert "state-k3y" not in result.output and 'secret = "***"' in result.output
    assert "postgresql://app:***@db.example/jobs" in result.output
    assert "2g" in result.output
