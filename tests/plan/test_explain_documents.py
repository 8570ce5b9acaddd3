"""``gyreflow explain`` prints one valid graph per format for any script: a script with several
pipelines and tasks becomes one DOT graph (checked by Graphviz, ``dot -Tsvg``) and one Mermaid
flowchart (checked by Mermaid's own parser in a real headless Chromium), each task a subgraph."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _browser import AVAILABLE, MISSING, chromium
from test_explain import DotGraph

SCRIPT = '''
from gyreflow.api import Environment, SizeTumblingWindow
env = Environment.from_config()
first = env.pipeline("first")

@first.task(name="words")
def words(ctx):
    ctx.source(["a b", "c"], SizeTumblingWindow(1)).flat_map(str.split).key_by().count().collect("n")

@first.task(name="join")
def join(ctx):
    left = ctx.source([(1, "x")]).key_by(lambda kv: kv[0])
    right = ctx.source([(1, "y")]).key_by(lambda kv: kv[0])
    left.join(right).collect("joined")

first.execute()
second = env.pipeline('say "hi"')

@second.task(name="plain")
def plain(ctx):
    ctx.source([1, 2]).map(lambda x: x + 1).collect("out")

second.execute()
'''
TITLES = ["first/words", "first/join", 'say "hi"/plain']


def explain(tmp_path: Path, fmt: str) -> str:
    script = tmp_path / "several.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    done = subprocess.run([sys.executable, "-m", "gyreflow", "explain", "--format", fmt, str(script)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_several_tasks_are_one_dot_graph_that_graphviz_accepts(tmp_path):
    text = explain(tmp_path, "dot")
    parsed = DotGraph(text)  # one digraph: the parser refuses anything after its closing brace
    assert [c for c in parsed.clusters if c.startswith("cluster_t") and "_v" not in c] == [
        "cluster_t0", "cluster_t1", "cluster_t2"]
    labels = [line.strip() for line in text.splitlines() if line.strip().startswith("label=")
              and "vertex" not in line]
    assert labels == ['label="first/words";', 'label="first/join";', 'label="say \\"hi\\"/plain";']
    assert len({n.split("_")[0] for n in parsed.nodes}) == 3  # nodes of each task stay apart
    dot = shutil.which("dot")
    if dot is None:
        pytest.skip("graphviz is not installed (scripts/test.sh installs it)")
    svg = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True, timeout=30)
    assert svg.returncode == 0, svg.stderr
    assert svg.stdout.count("<svg") == 1


MERMAID_JS = os.environ.get("GYREFLOW_TEST_MERMAID_JS") or str(
    Path(__file__).resolve().parents[2] / ".cache" / "mermaid" / "package" / "dist" / "mermaid.min.js")

PARSE = """
const done = arguments[arguments.length - 1];
mermaid.initialize({startOnLoad: false});
mermaid.parse(arguments[0]).then(r => done({ok: true, type: r.diagramType}),
                                 e => done({ok: false, error: String(e && e.message || e)}));
"""


@pytest.mark.skipif(not AVAILABLE, reason=MISSING)
def test_several_tasks_are_one_mermaid_flowchart_that_mermaid_parses(tmp_path):
    if not os.path.exists(MERMAID_JS):
        pytest.skip("mermaid.min.js was not fetched (scripts/test.sh fetches it with npm)")
    text = explain(tmp_path, "mermaid")
    assert text.count("flowchart") == 1
    shutil.copy(MERMAID_JS, tmp_path / "mermaid.min.js")
    page = tmp_path / "parse.html"
    page.write_text('<!DOCTYPE html><html><body><script src="mermaid.min.js"></script></body></html>',
                    encoding="utf-8")
    with chromium() as browser:
        browser.set_script_timeout(30)
        browser.get(page.as_uri())
        result = browser.execute_async_script(PARSE, text)
        assert result == {"ok": True, "type": "flowchart-v2"}, result
        broken = browser.execute_async_script(PARSE, text.replace("  end", "", 1) + "\n  x -->")
        assert broken["ok"] is False  # the parser does reject what is not Mermaid
    for title in TITLES:
        assert title.replace('"', "#quot;") in text
