"""A job killed between a window's commit and its publish, resumed with its FileSink on another
number of tasks (1 -> 3, 3 -> 2, 3 -> 1): the parts the old layout staged are published, none is
lost or left in the staging folder, and every window's rows equal the Counter oracle."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from _recovery_jobs import KILLED, run_job

pytestmark = pytest.mark.processes

WINDOW = 40
SCRIPT = '''
import json, sys
from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow
source, output, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3])
pipeline = Environment.from_config(None).pipeline("sink-layout")

@pipeline.task(name="counts")
def counts(ctx):
    (ctx.source(FileSource(source), SizeTumblingWindow(WINDOW), name="lines", parallelism=1)
     .flat_map(str.split).key_by().count().with_name("count").with_parallelism(tasks)
     .sink(FileSink(output, format=lambda w, r: json.dumps(list(r)))).with_name("files")
     .with_parallelism(tasks))

pipeline.execute()
'''.replace("WINDOW)", f"{WINDOW})")


def oracle(lines: list[str]) -> dict[int, Counter]:
    """Per window, the rows ``(word, count over windows 1..w)`` of the words it holds."""
    totals: Counter = Counter()
    out = {}
    for start in range(0, len(lines), WINDOW):
        words = " ".join(lines[start:start + WINDOW]).split()
        totals.update(words)
        out[start // WINDOW + 1] = Counter((w, totals[w]) for w in set(words))
    return out


def published(out: Path) -> dict[int, Counter]:
    rows: dict[int, Counter] = {}
    for path in out.iterdir():
        match = re.fullmatch(r"window-(\d{6})(-part-\d{4})?\.jsonl", path.name)
        if match is None:
            continue
        window = rows.setdefault(int(match.group(1)), Counter())
        window.update(tuple(json.loads(line)) for line in path.read_text().splitlines())
    return rows


@pytest.mark.parametrize(("before", "after", "backend"),
                         [(3, 2, "rocksdb"), (1, 3, "jdbc"), (3, 1, "jdbc")])
def test_parts_staged_by_another_sink_layout_are_published_on_resume(tmp_path, before, after,
                                                                     backend):
    lines = [" ".join(f"w{(i * 5 + j * 3) % 17}" for j in range(6)) for i in range(12 * WINDOW)]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    script = tmp_path / "job.py"
    script.write_text(SCRIPT, encoding="utf-8")
    out = tmp_path / "out"
    env = {"GYREFLOW_STATE__BACKEND": backend, "GYREFLOW_STATE__PATH": str(tmp_path / "state"),
           "GYREFLOW_CONTROL__ENABLED": "false"}
    args = [str(source), str(out)]
    crashed = run_job(script, [*args, str(before)], {**env, "GYREFLOW_CRASH_AT": "after-commit:5"})
    assert crashed.returncode == KILLED, crashed.stderr
    staged = sorted(p.name for p in (out / ".staging").iterdir()) if (out / ".staging").exists() else []
    assert any(name.startswith("window-000005") for name in staged), staged  # not yet published

    resumed = run_job(script, [*args, str(after)], env, ("--resume",))

    assert resumed.returncode == 0, resumed.stderr
    assert published(out) == oracle(lines)
    assert not (out / ".staging").exists()
