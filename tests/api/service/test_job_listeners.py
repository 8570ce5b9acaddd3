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
