"""Job listeners from ``Pipeline.execute(listener=...)`` and from ``gyreflow run --listener`` /
``--events``: every window, every checkpoint and the job's end are heard, with their metrics,
checked against what the input holds (line counts per window from a plain slice of the input)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from gyreflow.api import JobListener, SizeTumblingWindow

ROOT = Path(__file__).resolve().parents[3]
WORD_COUNT = ROOT / "examples" / "word_count.py"


class Heard(JobListener):
    def __init__(self) -> None:
        self.events = []

    def on_window(self, metrics):
        self.events.append(("window", metrics.window, metrics.source_records))

    def on_checkpoint(self, checkpoint):
        self.events.append(("checkpoint", checkpoint.window, checkpoint.bytes))

    def on_finish(self, result):
        self.events.append(("finish", result.last_completed, result.summary.count))


def test_execute_tells_its_listener_every_window_checkpoint_and_the_end(make_env):
    words = [f"w{i % 7}" for i in range(23)]
    pipeline = make_env(2, **{"state.backend": "rocksdb"}).pipeline("heard")

    @pipeline.task
    def count(ctx):
        (ctx.source(words, SizeTumblingWindow(5)).with_parallelism(1).key_by().count()
         .collect("counts"))

    heard = Heard()
    result = pipeline.execute(listener=heard)
    windows = -(-len(words) // 5)
    assert [e for e in heard.events if e[0] == "window"] == [
        ("window", w, len(words[(w - 1) * 5:w * 5])) for w in range(1, windows + 1)]
    checkpoints = [e for e in heard.events if e[0] == "checkpoint"]
    assert [e[1] for e in checkpoints] == list(range(1, windows + 1))
    assert all(e[2] > 0 for e in checkpoints)  # each wrote some state
    assert heard.events[-1] == ("finish", windows, windows)
    counts = dict(result["count"].by_window("counts")[windows])
    assert counts == {k: v for k, v in Counter(words).items() if k in counts}


LISTENER = '''
import json, sys
from gyreflow.api import JobListener

class Tally(JobListener):
    def __init__(self):
        self.windows = 0
    def on_window(self, metrics):
        self.windows += 1
    def on_finish(self, result):
        sys.stderr.write(json.dumps({"tally": self.windows}) + "\\n")
'''


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_the_command_line_loads_a_listener_and_writes_events(environment, tmp_path):
    lines = [" ".join(f"w{(i * j) % 11}" for j in range(i % 5 + 1)) for i in range(95)]
    data = tmp_path / "in.txt"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "tally.py").write_text(LISTENER, encoding="utf-8")
    events = tmp_path / "events.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "-q", "--env", environment,
         "--listener", str(tmp_path / "tally.py") + ":Tally", "--events", str(events),
         str(WORD_COUNT), "--", "--input", str(data), "--window", "10", "--output",
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path,
        env={**_environ(), "GYREFLOW_STATE__BACKEND": "rocksdb",
             "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    written = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]
    kinds = Counter(e["event"] for e in written)
    assert kinds == {"start": 1, "window": 10, "checkpoint": 10, "finish": 1}
    window_events = [e for e in written if e["event"] == "window"]
    assert [e["window"] for e in window_events] == list(range(1, 11))
    assert [e["records_read"] for e in window_events] == [len(lines[i:i + 10])
                                                          for i in range(0, 95, 10)]
    split = sum(e["operators"]["split"]["records_out"] for e in window_events)
    assert split == sum(len(line.split()) for line in lines)
    assert written[-1]["last_completed_window"] == 10
    assert '{"tally": 10}' in done.stderr


@pytest.mark.parametrize(("spec", "words"), [
    ("missing.py:Tally", "no such file"),
    ("tally.py:Nope", "has no 'Nope'"),
    ("os:sep", "not a gyreflow.api.JobListener"),
    ("json:dumps", "dumps() failed"),
    ("no_such_module_here:X", "cannot be loaded"),
    ("justaname", "expected MODULE:NAME"),
])
def test_a_bad_listener_is_refused_before_any_data_moves(spec, words, tmp_path):
    (tmp_path / "tally.py").write_text(LISTENER, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "-q", "--env", "local", "--listener", spec,
         str(WORD_COUNT), "--", "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path, env=_environ())
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "out").exists()


def _environ() -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"COLUMNS": "400", "GYREFLOW_SPARK__MASTER": "local[2]"})
    return env


RESUMED = '''
import sys
from gyreflow.api import JobListener

class Resumed(JobListener):
    def on_resumed(self, window):
        sys.stderr.write(f"resumed after {window}\\n")
'''


def _word_count(tmp_path, *options: str, crash_at: str | None = None,
                stdin=None) -> subprocess.CompletedProcess:
    """``gyreflow run`` of the main job on 95 lines in windows of 10, RocksDB state in tmp_path."""
    data = tmp_path / "in.txt"
    if not data.exists():
        data.write_text("\n".join(f"w{i % 13} w{i % 5}" for i in range(95)) + "\n", encoding="utf-8")
    env = {**_environ(), "GYREFLOW_STATE__BACKEND": "rocksdb",
           "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    if crash_at is not None:
        env["GYREFLOW_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "-q", "--env", "local", *options,
         str(WORD_COUNT), "--", "--input", str(data), "--window", "10", "--output",
         str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path, env=env,
        stdin=stdin)


def _published_counts(tmp_path) -> dict[str, int]:
    """The last window file's counts, each word's latest."""
    counts = {}
    for path in sorted((tmp_path / "out").glob("window-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            counts[row["word"]] = row["count"]
    return counts


def _oracle(tmp_path) -> dict[str, int]:
    return dict(Counter((tmp_path / "in.txt").read_text(encoding="utf-8").split()))


@pytest.mark.processes
def test_a_resumed_run_tells_its_listeners_the_window_it_resumes_after(tmp_path):
    (tmp_path / "resumed.py").write_text(RESUMED, encoding="utf-8")
    listener = ("--listener", str(tmp_path / "resumed.py") + ":Resumed")
    crashed = _word_count(tmp_path, *listener, crash_at="after-commit:4")
    assert crashed.returncode == -9, crashed.stderr
    assert "resumed after" not in crashed.stderr  # a fresh run resumes after nothing
    events = tmp_path / "events.jsonl"
    resumed = _word_count(tmp_path, *listener, "--resume", "--events", str(events))
    assert resumed.returncode == 0, resumed.stderr
    told = [int(line.split()[-1]) for line in resumed.stderr.splitlines()
            if line.startswith("resumed after ")]
    # commits written in the background may have completed later windows before the kill landed
    windows = [json.loads(line)["window"] for line in events.read_text(encoding="utf-8").splitlines()
               if json.loads(line)["event"] == "window"]
    assert len(told) == 1 and 4 <= told[0] <= 10, resumed.stderr
    assert windows == list(range(told[0] + 1, 11))
    assert _published_counts(tmp_path) == _oracle(tmp_path)


@pytest.mark.processes
def test_an_events_file_that_cannot_be_written_is_told_once_and_the_job_goes_on(tmp_path):
    # /dev/full opens, and every write to it fails as a full disk does (ENOSPC)
    done = _word_count(tmp_path, "--events", "/dev/full")
    assert done.returncode == 0, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], done.stderr
    assert "/dev/full" in errors[0] and "Traceback" not in done.stderr
    assert _published_counts(tmp_path) == _oracle(tmp_path)


def _metrics_windows(text: str) -> int:
    document = json.loads(text)
    (pipeline,) = document["pipelines"]
    (task,) = pipeline["tasks"]
    return task["windows"]


@pytest.mark.processes
def test_metrics_json_through_a_symbolic_link_replaces_the_target_and_keeps_the_link(tmp_path):
    target = tmp_path / "kept" / "metrics.json"
    target.parent.mkdir()
    target.write_text("{}", encoding="utf-8")
    link = tmp_path / "metrics.json"
    link.symlink_to(target)
    done = _word_count(tmp_path, "--metrics-json", str(link))
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert _metrics_windows(target.read_text(encoding="utf-8")) == 10


@pytest.mark.processes
def test_metrics_json_into_a_pipe_or_standard_output_is_written_into_not_replaced(tmp_path):
    import os
    import threading

    fifo = tmp_path / "metrics.fifo"
    os.mkfifo(fifo)
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_text(encoding="utf-8")))
    reader.start()
    done = _word_count(tmp_path, "--metrics-json", str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert fifo.is_fifo(), "the named pipe is still one"
    assert _metrics_windows(read[0]) == 10
    shown = _word_count(tmp_path, "--fresh", "--metrics-json", "/dev/stdout")
    assert shown.returncode == 0, shown.stderr
    assert _metrics_windows(shown.stdout) == 10
    # standard output sent to a log file: the metrics go after what the log holds, the file stays
    log = tmp_path / "run.log"
    log.write_text("earlier lines\n", encoding="utf-8")
    inode = log.stat().st_ino
    with log.open("a", encoding="utf-8") as into:
        logged = subprocess.run(
            [sys.executable, "-m", "gyreflow", "run", "-q", "--env", "local", "--metrics-json",
             "/dev/stdout", str(WORD_COUNT), "--", "--input", "in.txt", "--window", "10",
             "--output", "out2"],
            stdout=into, stderr=subprocess.PIPE, cwd=tmp_path, env=_environ(), text=True,
            timeout=120, check=False)
    assert logged.returncode == 0, logged.stderr
    assert log.stat().st_ino == inode
    text = log.read_text(encoding="utf-8")
    assert text.startswith("earlier lines\n")
    assert _metrics_windows(text.removeprefix("earlier lines\n")) == 10
