"""The live page in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium): it draws every operator of the plan and its window count grows while the job runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _browser import AVAILABLE, MISSING, chromium
from test_ui import SCRIPT, start_job

pytestmark = pytest.mark.skipif(not AVAILABLE, reason=MISSING)


@pytest.fixture
def browser():
    with chromium() as driver:
        yield driver


def explained_operators(tmp_path) -> list[str]:
    """The operator names ``gyreflow explain`` prints for the script (the page's oracle)."""
    script = tmp_path / "slow.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    out = subprocess.run([sys.executable, "-m", "gyreflow", "explain", str(script),
                          "--", "1", "-1"], capture_output=True, text=True, env=env, check=True)
    lines = out.stdout.split("PipelineGraph:")[1].split("\n")[1:]
    names = []
    for line in lines:
        match = re.match(r"  (\S+)\s+\S+\s+\S+\s+p=", line)
        if match is None:
            break
        names.append(match.group(1))
    assert names
    return names


def windows_shown(driver) -> int:
    return int(driver.find_element("id", "windows").text)


def test_the_page_draws_the_plan_and_counts_windows_live(browser, tmp_path):
    operators = explained_operators(tmp_path)
    process, url = start_job(tmp_path, 150, linger=2)
    try:
        browser.get(url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not browser.find_elements("css selector", "g.vertex"):
            time.sleep(0.1)
        labels = [e.text for e in browser.find_elements("css selector", "g.vertex text")]
        assert labels, "the execution graph is drawn"
        for name in operators:
            assert any(name in label.split(" ") for label in labels), (name, labels)
        titles = [e.text for e in browser.find_elements("css selector", "g.cycle > text")]
        assert titles and all(t.startswith("words") for t in titles)
        first = windows_shown(browser)
        time.sleep(2.5)
        later = windows_shown(browser)
        assert later > first, "the window count grows while the job runs"
        assert browser.find_element("id", "state").text.lower() in ("running", "finished")
        shot = os.environ.get("GYREFLOW_UI_SCREENSHOT")
        if shot:
            Path(shot).parent.mkdir(parents=True, exist_ok=True)
            browser.save_screenshot(shot)
        # every request the page made went to the address it was served from
        origin = url.rstrip("/")
        requested = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert requested and all(name.startswith(origin) for name in requested), requested
        process.wait(timeout=60)
    finally:
        process.kill()
        process.wait()


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
