"""docs/tutorial.md's job is examples/tutorial_readings.py, word for word, and it writes what a plain
loop over the readings computes: each window's high per sensor and each sensor's running mean."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "tutorial_readings.py"


def test_the_tutorial_shows_the_script_it_runs():
    text = (ROOT / "docs" / "tutorial.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert SCRIPT.read_text(encoding="utf-8") in blocks


def oracle(lines: list[str], window: int) -> tuple[dict, dict]:
    """Window -> sensor -> high, and window -> sensor -> mean so far (of the sensors in it)."""
    highs: dict[int, dict[str, float]] = {}
    means: dict[int, dict[str, float]] = {}
    totals: dict[str, list[float]] = {}
    for start in range(0, len(lines), window):
        number = start // window + 1
        for line in lines[start:start + window]:
            sensor, celsius = line.split(",")
            value = float(celsius)
            high = highs.setdefault(number, {})
            high[sensor] = max(value, high.get(sensor, value))
            total = totals.setdefault(sensor, [0.0, 0])
            total[0] += value
            total[1] += 1
            means.setdefault(number, {})[sensor] = round(total[0] / total[1], 2)
    return highs, means


def written(folder: Path) -> dict[int, dict[str, float]]:
    return {int(path.name.split("-")[1].split(".")[0]):
            dict(json.loads(line) for line in path.read_text().splitlines())
            for path in sorted(folder.glob("window-*.jsonl"))}


@pytest.mark.processes
def test_the_tutorial_job_writes_highs_and_running_means(tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", "local",
                           "examples/tutorial_readings.py", "--", "--output", "out"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    lines = (ROOT / "examples" / "data" / "readings.csv").read_text().splitlines()
    highs, means = oracle(lines, 10)
    assert written(tmp_path / "out" / "highs") == highs
    assert written(tmp_path / "out" / "means") == means
