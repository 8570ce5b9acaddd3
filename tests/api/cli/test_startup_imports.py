"""A job without a graph does not import scipy at start-up (a third of a second of every run)."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.processes


def test_a_word_count_run_imports_no_scipy(tmp_path):
    text = tmp_path / "words.txt"
    text.write_text("a b a\nc a b\n", encoding="utf-8")
    code = (
        "import sys\n"
        "from gyreflow.api import Environment, FileSource, SizeTumblingWindow\n"
        "pipeline = Environment.local(progress=False).pipeline('startup')\n"
        "@pipeline.task(name='job')\n"
        "def job(ctx):\n"
        "    (ctx.source(FileSource(sys.argv[1]), SizeTumblingWindow(1)).with_parallelism(1)\n"
        "     .flat_map(str.split).key_by().count().collect('rows'))\n"
        "rows = pipeline.execute()['job'].by_window('rows')\n"
        "print(sorted(rows[2]), 'scipy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(text)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[('a', 3), ('b', 2), ('c', 1)] False"]
