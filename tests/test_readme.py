"""The README's Python examples run and print what the README says they print."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_readme_has_the_stream_and_batch_examples():
    blocks = python_blocks()
    assert len(blocks) >= 2
    assert any("SizeTumblingWindow" in b for b in blocks)
    assert any("AllWindow" in b for b in blocks)


def test_stream_example_prints_what_the_comment_says(tmp_path, monkeypatch):
    block = next(b for b in python_blocks() if "SizeTumblingWindow" in b)
    expected = re.search(r"^# (\{.*\})$", block, flags=re.M).group(1)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README stream example", "exec"), {})  # noqa: S102 - our own README
    assert out.getvalue().strip() == expected
    # independent oracle: counts over windows of two lines
    lines = ["a b", "b c", "b"]
    running: dict[str, int] = {}
    oracle = {}
    for window, start in enumerate(range(0, len(lines), 2), 1):
        seen = []
        for word in " ".join(lines[start:start + 2]).split():
            running[word] = running.get(word, 0) + 1
            if word not in seen:
                seen.append(word)
        oracle[window] = [(w, running[w]) for w in seen]
    assert expected == repr(oracle)


def test_batch_example_writes_the_means_it_promises(tmp_path, monkeypatch):
    block = next(b for b in python_blocks() if "AllWindow" in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README batch example", "exec"), {})  # noqa: S102 - our own README
    files = sorted(p.name for p in (tmp_path / "out" / "means").iterdir())
    assert files == ["window-000001.jsonl"]
    rows = [json.loads(line) for line in
            (tmp_path / "out" / "means" / "window-000001.jsonl").read_text().splitlines()]
    readings = [("oslo", 3), ("rome", 20), ("oslo", 5)]
    oracle: dict[str, list[int]] = {}
    for city, value in readings:
        oracle.setdefault(city, []).append(value)
    assert sorted(map(tuple, rows)) == sorted((c, sum(v) / len(v)) for c, v in oracle.items())
