"""docs/windows.md: every Python snippet runs and prints exactly the lines its comments show."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "windows.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def shown(block: str) -> list[str]:
    """The comment lines after the last ``print``: what the snippet says it prints."""
    lines = block.rstrip().splitlines()
    tail = []
    for line in reversed(lines):
        if not line.startswith("# "):
            break
        tail.append(line[2:])
    return list(reversed(tail))


def test_the_doc_has_its_snippets():
    assert len(blocks()) >= 5
    assert all(shown(block) for block in blocks())


@pytest.mark.parametrize("index", range(5))
def test_snippet_prints_what_it_shows(index, tmp_path, monkeypatch):
    block = blocks()[index]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, f"docs/windows.md snippet {index + 1}", "exec"), {})
    assert out.getvalue().splitlines() == shown(block)
