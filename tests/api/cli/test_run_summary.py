"""The end-of-run summary fits 80 columns and agrees with itself (records/s over wall time), and
``--metrics-json`` writes the final metrics, checked against plain-Python counts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "word_count.py"
LINES = [f"alpha beta w{i % 13} gamma{i % 4}" for i in range(300)]


@pytest.mark.parametrize("environment", ["local", "spark"])
def test_summary_fits_80_columns_and_metrics_json_matches_the_counts(tmp_path, environment):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    metrics = tmp_path / "metrics.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    # Two worker processes: an upstream task's report of a window may reach the driver after the
    # tails'; the window's metrics must still count it.
    env.update({"COLUMNS": "200", "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_SPARK__MASTER": "local[2]", "GYREFLOW_ENVIRONMENT__WORKERS": "2"})
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--env", environment, "--metrics-json", str(metrics),
         str(EXAMPLE), "--", "--input", str(source), "--window", "40", "--output", str(tmp_path / "out")],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    summary = done.stderr[done.stderr.index("word-count/word_count: "):]
    *lines, output = summary.splitlines()
    for line in lines:
        assert len(line) <= 80, line
    # the output folder is shown whole on a line of its own, however long its path
    assert output == f"  output: FileSink({tmp_path / 'out'})"
    title = re.search(r"word-count/word_count: (\d+) windows in ([\d.]+) s, ([\d,]+) records/s", summary)
    windows, seconds, rate = int(title[1]), float(title[2]), int(title[3].replace(",", ""))
    assert windows == -(-len(LINES) // 40)
    total = re.search(r"all\s*│\s*([\d.]+)\s*│\s*([\d,]+)", summary)
    assert abs(float(total[1]) - seconds) < 0.01  # the title and the total agree
    assert int(total[2].replace(",", "")) == len(LINES)

    document = json.loads(metrics.read_text(encoding="utf-8"))
    [pipeline] = document["pipelines"]
    [task] = pipeline["tasks"]
    assert (pipeline["pipeline"], task["task"]) == ("word-count", "word_count")
    assert task["windows"] == task["last_completed_window"] == windows
    assert task["records_read"] == len(LINES)
    assert abs(task["records_per_second"] - len(LINES) / task["seconds"]) < 1
    # over wall time, not summed window times
    assert abs(rate - len(LINES) / task["seconds"]) <= 1
    assert abs(task["seconds"] - seconds) <= 0.005
    words = [w for line in LINES for w in line.split()]
    assert task["operators"]["lines"] == {"records_in": 0, "records_out": len(LINES)}
    assert task["operators"]["split"] == {"records_in": len(LINES), "records_out": len(words)}
    # the count emits, per window, one running count per word seen in that window
    emitted = sum(len(Counter(w for line in LINES[i:i + 40] for w in line.split()))
                  for i in range(0, len(LINES), 40))
    assert task["operators"]["count"]["records_out"] == emitted
