"""The job's port: Prometheus metrics and /api/job checked against plain-Python counts, on both
environments; the command line's --ui opening before the first window and closing at exit."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gyreflow.api import SizeTumblingWindow, Tumbling
from gyreflow.api.service.monitor import JobMonitor
from gyreflow.api.service.ui_server import UiAddressError, UiServer, parse_address

LINES = [f"w{i % 7} w{(i * 3) % 5} x{i % 2}" for i in range(40)]
WINDOW = 6


def get(url: str, timeout: float = 5.0) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.headers["Content-Type"], response.read().decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text page, parsed by prometheus_client's own parser."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_and_job_json_match_plain_counts(make_env):
    monitor = JobMonitor()
    server = UiServer(monitor, "127.0.0.1", 0)
    try:
        pipeline = make_env(2).pipeline("words")

        @pipeline.task(name="count")
        def count(ctx):
            (ctx.source(LINES, SizeTumblingWindow(WINDOW), parallelism=1).flat_map(str.split)
             .key_by().count().collect("out"))

        pipeline.execute(listener=monitor)
        monitor.finish()
        status, content_type, text = get(server.url + "metrics")
        _, json_type, body = get(server.url + "api/job")
    finally:
        server.close()
    assert status == 200 and content_type.startswith("text/plain")
    windows = -(-len(LINES) // WINDOW)
    words = Counter(word for line in LINES for word in line.split())
    found = samples(text)
    assert found[("gyreflow_windows_completed_total", ())] == windows
    assert found[("gyreflow_last_completed_window", ())] == windows
    task = (("operator", "source-0"), ("pipeline", "words"), ("task", "count"))
    assert found[("gyreflow_operator_records_out_total", task)] == len(LINES)
    flat_map = (("operator", "flat_map-1"), ("pipeline", "words"), ("task", "count"))
    assert found[("gyreflow_operator_records_in_total", flat_map)] == len(LINES)
    assert found[("gyreflow_operator_records_out_total", flat_map)] == sum(words.values())
    collect = (("operator", "collect-3"), ("pipeline", "words"), ("task", "count"))
    # every window emits one running count per key it saw: the oracle is a plain loop
    emitted = sum(len({w for line in LINES[i:i + WINDOW] for w in line.split()})
                  for i in range(0, len(LINES), WINDOW))
    assert found[("gyreflow_operator_records_in_total", collect)] == emitted
    assert found[("gyreflow_window_duration_seconds_count", ())] == windows
    assert found[("gyreflow_checkpoint_duration_seconds_count", ())] == windows
    assert found[("gyreflow_checkpoint_bytes", ())] > 0
    buckets = [v for (name, labels), v in found.items()
               if name == "gyreflow_window_duration_seconds_bucket" and ("le", "0.001") in labels]
    assert buckets, "the window histogram resolves milliseconds"

    assert json_type == "application/json"
    job = json.loads(body)
    assert set(job) >= {"job", "task", "state", "windows_completed", "pipeline_graph",
                        "execution_graph", "recent_windows", "recent_checkpoints", "error"}
    assert (job["job"], job["task"], job["state"], job["error"]) == ("words", "count", "finished", None)
    assert job["windows_completed"] == windows
    assert [op["name"] for op in job["pipeline_graph"]["operators"]] == [
        "source-0", "flat_map-1", "count-2", "collect-3"]
    chained = [v["operators"] for v in job["execution_graph"]["vertices"]]
    assert sorted(op for ops in chained for op in ops) == sorted(
        op["name"] for op in job["pipeline_graph"]["operators"])
    assert [w["window"] for w in job["recent_windows"]] == list(range(1, windows + 1))
    assert sum(w["records"] for w in job["recent_windows"]) == len(LINES)
    assert [c["window"] for c in job["recent_checkpoints"]] == list(range(1, windows + 1))
    assert all(c["bytes"] > 0 and c["duration_seconds"] >= 0 for c in job["recent_checkpoints"])
    # the trends hold every window and checkpoint of the run, however they gathered them into points
    trends = job["trends"]
    assert sum(trends["windows"]["windows"]) == windows
    assert sum(trends["windows"]["records"]) == len(LINES)
    assert sum(trends["checkpoints"]["checkpoints"]) == windows
    assert max(trends["checkpoints"]["bytes_max"]) == max(c["bytes"] for c in job["recent_checkpoints"])
    assert trends["windows"]["time"] == sorted(trends["windows"]["time"])
    operators = {o["operator"]: (o["records_in"], o["records_out"]) for o in job["operators"]
                 if o["task"] == "count"}
    assert operators["source-0"][1] == len(LINES)
    assert operators["flat_map-1"] == (len(LINES), sum(words.values()))
    assert operators["collect-3"][0] == emitted
    assert (job["events"], job["rescales"], job["restarts"]) == ([], 0, 0)


def test_the_watermark_lag_is_wall_clock_minus_the_watermark(tmp_path):
    from gyreflow.api import Environment

    now = time.time()
    events = [(f"k{i % 3}", now - 100 + i) for i in range(30)]
    monitor = JobMonitor()
    env = Environment.from_config(None, {"environment.type": "local", "progress.enabled": False,
                                         "state.path": str(tmp_path / "state")})
    pipeline = env.pipeline("late")

    @pipeline.task(name="lag")
    def lag(ctx):
        timed = ctx.source(events, SizeTumblingWindow(10)).with_timestamps(lambda e: e[1], max_delay=5.0)
        timed.key_by(lambda e: e[0]).window(Tumbling(10)).count().collect("out")

    pipeline.execute(listener=monitor)
    value = samples(generate_latest(monitor.registry).decode())[("gyreflow_watermark_lag_seconds", ())]
    # the last window ends the input: its watermark is +infinity, so the last finite one counts
    assert 60 < value < 200


def test_addresses():
    assert parse_address("8080") == ("127.0.0.1", 8080)
    assert parse_address("0.0.0.0:0") == ("0.0.0.0", 0)
    assert parse_address("[::1]:9") == ("::1", 9)
    for bad in ("http://x", "host:", "99999", "a:b"):
        with pytest.raises(UiAddressError, match=r"\[HOST:\]PORT"):
            parse_address(bad)


SCRIPT = '''
import sys, time
from gyreflow.api import Environment, GeneratorSource, SizeTumblingWindow

def lines():
    for i in range(int(sys.argv[1])):
        time.sleep(0.02)
        if i == int(sys.argv[2]):
            raise_here = 1 / 0
        yield f"w{i % 5} v{i % 3}"

pipeline = Environment.from_config().pipeline("slow")

@pipeline.task(name="words")
def words(ctx):
    words = ctx.source(GeneratorSource(lines), SizeTumblingWindow(5)).flat_map(str.split)
    words.key_by().count().collect("out")

pipeline.execute()
'''


def start_job(tmp_path, lines: int, fail_at: int = -1, linger: float = 0.0, environment="local",
              script: str = SCRIPT, args: tuple[str, ...] | None = None, **config: str):
    """``gyreflow run --ui`` of ``script`` (with ``args``, by default LINES FAIL_AT) in the
    background, with extra ``GYREFLOW_*`` settings; returns the process and the page's URL."""
    path = tmp_path / "slow.py"
    path.write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_STATE__PATH": str(tmp_path / "state"), "GYREFLOW_UI__LINGER": str(linger),
                "GYREFLOW_SPARK__MASTER": "local[2]", **config})
    args = (str(lines), str(fail_at)) if args is None else args
    process = subprocess.Popen(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", "--env", environment, "--ui",
         "127.0.0.1:0", str(path), "--", *args],
        env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    first = process.stderr.readline()
    assert first.startswith("ui: http://127.0.0.1:"), first
    return process, first.split(" ", 1)[1].strip()


def closed(url: str) -> bool:
    host, port = url.split("//")[1].rstrip("/").split(":")
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) != 0


def test_the_port_serves_the_whole_run_and_closes_at_exit(tmp_path):
    process, url = start_job(tmp_path, 120, linger=1.5)
    try:
        first = json.loads(get(url + "api/job")[2])  # open before the first window is done
        assert first["state"] == "running"
        seen = []
        while len(seen) < 3 and process.poll() is None:
            job = json.loads(get(url + "api/job")[2])
            if job["state"] == "running" and job["windows_completed"] > (seen[-1] if seen else 0):
                seen.append(job["windows_completed"])
            time.sleep(0.15)
        assert len(seen) == 3, "the window count grows while the job runs"
        while json.loads(get(url + "api/job")[2])["state"] == "running":
            time.sleep(0.1)
        job = json.loads(get(url + "api/job")[2])
        assert (job["state"], job["windows_completed"], job["error"]) == ("finished", 24, None)
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        process.wait()
    assert closed(url)


def test_a_failed_job_reports_its_error_until_exit(tmp_path):
    process, url = start_job(tmp_path, 40, fail_at=17, linger=30)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = json.loads(get(url + "api/job")[2])
            if job["state"] == "failed":
                break
            time.sleep(0.1)
        assert job["state"] == "failed"
        assert "ZeroDivisionError" in job["error"] and job["windows_completed"] == 3
        for _ in range(5):  # and goes on reporting it while the port lingers
            time.sleep(0.1)
            later = json.loads(get(url + "api/job")[2])
            assert (later["state"], later["error"]) == ("failed", job["error"])
    finally:
        # A stop signal that comes while the port lingers ends the linger. One that comes between
        # the failure and the linger counts as a stop of the run, after which the linger goes on
        # (30 s here) and only a second signal ends the process at once.
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait(timeout=60)
    assert closed(url)


def test_a_bad_ui_address_fails_before_any_data_moves(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("raise SystemExit('ran')\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--ui", "localhost:http",
                           str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "[HOST:]PORT" in done.stderr and "ran" not in done.stderr


def test_a_stop_signal_shows_stopping_then_finished(tmp_path):
    import signal

    process, url = start_job(tmp_path, 400, linger=30)
    try:
        while json.loads(get(url + "api/job")[2])["windows_completed"] < 2:
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        states = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job = json.loads(get(url + "api/job")[2])
            states.add(job["state"])
            if job["state"] == "finished":
                break
            time.sleep(0.01)
        assert job["state"] == "finished" and job["error"] is None
        assert "failed" not in states  # (the stopping state lasts less than a window: see below)
        process.send_signal(signal.SIGTERM)  # a second signal ends the linger at once
        assert process.wait(timeout=60) == 143
    finally:
        process.kill()
        process.wait()
    assert closed(url)


def test_the_config_key_serves_the_port_from_execute(tmp_path, capsys):
    from gyreflow.api import Environment
    from gyreflow.runtime.driver import JobListener

    env = Environment.from_config(None, {"environment.type": "local", "progress.enabled": False,
                                         "state.path": str(tmp_path / "state"),
                                         "ui.address": "127.0.0.1:0"})
    seen = []

    class Fetch(JobListener):
        def on_window(self, metrics) -> None:
            url = capsys.readouterr().err.split("ui: ", 1)[1].split()[0] if not seen else seen[0][0]
            seen.append((url, json.loads(get(url + "api/job")[2])["windows_completed"]))

    pipeline = env.pipeline("configured")

    @pipeline.task
    def t(ctx):
        ctx.source(list(range(30)), SizeTumblingWindow(10)).collect("out")

    pipeline.execute(listener=Fetch())
    assert [n for _, n in seen] == [0, 1, 2]  # the monitor hears each window after this listener
    assert closed(seen[0][0])


def test_the_state_is_stopping_once_a_stop_is_requested():
    from gyreflow.runtime.stop import JobStopped, StopRequest

    stop = StopRequest()
    monitor = JobMonitor(stop=stop)
    assert monitor.snapshot()["state"] == "running"
    stop.request(15)  # what the SIGTERM handler does
    assert monitor.snapshot()["state"] == "stopping"
    monitor.finish(JobStopped(15))
    assert (monitor.snapshot()["state"], monitor.snapshot()["error"]) == ("finished", None)
    failed = JobMonitor()
    failed.finish(RuntimeError("window 3 failed"))
    assert (failed.snapshot()["state"], failed.snapshot()["error"]) == ("failed", "window 3 failed")
