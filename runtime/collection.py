"""Fewer cyclic garbage collections while a job runs: the objects that exist when it starts
(modules, the plan, configuration) are frozen out of the collector's walks, and the young
generation is collected every ``YOUNG_OBJECTS`` new containers instead of every 700.

A window creates hundreds of thousands of short-lived tuples, lists and dicts; with CPython's
defaults each few hundred of them start a walk over the young objects, and the older generations
are walked again and again while state grows. Reference counting frees the objects in any case;
only cycles wait longer to be found.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_OBJECTS = 50_000


@contextmanager
def collecting_less() -> Iterator[None]:
    """Run the body with the objects made before it frozen and a larger young generation; the
    collector's settings are restored after it."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(before[0], YOUNG_OBJECTS), before[1], before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
