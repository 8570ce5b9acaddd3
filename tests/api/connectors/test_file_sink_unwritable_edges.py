"""A FileSink whose folder becomes unwritable while the job runs (or cannot be made at all, under
/proc): one ``error:`` line naming the sink, the window and the path, exit status 5, no traceback;
a ``--resume`` once the folder is writable again finishes the job exactly.

Oracle: the input's lines cut into windows in plain Python, each line once, in order. Root passes
any file mode: the job runs without the capabilities that let it (tests/_permissions.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _permissions import without_write_permission

LINES = [f"line {i}" for i in range(400)]
WINDOW = 20
LOCK_AT = "line 210"  # the job makes its output folder read-only at this record (window 11)

JOB = """
import os, sys
from gyreflow.api import DirectorySource, Environment, FileSink, SizeTumblingWindow
folder, out, marker = sys.argv[1:4]


def lock(line):
    if line == LOCK_AT and not os.path.exists(marker):  # once: a resume goes on
        open(marker, "w").close()
        os.chmod(out, 0o555)
    return line


pipeline = Environment.from_config(None).pipeline("locked")
pipeline.task(lambda ctx: ctx.source(DirectorySource(folder), SizeTumblingWindow(WINDOW), parallelism=1)
              .map(lock).sink(FileSink(out)), name="job")
pipeline.execute()
""".replace("LOCK_AT", repr(LOCK_AT)).replace("WINDOW", str(WINDOW))


def run(tmp_path: Path, workers: str, *flags: str, prefix: tuple[str, ...] = (),
        out: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_ENVIRONMENT__TYPE": "local",
                "GYREFLOW_ENVIRONMENT__WORKERS": workers, "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    return subprocess.run(
        [*prefix, sys.executable, "-m", "gyreflow", "run", "--quiet", *flags,
         str(tmp_path / "job.py"), "--", str(tmp_path / "in"), out or str(tmp_path / "out"),
         str(tmp_path / "locked")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False)


def one_error(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr and "fault of gyreflow" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def oracle() -> dict[str, list[str]]:
    return {f"window-{1 + start // WINDOW:06d}.jsonl": [json.dumps(line) for line in
                                                         LINES[start:start + WINDOW]]
            for start in range(0, len(LINES), WINDOW)}


def published(out: Path) -> dict[str, list[str]]:
    return {name: (out / name).read_text(encoding="utf-8").splitlines()
            for name in sorted(os.listdir(out)) if not name.startswith(".")}


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_output_folder_made_read_only_mid_run_stops_with_one_line_then_resumes_exactly(
        tmp_path, workers):
    prefix = without_write_permission()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("".join(f"{line}\n" for line in LINES),
                                           encoding="utf-8")
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    out = tmp_path / "out"
    try:
        done = run(tmp_path, workers, prefix=prefix)
        assert done.returncode == 5, done.stderr
        error = one_error(done)
        found = re.search(r"FileSink\(out\): window (\d+): cannot publish "  # relative to the cwd
                          rf"{re.escape(str(out))}/window-(\d+)\.jsonl \(Permission denied\)",
                          error)
        assert found is not None and int(found.group(1)) == int(found.group(2)), error
        before = published(out)
        expected = oracle()
        assert all(before[name] == expected[name] for name in before)  # whole windows only
    finally:
        out.chmod(0o755)
    done = run(tmp_path, workers, "--resume", prefix=prefix)
    assert done.returncode == 0, done.stderr
    assert published(out) == oracle()
    assert not (out / ".staging").exists()


def test_an_output_folder_that_cannot_be_made_names_the_sink_and_the_path(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x\n", encoding="utf-8")
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    target = f"/proc/gyreflow-test-{os.getpid()}"
    done = run(tmp_path, "1", out=target)
    error = one_error(done)
    if os.geteuid() == 0:  # root may write /proc as far as its mode says: the mkdir fails
        assert done.returncode == 5, done.stderr
        assert f"FileSink({target}): cannot create {target} (" in error, error
    else:  # refused where the sink is built, before any data moves
        assert done.returncode == 2, done.stderr
        assert f"FileSink: output {target!r}" in error, error


def test_a_window_that_cannot_be_staged_names_the_sink_the_window_and_the_file(make_env,
                                                                                tmp_path):
    from gyreflow.api import FileSink, SizeTumblingWindow
    from gyreflow.runtime.errors import DataError

    out = tmp_path / "out"
    out.mkdir()
    (out / ".staging").write_text("", encoding="utf-8")  # where the sink stages: not a folder
    pipeline = make_env(1).pipeline("staged")
    pipeline.task(lambda ctx: ctx.source(LINES, SizeTumblingWindow(WINDOW)).sink(FileSink(out)),
                  name="job")
    with pytest.raises(DataError) as caught:
        pipeline.execute()
    message = str(caught.value)
    assert re.search(rf"FileSink\(.*out\): window 1: cannot write {re.escape(str(out))}/\.staging/"
                     r"window-000001\.jsonl\.[0-9a-f]+ \(Not a directory\)", message), message
    assert "\n" not in message and "Traceback" not in message
    assert [name for name in os.listdir(out) if not name.startswith(".")] == []
