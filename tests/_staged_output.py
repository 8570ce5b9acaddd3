"""Reading a FileSink output folder in tests: published files and the staged ones under
``.staging/``."""

from __future__ import annotations

import re
from pathlib import Path


def read_dir(directory: Path) -> dict[str, list[str]]:
    """Every file of ``directory`` (hidden ones included, and those staged in ``.staging/``, named
    ``.staging/<name>``) -> its lines, sorted."""
    if not directory.exists():
        return {}
    found = {}
    for path in directory.iterdir():
        if path.is_dir() and path.name == ".staging":
            found.update((f".staging/{staged.name}",
                          sorted(staged.read_text(encoding="utf-8").splitlines()))
                         for staged in path.iterdir())
        else:
            found[path.name] = sorted(path.read_text(encoding="utf-8").splitlines())
    return found


def is_staged_window(name: str) -> bool:
    """A staged window file or its summary, as ``read_dir`` names it."""
    return re.fullmatch(r"\.staging/window-\d{6}\.jsonl\.[0-9a-f]+(\.sum)?", name) is not None
