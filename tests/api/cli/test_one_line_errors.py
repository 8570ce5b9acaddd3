"""An ``error:`` message is one line whatever the terminal, as a log or ``grep error:`` reads it.

Every case runs a real ``gyreflow`` process with stdout and stderr piped and no ``COLUMNS``: rich
would otherwise wrap at 80 columns, in the middle of a path. The paths and names are made longer
than a terminal line on purpose.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _control_jobs import Job, job_args
from _recovery_data import write_lines
from test_notifications import make_lines

LONG = "a-folder-name-long-enough-that-the-message-passes-eighty-columns-" * 2


def gyreflow(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GYREFLOW_") and k not in ("COLUMNS", "LINES")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_PROGRESS__ENABLED": "false"})
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          check=False)


def error_lines(done: subprocess.CompletedProcess) -> list[str]:
    assert "Traceback" not in done.stdout + done.stderr.split("Original traceback:", 1)[0]
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def the_error(done: subprocess.CompletedProcess) -> str:
    (line,) = error_lines(done)
    return line


SCRIPT = """
import sys
from gyreflow.api import Environment, FileSource, SizeTumblingWindow

pipeline = Environment.from_config().pipeline("one-line")

def shout(line):
    if line == "boom":
        raise ValueError("first line of the reason\\nsecond line of the reason")
    return line.upper()

@pipeline.task
def job(ctx):
    ctx.source(FileSource(sys.argv[1]), SizeTumblingWindow(2)).map(shout).collect("out")

pipeline.execute()
"""


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "job.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def test_a_missing_config_file_with_a_long_path_is_one_whole_line(tmp_path, script):
    config = tmp_path / LONG / "missing.toml"
    done = gyreflow(["run", "--config", str(config), str(script), "--", "x"], tmp_path)
    assert done.returncode == 2
    assert str(config) in the_error(done)
    assert len(done.stderr.strip().splitlines()) == 1


def test_bad_data_in_a_deep_folder_names_the_whole_path_on_one_line(tmp_path, script):
    folder = tmp_path / LONG / LONG
    folder.mkdir(parents=True)
    data = folder / "input.txt"
    data.write_bytes(b"ok\nfine\n\xff\xfe not utf-8\n")
    done = gyreflow(["run", str(script), "--", str(data)], tmp_path,
                    GYREFLOW_STATE__BACKEND="rocksdb", GYREFLOW_STATE__PATH=str(tmp_path / "state"))
    assert done.returncode == 5
    line = the_error(done)
    assert str(data) in line and "utf-8" in line.lower() and "byte offset 8" in line
    hint = done.stderr.strip().splitlines()[1:]
    assert hint == ["Completed windows are kept: fix the input (the data, or the system it comes "
                    "from) and run again with --resume."]


def test_a_user_exception_over_several_lines_is_one_error_line_then_its_traceback(tmp_path, script):
    data = tmp_path / "input.txt"
    data.write_text("ok\nfine\nboom\n", encoding="utf-8")
    done = gyreflow(["run", str(script), "--", str(data)], tmp_path,
                    GYREFLOW_STATE__BACKEND="rocksdb", GYREFLOW_STATE__PATH=str(tmp_path / "state"))
    assert done.returncode == 1
    line = the_error(done)
    for fragment in ("operator 'map-1'", "window 2", "record 'boom'",
                     "first line of the reason second line of the reason"):
        assert fragment in line
    lines = done.stderr.splitlines()
    assert lines[1].startswith("Completed windows are kept")
    assert lines[2] == "Original traceback:"
    assert any('raise ValueError("first line' in item for item in lines[3:])


@pytest.mark.parametrize("spec", [f"no_such_module_{LONG.replace('-', '_')}:Listener",
                                  "json:NoSuchListenerClassWithAVeryLongNameThatPassesTheWidth",
                                  f"/{LONG}/listeners.py:Listener"])
def test_listener_refusals_are_one_line(tmp_path, script, spec):
    data = tmp_path / "input.txt"
    data.write_text("ok\n", encoding="utf-8")
    done = gyreflow(["run", "--listener", spec, str(script), "--", str(data)], tmp_path)
    assert done.returncode == 2
    assert spec.split(":")[0] in the_error(done)
    assert len(done.stderr.strip().splitlines()) == 1


def test_control_refusals_are_one_line(tmp_path):
    lines = make_lines(2400, seed=3)
    path = write_lines(tmp_path / "words.txt", lines)
    job = Job(tmp_path, "local", job_args(path, tmp_path / "out", pace=0.02),
              GYREFLOW_CONTROL__DIRECTORY=str(tmp_path / LONG / "control"))
    job.env.pop("COLUMNS", None)
    try:
        job.wait_published(2)
        pid = str(job.process.pid)
        refusals = {
            "unknown operator": (job.control("set", f"no-operator-{LONG}", "x", "1", "--job", pid), 1),
            "source operator": (job.control("rescale", "split", "2", "--job", pid), 1),
            "bad parallelism": (job.control("rescale", "quiet", "0", "--job", pid), 1),
            "unknown job": (job.control("status", "--job", f"no-such-job-{LONG}"), 2),
        }
        for what, (done, status) in refusals.items():
            assert done.returncode == status, (what, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, (what, done.stderr)
            assert done.stderr.startswith("error:"), (what, done.stderr)
            assert "Traceback" not in done.stderr
        assert f"no-operator-{LONG}" in refusals["unknown operator"][0].stderr
        assert f"no-such-job-{LONG}" in refusals["unknown job"][0].stderr
    finally:
        job.process.kill()
        job.process.wait()


FAULTY_SOURCE = """
import sys
from gyreflow.api import Environment, SizeTumblingWindow, Source, SourceReader

FAIL = sys.argv[1]

class Faulty(SourceReader):
    def __init__(self):
        self.at = 0

    def read(self, n):
        if self.at >= 4 and FAIL == "raise":
            raise RuntimeError("the disk went away\\nin the middle of a read")
        if self.at >= 4:
            return 42  # not a list of records: gyreflow's own code fails on it
        self.at += 2
        return [self.at - 1, self.at]

    def offset(self):
        return self.at

    def seek(self, offset):
        self.at = offset

class FaultySource(Source):
    def create_reader(self, task_index, parallelism):
        return Faulty()

pipeline = Environment.from_config().pipeline("faulty")

@pipeline.task
def job(ctx):
    ctx.source(FaultySource(), SizeTumblingWindow(2)).collect("out")

pipeline.execute()
"""


def test_a_task_that_fails_outside_user_functions_exits_6_with_one_line_then_its_traceback(tmp_path):
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY_SOURCE, encoding="utf-8")
    done = gyreflow(["run", str(script), "--", "return"], tmp_path,
                    GYREFLOW_STATE__BACKEND="rocksdb", GYREFLOW_STATE__PATH=str(tmp_path / "state"))
    assert done.returncode == 6, done.stderr
    line = the_error(done.__class__(done.args, done.returncode, done.stdout,
                                    done.stderr.split("Traceback", 1)[0]))
    assert "window 3" in line and "TypeError: object of type 'int' has no len()" in line, line
    lines = done.stderr.splitlines()
    assert lines[1].startswith("Completed windows are kept: run again with --resume")
    assert lines[2] == "Traceback (most recent call last):"
    assert "click" not in done.stderr and "runpy" not in done.stderr  # what ran the script


def test_a_source_of_the_users_that_raises_is_one_line_then_its_own_frames(tmp_path):
    script = tmp_path / "faulty.py"
    script.write_text(FAULTY_SOURCE, encoding="utf-8")
    done = gyreflow(["run", str(script), "--", "raise"], tmp_path,
                    GYREFLOW_STATE__BACKEND="rocksdb", GYREFLOW_STATE__PATH=str(tmp_path / "state"))
    assert done.returncode == 1, done.stderr
    line = the_error(done)
    # the read that raised is window 2's look-ahead at window 3's records: window 3's error, as
    # when the same read returns something that fails later (above); windows 1 and 2 complete
    assert "window 3 in faulty.py:" in line, line
    assert line.endswith("RuntimeError: the disk went away in the middle of a read"), line
    lines = done.stderr.splitlines()
    assert lines[1] == "Completed windows are kept: fix the code and run again with --resume."
    assert lines[2:4] == ["Original traceback:", "Traceback (most recent call last):"]
    assert "/runtime/" not in done.stderr and "/api/" not in done.stderr


def test_a_control_file_that_is_not_a_jobs_is_passed_over(tmp_path):
    """A file of a live process that lacks the fields a job writes names no job: list shows none and
    a command finds none, in one line, instead of a KeyError."""
    directory = tmp_path / "control"
    directory.mkdir(mode=0o700)
    (directory / f"{os.getpid()}-half.json").write_text(f'{{"pid": {os.getpid()}}}', encoding="utf-8")
    env = {"GYREFLOW_CONTROL__DIRECTORY": str(directory)}
    listed = gyreflow(["control", "list"], tmp_path, **env)
    assert listed.returncode == 0 and "Traceback" not in listed.stderr
    assert listed.stdout == f"no running jobs (control files in {directory})\n"
    status = gyreflow(["control", "status"], tmp_path, **env)
    assert status.returncode == 2, status.stderr
    assert the_error(status).startswith("error: no running job")
