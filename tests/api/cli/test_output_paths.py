"""Output paths a run cannot write are refused in one ``error:`` line naming the path, with exit 2,
before any data moves: a ``--metrics-json`` folder that is missing or read-only (as ``--events``),
a ``gyreflow graph --output`` whose folder cannot take the file (before the graph is read), and a
FileSink folder that is a symbolic link to nothing. A metrics file that still cannot be written at
the end (its folder went away) is told in one line, and the run keeps its job's exit status. What
the commands print stays on one line however long, as a log sees it. Real processes with their
output piped and no COLUMNS set (rich's width for a pipe is then 80 columns)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _cli_runs import EXAMPLE, clean_environ
from _permissions import without_write_permission
from test_job_lock import LINES, SCRIPT
from test_run_advice import stopped_with_memory_advice

pytestmark = pytest.mark.processes

LONG_NAME = "a-pipeline-named-at-length-so-that-its-lines-pass-eighty-columns"


def log_environ(tmp_path: Path) -> dict[str, str]:
    """The variables of a run whose output goes to a log: no COLUMNS, state under ``tmp_path``."""
    env = clean_environ()
    env.pop("COLUMNS", None)
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_STATE__PATH": str(tmp_path / "st"),
                "GYREFLOW_CONTROL__DIRECTORY": str(tmp_path / "control")})
    return env


def gyreflow(tmp_path: Path, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, sys.executable, "-m", "gyreflow", *args], cwd=tmp_path,
                          env=log_environ(tmp_path), capture_output=True, text=True, timeout=300,
                          check=False)


def the_error(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a run, whole, with no traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    return errors[0]


def word_count(tmp_path: Path, *flags: str, data: Path | None = None,
               output: Path | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    if data is None:
        data = tmp_path / "in.txt"
        data.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    output = tmp_path / "out" if output is None else output
    return gyreflow(tmp_path, "run", "--quiet", *flags, str(EXAMPLE), "--", "--input", str(data),
                    "--window", "5", "--output", str(output), prefix=prefix)


def unwritable_folder(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A folder no file can be written in, and the reason the system gives."""
    if kind == "missing":
        return tmp_path / "missing", "No such file or directory"
    if kind == "under a file":
        (tmp_path / "a-file").write_text("", encoding="utf-8")
        return tmp_path / "a-file", "Not a directory"
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    return folder, "Permission denied"


FOLDERS = ["missing", "under a file", "read-only"]


@pytest.mark.parametrize("kind", FOLDERS)
def test_a_metrics_json_folder_that_cannot_take_the_file_is_refused_before_any_data_moves(
        tmp_path, kind):
    folder, reason = unwritable_folder(tmp_path, kind)
    metrics = folder / "m.json"
    events = tmp_path / "events.jsonl"
    prefix = without_write_permission() if kind == "read-only" else ()
    done = word_count(tmp_path, "--metrics-json", str(metrics), "--events", str(events),
                      prefix=prefix)
    assert done.returncode == 2, done.stderr
    assert the_error(done) == f"error: --metrics-json {metrics}: cannot be written ({reason})"
    assert not (tmp_path / "out").exists()  # no window ran
    assert not events.exists()


# Removes the folder of --metrics-json after the run checked it, then runs the word count.
VANISHING = """
import shutil, sys
sys.path.insert(0, {examples!r})
from word_count import main
shutil.rmtree({folder!r})
main()
"""


@pytest.mark.parametrize(("valid_input", "status"), [(True, 0), (False, 5)])
def test_a_metrics_file_that_cannot_be_written_at_the_end_keeps_the_jobs_exit_status(
        tmp_path, valid_input, status):
    folder = tmp_path / "metrics"
    folder.mkdir()
    metrics = folder / "m.json"
    script = tmp_path / "vanishing.py"
    script.write_text(VANISHING.format(examples=str(EXAMPLE.parent), folder=str(folder)),
                      encoding="utf-8")
    data = tmp_path / "in.txt"
    data.write_bytes(b"a b\n" * 10 + (b"" if valid_input else b"\xff c\n"))
    done = gyreflow(tmp_path, "run", "--quiet", "--metrics-json", str(metrics), str(script), "--",
                    "--input", str(data), "--window", "5", "--output", str(tmp_path / "out"))
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors[-1] == (f"error: --metrics-json {metrics}: cannot be written (No such file or "
                          "directory)"), done.stderr
    assert len(errors) == (1 if valid_input else 2), done.stderr


def graph_files(tmp_path: Path) -> tuple[Path, Path]:
    vertices, edges = tmp_path / "v.txt", tmp_path / "e.txt"
    vertices.write_text("1\n2\n3\n", encoding="utf-8")
    edges.write_text("1 2\n2 3\n", encoding="utf-8")
    return vertices, edges


def run_graph(tmp_path: Path, output: Path,
              prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    vertices, edges = graph_files(tmp_path)
    return gyreflow(tmp_path, "graph", "pr", "--vertices", str(vertices), "--edges", str(edges),
                    "--output", str(output), "--env", "local", prefix=prefix)


@pytest.mark.parametrize("kind", ["under a file", "dangling link", "read-only"])
def test_a_graph_output_that_cannot_be_written_is_refused_before_the_graph_is_computed(
        tmp_path, kind):
    if kind == "dangling link":
        folder = tmp_path / "link"
        folder.symlink_to(tmp_path / "nowhere")
        why = (f"cannot be created: '{folder}' is a symbolic link to '{tmp_path / 'nowhere'}', "
               "which does not exist")
    elif kind == "under a file":
        folder, _ = unwritable_folder(tmp_path, kind)
        why = f"cannot be created: '{folder}' is a file"
    else:
        folder, _ = unwritable_folder(tmp_path, kind)
        why = f"cannot be written: no write permission on '{folder}'"
    output = folder / "r.txt"
    done = run_graph(tmp_path, output,
                     prefix=without_write_permission() if kind == "read-only" else ())
    assert done.returncode == 2, done.stderr
    assert the_error(done) == f"error: --output {output}: {why}"
    assert "graph-pr" not in done.stderr and "computed" not in done.stderr  # nothing ran
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("under", [False, True], ids=["the folder", "its parent"])
def test_a_file_sink_folder_that_is_a_dangling_link_is_refused_before_any_data_moves(
        tmp_path, under):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    output = link / "sub" if under else link
    done = word_count(tmp_path, output=output)
    assert done.returncode == 2, done.stderr
    assert the_error(done) == (f"error: configuration: FileSink: output '{output}' cannot be "
                               f"created: '{link}' is a symbolic link to '{tmp_path / 'nowhere'}', "
                               "which does not exist")
    assert not (tmp_path / "nowhere").exists()


def test_the_graph_summary_stays_on_one_line(tmp_path):
    output = tmp_path / "a-folder-with-a-name-long-enough-to-pass-eighty-columns" / "r.txt"
    done = run_graph(tmp_path, output)
    assert done.returncode == 0, done.stderr
    summary = [line for line in done.stderr.splitlines() if line.startswith("pr: ")]
    assert len(summary) == 1 and summary[0].endswith(f"wrote {output}"), done.stderr


def long_named_job(tmp_path: Path, out: Path, delay: float, *flags: str) -> list[str]:
    """``test_job_lock``'s job under a pipeline name long enough to pass 80 columns."""
    script = tmp_path / "long.py"
    script.write_text(SCRIPT.replace('"locked"', repr(LONG_NAME)), encoding="utf-8")
    data = tmp_path / "lines.txt"
    data.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return [sys.executable, "-m", "gyreflow", "run", *flags, str(script), "--", str(data), str(out),
            str(delay)]


def test_a_stop_is_told_on_one_line(tmp_path):
    out = tmp_path / "out"
    stopped_with_memory_advice(long_named_job(tmp_path, out, 0.05, "--quiet"),
                               log_environ(tmp_path), out)


def test_nothing_to_do_is_told_on_one_line(tmp_path):
    out = tmp_path / "out"
    env = log_environ(tmp_path) | {"GYREFLOW_STATE__BACKEND": "rocksdb"}
    first = subprocess.run(long_named_job(tmp_path, out, 0.0, "--quiet"), env=env,
                           capture_output=True, text=True, timeout=120, check=False)
    assert first.returncode == 0, first.stderr
    done = subprocess.run(long_named_job(tmp_path, out, 0.0, "--resume"), env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0] == f"nothing to do: {LONG_NAME}/count finished at window 12", lines
