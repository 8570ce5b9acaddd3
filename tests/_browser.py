"""A real headless Chromium (Debian's chromium and chromium-driver) driven by Selenium, for tests."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
AVAILABLE = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)
MISSING = "Debian's chromium and chromium-driver are not installed (scripts/test.sh installs them)"


@contextlib.contextmanager
def chromium():
    """A headless Chromium with a fresh profile and no background network traffic; its performance
    log (``requested_urls``) lists every request a page made."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="gyreflow-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--allow-file-access-from-files",
                 f"--user-data-dir={profile}", "--window-size=1200,800"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def requested_urls(driver) -> list[str]:
    """Every URL the browser sent a request for since the last call (Chrome's performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls
