"""Counts in what users read: ``1 window``, ``2 windows``, ``1 worker process``."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, in the plural unless ``count`` is 1 (``many`` where adding an ``s``
    is wrong), with thousands separated.

    >>> plural(1, "window"), plural(2, "window"), plural(1_500, "record")
    ('1 window', '2 windows', '1,500 records')
    >>> plural(1, "vertex", "vertices"), plural(3, "worker process", "worker processes")
    ('1 vertex', '3 worker processes')
    """
    return f"{count:,} {noun if count == 1 else many or noun + 's'}"
