"""Every ``mermaid`` block of README.md and docs/ is a diagram Mermaid's own parser accepts, so a
picture in the documentation cannot break unseen (GitHub and the site draw them with Mermaid)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from _browser import AVAILABLE, MISSING, chromium

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```mermaid\n(.*?)^```\s*$", re.S | re.M)
MERMAID_JS = os.environ.get("GYREFLOW_TEST_MERMAID_JS") or str(
    REPO / ".cache" / "mermaid" / "package" / "dist" / "mermaid.min.js")
PARSE = """
const done = arguments[arguments.length - 1];
mermaid.initialize({startOnLoad: false});
mermaid.parse(arguments[0]).then(r => done({ok: true, type: r.diagramType}),
                                 e => done({ok: false, error: String(e && e.message || e)}));
"""


def mermaid_blocks() -> list[tuple[str, str]]:
    """(document:line, body) of every mermaid block."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(REPO).as_posix()}:{line}", match.group(1)))
    return found


def test_the_architecture_draws_each_host():
    blocks = [body for where, body in mermaid_blocks() if where.startswith("docs/architecture.md")]
    assert len(blocks) >= 3
    hosts = ["runtime/local/host.py", "runtime/workers/host.py", "runtime/spark/host.py"]
    assert all(any(host in body for body in blocks) for host in hosts)


@pytest.mark.skipif(not AVAILABLE, reason=MISSING)
def test_every_mermaid_block_parses(tmp_path):
    if not os.path.exists(MERMAID_JS):
        pytest.skip("mermaid.min.js was not fetched (scripts/test.sh fetches it with npm)")
    blocks = mermaid_blocks()
    shutil.copy(MERMAID_JS, tmp_path / "mermaid.min.js")
    page = tmp_path / "parse.html"
    page.write_text('<!DOCTYPE html><html><body><script src="mermaid.min.js"></script></body></html>',
                    encoding="utf-8")
    with chromium() as browser:
        browser.set_script_timeout(30)
        browser.get(page.as_uri())
        results = {where: browser.execute_async_script(PARSE, body) for where, body in blocks}
        broken = browser.execute_async_script(PARSE, blocks[0][1] + "\n  x -->")
    wrong = {where: result for where, result in results.items() if not result["ok"]}
    assert not wrong, wrong
    assert broken["ok"] is False  # the parser does reject what is not Mermaid
