"""The live page in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium), watching one paced event-time job that is rescaled while it runs: the plan is drawn with
every operator's records in and out, the trend charts grow, the rescale is counted and marked, and
no request leaves the page's own origin."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _browser import AVAILABLE, MISSING, chromium, requested_urls
from test_ui import get, start_job

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=MISSING)

LINES = 600  # 120 windows of 5 records, 20 ms per record: a rescale sent after the first window
# lands mid-run even when starting its command takes seconds
TREND = '''
import sys, time
from gyreflow.api import Environment, SizeTumblingWindow, Tumbling

LINES, BASE = int(sys.argv[1]), float(sys.argv[2])


def paced(record):
    time.sleep(0.02)
    return record


pipeline = Environment.from_config().pipeline("trend")


@pipeline.task(name="words")
def words(ctx):
    records = [(f"w{i % 5}", BASE + i / 10) for i in range(LINES)]
    timed = ctx.source(records, SizeTumblingWindow(5)).map(paced).with_timestamps(
        lambda r: r[1], max_delay=0.5)
    timed.key_by(lambda r: r[0]).window(Tumbling(1.0)).count().collect("out")


pipeline.execute()
'''
CHARTS = ("records", "window-duration", "checkpoint-duration", "checkpoint-size", "watermark-lag")


@pytest.fixture(scope="module")
def browser():
    with chromium() as driver:
        yield driver


def explained_operators(tmp_path, script: str, *args: str) -> list[str]:
    """The operator names ``gyreflow explain`` prints for the script (the page's oracle)."""
    path = tmp_path / "explained.py"
    path.write_text(script, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    out = subprocess.run([sys.executable, "-m", "gyreflow", "explain", str(path), "--", *args],
                         capture_output=True, text=True, env=env, check=True)
    lines = out.stdout.split("PipelineGraph:")[1].split("\n")[1:]
    names = []
    for line in lines:
        match = re.match(r"  (\S+)\s+\S+\s+\S+\s+p=", line)
        if match is None:
            break
        names.append(match.group(1))
    assert names
    return names


def expected_counts(base: float) -> dict[str, tuple[int, int]]:
    """Records in and out of every operator of TREND, by a plain loop over its input: each
    (word, second) pair is one count the event-time window emits."""
    fired = len({(f"w{i % 5}", math.floor(base + i / 10)) for i in range(LINES)})
    return {"source-0": (0, LINES), "map-1": (LINES, LINES), "timestamps-2": (LINES, LINES),
            "event_window-3": (LINES, fired), "filter-4": (fired, fired), "collect-5": (fired, 0)}


def wait_for(condition, seconds: float = 60.0, what: str = "", seen=None):
    """``condition()`` once it is true; on time-out, the failure shows ``seen()`` (what the page
    showed last)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    shown = f"; the page showed {seen()}" if seen is not None else ""
    raise AssertionError(f"timed out waiting for {what}{shown}")


def look(driver) -> dict:
    """What the page shows now: points and markers per chart, records in/out per operator."""
    return driver.execute_script("""
        const charts = {}, operators = {};
        for (const card of document.querySelectorAll('.chart'))
          charts[card.id.slice(6)] = {points: +card.dataset.points, markers: +card.dataset.markers,
                                      hidden: card.hidden,
                                      canvas: !!card.querySelector('canvas')};
        for (const op of document.querySelectorAll('g.operator'))
          operators[op.dataset.operator] = {in: +op.dataset.recordsIn, out: +op.dataset.recordsOut,
                                            text: op.querySelector('.counts').textContent};
        return {charts, operators, state: document.getElementById('state').textContent,
                rescales: document.getElementById('rescales').textContent,
                parallelism: Object.fromEntries([...document.querySelectorAll('g.vertex')].map(
                  v => [v.dataset.operators, +v.dataset.parallelism]))};
    """)


def test_the_page_draws_trends_and_live_counts_of_a_rescaled_job(browser, tmp_path):
    base = float(math.floor(time.time()) - 60)  # event time a minute behind: the lag is about that
    operators = explained_operators(tmp_path, TREND, "10", str(base))
    control = tmp_path / "control"
    launched = time.time()
    process, url = start_job(tmp_path, LINES, linger=30, script=TREND, args=(str(LINES), str(base)),
                             GYREFLOW_CONTROL__DIRECTORY=str(control))
    try:
        requested_urls(browser)  # what the browser requested before (its own start page) is not the page's
        browser.get(url)
        wait_for(lambda: int(browser.find_element("id", "windows").text.replace(",", "")) > 0,
                 what="the first window")
        rescale = subprocess.Popen(  # lands a few windows later, while the page keeps drawing
            [sys.executable, "-m", "gyreflow", "control", "rescale", "event_window-3", "2", "--json",
             "--job", str(process.pid)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "GYREFLOW_CONTROL__DIRECTORY": str(control)})
        first = wait_for(lambda: (lambda seen: seen if all(
            seen["charts"][c]["points"] >= 2 for c in CHARTS) else None)(look(browser)),
            what="every chart to have two points")
        assert sorted(first["operators"]) == sorted(operators), "every operator is drawn"
        assert all(first["charts"][c]["canvas"] and not first["charts"][c]["hidden"] for c in CHARTS)

        out, err = rescale.communicate(timeout=120)
        assert rescale.returncode == 0, err
        rescaled_at = json.loads(out)["window"]
        second = wait_for(lambda: (lambda seen: seen if seen["rescales"] == "1" and all(
            seen["charts"][c]["markers"] == 1
            and seen["charts"][c]["points"] > first["charts"][c]["points"] for c in CHARTS)
            else None)(look(browser)),
            what="the charts to grow and the rescale to be counted and marked on every chart",
            seen=lambda: {"rescaled at window": rescaled_at, "first": first, "now": look(browser)})
        assert second["operators"]["source-0"]["out"] > first["operators"]["source-0"]["out"]
        assert second["parallelism"]["event_window-3 filter-4 collect-5"] == 2

        job = json.loads(get(url + "api/job")[2])
        assert [(e["kind"], e["window"] + 1) for e in job["events"]] == [("rescale", rescaled_at)]
        wait_for(lambda: look(browser)["state"].lower() == "finished", what="the job to finish")
        time.sleep(1.2)  # one more refresh after the end
        final = look(browser)
        expected = expected_counts(base)
        assert {name: (o["in"], o["out"]) for name, o in final["operators"].items()} == expected
        texts = {name: o["text"] for name, o in final["operators"].items()}
        assert texts["source-0"] == f"out {LINES}" and texts["collect-5"] == f"in {expected['collect-5'][0]}"
        assert texts["event_window-3"] == "in {} \u00b7 out {}".format(*expected["event_window-3"])
        # the lag shown is the last one measured: wall clock minus a watermark, which stays within
        # the input's event times (the job ran between launch and now)
        lags = [v for v in json.loads(get(url + "api/job")[2])["trends"]["windows"][
            "watermark_lag_seconds"] if v is not None]
        lag = browser.find_element("id", "lag").text
        assert lag.endswith(" s") and float(lag[:-2]) == pytest.approx(lags[-1], abs=0.051), lag
        assert launched - (base + LINES / 10) <= lags[-1] <= time.time() - base + 0.5

        shot = os.environ.get("GYREFLOW_UI_SCREENSHOT")
        if shot:
            browser.set_window_size(1280, 1420)
            time.sleep(1.5)
            Path(shot).parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(shot)
        # every request the page made went to the address it was served from
        origin = url.rstrip("/")
        resources = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert {r.split("?")[0] for r in resources} >= {origin + "/static/uPlot.iife.min.js",
                                                        origin + "/static/uPlot.min.css",
                                                        origin + "/api/job"}
        # (the browser's own pages, its new-tab page loading late, are not requests of the page)
        sent = [u for u in requested_urls(browser)
                if not u.startswith(("data:", "chrome://", "chrome-untrusted://"))]
        assert sent and all(u.startswith(origin + "/") for u in sent + resources), sent
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_the_page_shows_the_error_of_a_failed_job(browser, tmp_path):
    process, url = start_job(tmp_path, 40, fail_at=12, linger=30)
    try:
        browser.get(url)
        deadline = time.monotonic() + 60
        error = ""
        while time.monotonic() < deadline:
            error = browser.find_element("id", "error").text
            if error:
                break
            time.sleep(0.2)
        assert "ZeroDivisionError" in error
        assert browser.find_element("id", "state").text.lower() == "failed"
    finally:
        process.terminate()
        process.wait(timeout=60)
