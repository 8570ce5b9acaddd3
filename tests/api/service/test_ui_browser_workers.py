"""The live page in a real headless Chromium, watching a job in worker processes: a rescale of the
worker processes (``control rescale 3``) is shown as a rescale, with its detail, and a worker killed
with SIGKILL as a restart naming it; each counted under its own name."""

from __future__ import annotations

import os
import signal

import pytest
from _browser import AVAILABLE, MISSING, chromium
from _processes import forks
from test_ui import start_job
from test_ui_browser import wait_for

pytestmark = [pytest.mark.skipif(not AVAILABLE, reason=MISSING), pytest.mark.processes]

LINES = 400  # 80 windows of 5 records, 20 ms per record
SCRIPT = '''
import sys, time
from gyreflow.api import Environment, SizeTumblingWindow


def paced(record):
    time.sleep(0.02)
    return record


pipeline = Environment.from_config(overrides={"environment.parallelism": 3}).pipeline("paced")


@pipeline.task(name="words")
def words(ctx):
    lines = [f"w{i % 7}" for i in range(int(sys.argv[1]))]
    ctx.source(lines, SizeTumblingWindow(5)).with_parallelism(1).map(paced).key_by().count().collect(
        "out")


pipeline.execute()
'''


def facts(driver) -> dict:
    """The counters and the list of rescales, rebalances and restarts, as the page shows them."""
    return driver.execute_script("""
        return {rescales: document.getElementById('rescales').textContent,
                restarts: document.getElementById('restarts').textContent,
                events: [...document.querySelectorAll('#events li')].map(
                  li => ({kind: li.className, text: li.textContent}))};
    """)


def test_the_page_shows_a_rescale_of_the_workers_as_a_rescale_and_a_kill_as_a_restart(tmp_path):
    from gyreflow.api.service.control import find_job, send

    control = tmp_path / "control"
    process, url = start_job(tmp_path, LINES, linger=30, script=SCRIPT, args=(str(LINES),),
                             GYREFLOW_CONTROL__DIRECTORY=str(control),
                             GYREFLOW_ENVIRONMENT__WORKERS="2", GYREFLOW_RESTART__DELAY="0.01")
    try:
        with chromium() as browser:
            browser.get(url)
            wait_for(lambda: int(browser.find_element("id", "windows").text.replace(",", "")) > 0,
                     what="the first window")
            answer = send(find_job(str(control), str(process.pid)),
                          {"command": "rescale", "operator": None, "parallelism": 3})
            assert answer["ok"], answer
            rescaled = wait_for(lambda: (lambda seen: seen if seen["events"] else None)(
                facts(browser)), what="the rescale on the page", seen=lambda: facts(browser))
            assert (rescaled["rescales"], rescaled["restarts"]) == ("1", "0"), rescaled
            assert [e["kind"] for e in rescaled["events"]] == ["rescale"], rescaled
            assert rescaled["events"][0]["text"].endswith(
                f"rescale after window {answer['window'] - 1}: worker processes 2 \u2192 3"), rescaled
            workers = wait_for(lambda: (lambda pids: pids if len(pids) == 3 else None)(
                forks(process.pid)), what="three worker processes")
            os.kill(workers[2], signal.SIGKILL)
            restarted = wait_for(lambda: (lambda seen: seen if len(seen["events"]) == 2 else None)(
                facts(browser)), what="the restart on the page", seen=lambda: facts(browser))
            assert (restarted["rescales"], restarted["restarts"]) == ("1", "1"), restarted
            latest = restarted["events"][0]  # the newest first
            assert latest["kind"] == "restart", restarted
            assert f"worker 2 (pid {workers[2]}) of job 'paced/words' killed by SIGKILL" \
                   " (attempt 1 of 3)" in latest["text"], restarted
    finally:
        process.kill()
        process.communicate()
