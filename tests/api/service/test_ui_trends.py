"""The live page's trends in bounded memory, checked against plain-Python sums over every point;
the monitor's trend columns, operator counts and rescale/restart events; the charting library
served from the package."""

from __future__ import annotations

import json
import random
import urllib.request
from importlib import resources

import pytest
from prometheus_client import generate_latest
from test_ui import samples

from gyreflow.api.service.monitor import JobMonitor, Trend
from gyreflow.api.service.ui_server import UiServer
from gyreflow.plan.execution import build_execution_graph
from gyreflow.runtime.driver import CheckpointMetrics
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.scheduler.events import OperatorMetrics


def raw_points(count: int, seed: int) -> list[tuple[float, float, int, float | None]]:
    """``(start, end, records, lag)``: consecutive intervals, a lag missing now and then."""
    rng = random.Random(seed)
    points, now = [], 1000.0
    for _ in range(count):
        end = now + rng.uniform(0.01, 2.0)
        lag = None if rng.random() < 0.2 else rng.uniform(0, 50)
        points.append((now, end, rng.randrange(0, 500), lag))
        now = end
    return points


def check_partition(trend: Trend, raw: list, recent: int, seconds: float,
                    flushed: bool = False) -> None:
    """The trend's stretches cover ``raw`` (but for the observations of a point still gathering) in
    order, each one exactly the plain sums, counts and maxima of the run of observations it merged;
    a point gathers observations until it covers ``seconds``, and no longer; the last ``recent``
    points are kept as they are. After a ``flush`` the last point may be shorter."""
    stretches = trend.stretches()
    at = 0
    for n, stretch in enumerate(stretches, start=1):
        merged = raw[at:at + stretch.count]
        assert merged and len(merged) == stretch.count
        assert (stretch.start, stretch.end) == (merged[0][0], merged[-1][1])
        records = [p[2] for p in merged]
        lags = [p[3] for p in merged if p[3] is not None]
        assert stretch.sums[0] == sum(records) and stretch.maxes[0] == max(records)
        assert stretch.counts[1] == len(lags)
        assert stretch.sums[1] == pytest.approx(sum(lags))
        assert stretch.maxes[1] == (max(lags) if lags else None)
        if stretch.points == 1:
            assert stretch.end - stretch.start >= seconds or (flushed and n == len(stretches))
            assert len(merged) == 1 or merged[-2][1] - stretch.start < seconds
        at += stretch.count
    pending = 0 if trend.pending is None else trend.pending.count
    assert at + pending == len(raw), "every observation is in exactly one stretch"
    assert pending == 0 or raw[-1][1] - raw[-pending][0] < seconds
    points = sum(s.points for s in stretches)
    kept = min(points, recent)
    assert [s.points for s in stretches[len(stretches) - kept:]] == [1] * kept


@pytest.mark.parametrize("seconds", [0.0, 1.5])
def test_a_trend_keeps_the_last_points_and_merges_older_ones_exactly(seconds):
    raw = raw_points(3000, seed=7)
    trend = Trend(("records", "lag"), recent=16, older=8, seconds=seconds)
    for n, (start, end, records, lag) in enumerate(raw, start=1):
        trend.add(start, end, records, lag)
        if n in (1, 15, 16, 17, 40, 137, 1000, 3000):
            check_partition(trend, raw[:n], 16, seconds)
            assert len(trend.stretches()) <= 16 + 8 + 1
    trend.flush()
    check_partition(trend, raw, 16, seconds, flushed=True)
    # older stretches merge 2**k points: the whole run is covered, coarser the older it is
    older = [s.points for s in trend.stretches()[:-16]]
    assert len(set(older[:-1])) == 1 and older[0] & (older[0] - 1) == 0, older


def test_a_trend_stays_bounded_for_a_long_run():
    trend = Trend(("records",), recent=256, older=256, seconds=1.0)
    for i in range(100_000):
        trend.add(float(i), float(i + 1), 1)
        assert len(trend.older) < 256
    stretches = trend.stretches()
    assert len(stretches) <= 256 + 256 + 1
    assert sum(s.count for s in stretches) == 100_000
    assert sum(s.sums[0] for s in stretches) == 100_000
    assert (stretches[0].start, stretches[-1].end) == (0.0, 100_000.0)


class Clock:
    """Wall time moved by hand."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def window(number: int, seconds: float, read: int, watermark: float | None = None) -> WindowMetrics:
    operators = {"source-0": OperatorMetrics(0, read), "map-1": OperatorMetrics(read, 2 * read)}
    return WindowMetrics("t", 0, number, seconds, operators, ("source-0",), watermark)


def words_graph(parallelism: int = 1):
    from gyreflow.api import Environment, SizeTumblingWindow

    env = Environment.from_config(None, {"environment.type": "local", "progress.enabled": False})
    pipeline = env.pipeline("words")

    @pipeline.task(name="count")
    def count(ctx):
        (ctx.source(["a b"], SizeTumblingWindow(1)).flat_map(str.split).key_by().count()
         .collect("out"))

    (_, graph, _), = pipeline.plans()
    return build_execution_graph(graph.with_parallelism("count-2", parallelism))


def test_the_job_json_carries_trends_operators_and_events_as_plain_sums_say():
    wall = Clock(5000.0)
    monitor = JobMonitor(wall_clock=wall, point_seconds=0)  # a point per window and checkpoint
    monitor.on_start("words/count", words_graph())
    reads = [(0.5, 10, 0.4, None), (1.0, 30, 0.9, 4990.0), (0.25, 0, 0.2, 4995.5), (2.0, 7, 1.5, None)]
    ends = []
    for number, (step, read, seconds, watermark) in enumerate(reads, start=1):
        wall.now += step
        ends.append(wall.now)
        monitor.on_window(window(number, seconds, read, watermark))
        wall.now += 0.125
        monitor.on_checkpoint(CheckpointMetrics(number, 0.01 * number, 100 * number))
    wall.now += 1
    monitor.on_restart("words/count", words_graph(3), 4)
    wall.now += 1
    monitor.on_restart("words/count", words_graph(3), 4)
    job = json.loads(json.dumps(monitor.snapshot()))  # what /api/job serves

    windows = job["trends"]["windows"]
    starts = [5000.0, *ends[:-1]]
    assert windows["time"] == pytest.approx(ends, abs=5e-4)
    assert windows["windows"] == [1, 1, 1, 1]
    assert windows["records"] == [r[1] for r in reads]
    assert windows["records_per_second"] == pytest.approx(
        [r[1] / (e - s) for r, s, e in zip(reads, starts, ends, strict=True)], abs=0.05)
    assert windows["duration_seconds"] == pytest.approx([r[2] for r in reads])
    assert windows["duration_max_seconds"] == pytest.approx([r[2] for r in reads])
    assert windows["watermark_lag_seconds"] == pytest.approx([None, ends[1] - 4990.0,
                                                              ends[2] - 4995.5, None], abs=1e-3)
    checkpoints = job["trends"]["checkpoints"]
    assert checkpoints["time"] == pytest.approx([e + 0.125 for e in ends], abs=5e-4)
    assert checkpoints["duration_seconds"] == pytest.approx([0.01, 0.02, 0.03, 0.04])
    assert checkpoints["bytes"] == [100, 200, 300, 400]
    assert checkpoints["bytes_max"] == [100, 200, 300, 400]

    operators = {(o["task"], o["operator"]): (o["records_in"], o["records_out"])
                 for o in job["operators"]}
    total = sum(r[1] for r in reads)
    assert operators == {("count", "source-0"): (0, total), ("count", "map-1"): (total, 2 * total)}

    rescale, restart = job["events"]
    assert (rescale["kind"], rescale["window"]) == ("rescale", 4)
    assert rescale["time"] == pytest.approx(ends[-1] + 1.125)
    assert "count-2" in rescale["detail"] and "1 \u2192 3" in rescale["detail"]
    assert (restart["kind"], restart["window"]) == ("restart", 4)
    assert (job["rescales"], job["restarts"]) == (1, 1)
    assert [v["parallelism"] for v in job["execution_graph"]["vertices"]
            if "count-2" in v["operators"]] == [3]
    found = samples(generate_latest(monitor.registry).decode())
    assert found[("gyreflow_rescales_total", ())] == 1
    assert found[("gyreflow_restarts_total", ())] == 1


def test_points_of_a_second_and_merged_points_are_rates_and_means_over_what_they_cover():
    wall = Clock(0.0)
    monitor = JobMonitor(wall_clock=wall, recent_points=4, older_points=4, point_seconds=1.0)
    monitor.on_start("words/count", words_graph())
    rng = random.Random(3)
    raw = []
    for number in range(1, 41):
        step, read, seconds = rng.uniform(0.1, 1), rng.randrange(100), rng.uniform(0.05, 0.5)
        start = wall.now
        wall.now += step
        monitor.on_window(window(number, seconds, read))
        raw.append((start, wall.now, read, seconds))
    monitor.on_finish(TaskResult("words/count"))  # the last point, shorter than a second
    windows = monitor.snapshot()["trends"]["windows"]
    at = 0
    for end, count, records, rate, mean, most in zip(
            windows["time"], windows["windows"], windows["records"], windows["records_per_second"],
            windows["duration_seconds"], windows["duration_max_seconds"], strict=True):
        merged = raw[at:at + count]
        at += count
        assert end == pytest.approx(merged[-1][1], abs=5e-4)  # milliseconds
        assert records == sum(p[2] for p in merged)
        assert rate == pytest.approx(records / (merged[-1][1] - merged[0][0]), abs=0.05)
        assert mean == pytest.approx(sum(p[3] for p in merged) / count, rel=1e-4)
        assert most == pytest.approx(max(p[3] for p in merged), rel=1e-4)
        assert merged[-1][1] - merged[0][0] >= 1.0 or at == len(raw)
    assert at == len(raw) and len(windows["time"]) <= 4 + 4 + 1


def test_a_finished_task_result_keeps_the_events_and_counts():
    monitor = JobMonitor()
    monitor.on_start("words/count", words_graph())
    monitor.on_restart("words/count", words_graph(2), 0)
    monitor.on_finish(TaskResult("words/count"))
    monitor.on_start("words/next", words_graph())  # the pipeline's next task: no restart
    job = monitor.snapshot()
    assert [e["kind"] for e in job["events"]] == ["rescale"]
    assert (job["rescales"], job["restarts"], job["task"]) == (1, 0, "next")


def test_the_page_keeps_the_last_events_and_counts_them_all():
    wall = Clock(0.0)
    monitor = JobMonitor(wall_clock=wall)
    graphs = [words_graph(1), words_graph(2)]
    monitor.on_start("words/count", graphs[0])
    current, kinds = 0, []
    for n in range(1, 251):
        wall.now = float(n)
        following = current if n % 5 == 0 else 1 - current  # every fifth keeps the parallelism
        kinds.append("rescale" if following != current else "restart")
        current = following
        monitor.on_restart("words/count", graphs[current], n)
    job = monitor.snapshot()
    assert (job["rescales"], job["restarts"]) == (kinds.count("rescale"), kinds.count("restart"))
    assert [(e["time"], e["kind"], e["window"]) for e in job["events"]] == [
        (float(n), kinds[n - 1], n) for n in range(151, 251)]


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def test_the_charting_library_and_its_licence_are_served_from_the_package():
    server = UiServer(JobMonitor(), "127.0.0.1", 0)
    try:
        static = resources.files("gyreflow.api.service") / "static"
        for name, kind in (("uPlot.iife.min.js", "text/javascript"), ("uPlot.min.css", "text/css"),
                           ("uPlot.LICENSE", "text/plain")):
            status, content_type, body = get(server.url + "static/" + name)
            assert (status, content_type.split(";")[0]) == (200, kind)
            assert body == (static / name).read_bytes()
        assert b"MIT License" in get(server.url + "static/uPlot.LICENSE")[2]
        for missing in ("static/../ui_page.py", "static/", "static/%2e%2e/monitor.py",
                        "static/nothing.js"):
            assert get(server.url + missing)[0] == 404, missing
        page = get(server.url)[2].decode()
        assert 'src="/static/uPlot.iife.min.js"' in page and 'href="/static/uPlot.min.css"' in page
    finally:
        server.close()


def test_two_pipelines_with_a_task_of_the_same_name_are_counted_apart():
    monitor = JobMonitor(point_seconds=0)
    reads = {"alpha": [3, 4], "beta": [5, 6, 7]}
    for pipeline, windows in reads.items():
        monitor.on_start(f"{pipeline}/count", words_graph())
        for number, read in enumerate(windows, start=1):
            monitor.on_window(window(number, 0.1, read))
        monitor.on_finish(TaskResult(f"{pipeline}/count"))
    found = samples(generate_latest(monitor.registry).decode())
    for pipeline, windows in reads.items():
        labels = (("operator", "map-1"), ("pipeline", pipeline), ("task", "count"))
        assert found[("gyreflow_operator_records_in_total", labels)] == sum(windows)
        assert found[("gyreflow_operator_records_out_total", labels)] == 2 * sum(windows)
    job = monitor.snapshot()
    assert {(o["pipeline"], o["operator"]): o["records_in"] for o in job["operators"]} == {
        ("alpha", "source-0"): 0, ("alpha", "map-1"): 7, ("beta", "source-0"): 0,
        ("beta", "map-1"): 18}


def test_the_rate_stops_when_the_run_ends():
    clock = Clock(100.0)
    monitor = JobMonitor(clock=clock, wall_clock=clock)
    monitor.on_start("words/count", words_graph())
    for number in range(1, 5):
        clock.now += 0.5
        monitor.on_window(window(number, 0.4, 100))
    monitor.on_finish(TaskResult("words/count"))
    monitor.finish()
    rates = []
    for _ in range(3):  # the port lingers after the run: the rate stays the run's own
        clock.now += 10
        rates.append(monitor.snapshot()["records_per_second"])
    assert rates == [200.0] * 3  # 400 records in 2 seconds


def test_a_last_window_right_after_the_one_before_joins_the_point_before_it():
    clock = Clock(0.0)
    monitor = JobMonitor(wall_clock=clock, point_seconds=1.0)
    monitor.on_start("words/count", words_graph())
    for number in range(1, 11):  # 48 records a second, a window a second
        clock.now += 1.0
        monitor.on_window(window(number, 0.9, 48))
    clock.now += 0.0003  # the last window, reported a fraction of a millisecond later
    monitor.on_window(window(11, 0.9, 10))
    monitor.on_finish(TaskResult("words/count"))
    windows = monitor.snapshot()["trends"]["windows"]
    assert sum(windows["records"]) == 10 * 48 + 10 and sum(windows["windows"]) == 11
    assert windows["records"][-1] == 58 and windows["windows"][-1] == 2
    assert windows["records_per_second"][-1] == pytest.approx(58 / 1.0003, abs=0.05)
    assert max(windows["records_per_second"]) < 60


def test_a_resumed_run_shows_the_window_it_resumed_after_until_its_first_checkpoint():
    monitor = JobMonitor()
    monitor.on_start("words/count", words_graph())
    monitor.on_resumed(8)
    monitor.on_window(window(9, 0.1, 5))
    found = samples(generate_latest(monitor.registry).decode())
    assert found[("gyreflow_last_completed_window", ())] == 8


def test_a_pipeline_name_with_a_slash_is_refused():
    from gyreflow.api import Environment

    env = Environment.from_config(None, {"environment.type": "local", "progress.enabled": False})
    with pytest.raises(ValueError, match=r"pipeline name 'etl/v2'.*cannot contain '/'"):
        env.pipeline("etl/v2")
