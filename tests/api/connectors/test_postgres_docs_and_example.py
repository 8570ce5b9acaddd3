"""The PostgresSink block of docs/connectors.md and examples/postgres_sink.py run against one
database, in either order and again, each writing what a Counter of its input says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[3]
LINES = ["a b", "b c", "b", "d a"]

pytestmark = pytest.mark.processes


@pytest.fixture
def database(postgres_database):
    """A new database on the test server, dropped afterwards."""
    return postgres_database


def sink_block() -> str:
    text = (ROOT / "docs" / "connectors.md").read_text(encoding="utf-8")
    return next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
                if "PostgresSink(" in b)


def environment(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "local", "DATABASE_URL": url, "COLUMNS": "400"})
    return env


def run_block(tmp_path: Path, url: str) -> str:
    script = tmp_path / "block.py"
    script.write_text(sink_block(), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=environment(url),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run_example(tmp_path: Path, url: str) -> None:
    data = tmp_path / "in.txt"
    data.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--quiet", "--fresh",
                           str(ROOT / "examples" / "postgres_sink.py"), "--", "--input", str(data),
                           "--window", "2", "--url", url], cwd=tmp_path, env=environment(url),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_the_docs_block_and_the_example_share_a_database(tmp_path, database):
    url, engine = database
    block_words = ["a", "b", "b", "c", "b"]  # the block's own input: "a b", "b c", "b"
    for _ in range(2):  # the docs' block first, then the example, then both again
        assert run_block(tmp_path, url) == f"{sorted(Counter(block_words).items())}\n"
        run_example(tmp_path, url)
    with engine.connect() as conn:
        totals = dict(conn.execute(sa.text("select word, count from word_totals")).all())
        demo = dict(conn.execute(sa.text("select word, count from demo_word_totals")).all())
    assert totals == Counter(word for line in LINES for word in line.split())
    assert demo == Counter(block_words)
