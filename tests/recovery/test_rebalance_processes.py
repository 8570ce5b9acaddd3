"""Rebalanced jobs in processes of their own: killed with SIGKILL after a rebalance and resumed,
and rebalanced on request through ``gyreflow control rebalance``; the output is compared with a
plain-Python loop's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_rebalance import running_counts, skewed_words

ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"


def word_lines(words: list[str], per_line: int = 4) -> list[str]:
    return [" ".join(words[i:i + per_line]) for i in range(0, len(words), per_line)]


def read_counts(out: Path) -> dict[int, dict[str, int]]:
    found: dict[int, dict[str, int]] = {}
    for path in sorted(out.iterdir()):
        assert not path.name.startswith("."), f"a staged file was left: {path.name}"
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            window = found.setdefault(row["window"], {})
            assert row["word"] not in window, f"{row} twice"
            window[row["word"]] = row["count"]
    return found


def run_word_count(tmp_path: Path, environment: str, lines_path: Path, out: Path, window: int,
                   flags: tuple[str, ...] = (), **extra: str) -> subprocess.CompletedProcess:
    from _environments import environment_variables

    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update(environment_variables(environment))
    env.update({"GYREFLOW_SPARK__MASTER": "local[2]", "GYREFLOW_CONTROL__ENABLED": "false",
                "GYREFLOW_SPARK__CONF": json.dumps({"spark.ui.enabled": "false"}),
                "GYREFLOW_STATE__BACKEND": "rocksdb",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
                "GYREFLOW_CONTROL__AUTO_REBALANCE": "true",
                "GYREFLOW_CONTROL__REBALANCE_MIN_RECORDS": "100"})
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", *flags, str(WORD_COUNT), "--",
         "--input", str(lines_path), "--window", str(window), "--output", str(out),
         "--parallelism", "2"],
        env=env, capture_output=True, text=True, timeout=300, check=False)


KILLS = [("local", "window-finished:7"), ("local", "after-commit:9"),
         ("workers", "before-commit:8"), ("spark", "mid-publish:8")]


@pytest.mark.processes
@pytest.mark.parametrize(("environment", "crash"), KILLS)
def test_a_job_killed_after_a_rebalance_resumes_with_nothing_lost_or_repeated(
        tmp_path, environment, crash):
    words = skewed_words(12000, seed=8)
    lines = word_lines(words)
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    per_window = 100  # lines: 400 words
    out = tmp_path / "out"
    events = tmp_path / "events.jsonl"
    killed = run_word_count(tmp_path, environment, path, out, per_window,
                            ("--events", str(events)), GYREFLOW_CRASH_AT=crash)
    assert killed.returncode == -9, killed.stderr[-2000:]
    restarts = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()
                if '"restart"' in line]
    assert [(r["kind"], r["after_window"] < int(crash.split(":")[1])) for r in restarts] == [
        ("rebalance", True)], restarts  # the kill came after the key groups moved
    resumed = run_word_count(tmp_path, environment, path, out, per_window, ("--resume",))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    expected = running_counts([w for line in lines for w in line.split()], per_window * 4)
    assert read_counts(out) == expected


@pytest.mark.parametrize("environment", ["local", "workers", "spark"])
def test_a_rebalance_on_request_moves_the_hot_key_group_and_the_output_stays_exact(
        tmp_path, environment):
    from _control_jobs import WINDOWS, Job, job_args, quiet_oracle
    from test_notifications import QUIET, make_lines, read_alerts
    from test_rebalance import hot_word

    hot = hot_word()
    lines = [f"{hot} {hot} {hot} {line}" for line in make_lines(WINDOWS * 20, seed=5)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    (tmp_path / "stopped").mkdir()
    extra = ({"GYREFLOW_ENVIRONMENT__WORKERS": "2"} if environment == "workers" else {})
    # Paced so that the three commands below, each a process of its own, land while it runs
    # on a loaded machine too.
    job = Job(tmp_path, "local" if environment == "workers" else environment,
              job_args(path, out, parallelism=2, pace=0.015), **extra)
    job.wait_published(4)
    unknown = job.control("rebalance", "nosuch", "--job", str(job.process.pid))
    assert unknown.returncode == 1 and "operators:" in unknown.stderr, unknown.stderr
    source = job.control("rebalance", "lines", "--job", str(job.process.pid))
    assert source.returncode == 1 and "source" in source.stderr, source.stderr
    assert len(source.stderr.strip().splitlines()) == 1  # one line, no traceback
    answer = job.answer("rebalance", "quiet")
    assert "key groups move from window" in answer["message"], answer
    assert job.wait() == 0, job.output()
    assert read_alerts(out) == quiet_oracle(lines, lambda window: QUIET)
