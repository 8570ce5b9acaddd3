"""Rows built from columns in one step, with the cycle collector paused while they are made."""

from __future__ import annotations

import gc
from collections.abc import Iterable


def zipped_rows(*columns: Iterable) -> list[tuple]:
    """``list(zip(*columns, strict=True))`` with the cycle collector paused: each new tuple would
    count towards a collection, so 200,000 rows ran some 300 of them (a quarter of the time it
    takes to build the rows, measured here), and the rows make no cycle to collect."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        return list(zip(*columns, strict=True))
    finally:
        if collecting:
            gc.enable()
