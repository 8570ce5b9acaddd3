"""The bounds of tumbling and sliding event-time windows, each exact to one rounding, and the windows
holding a time.

Window ``k`` (an integer) spans ``[k * slide, k * slide + size)``, each bound the exact value rounded
once to the nearest float. A time joins every window whose bounds hold it, compared as floats, so
the windows a record joins are the ones reported with it: tumbling windows tile the line (window
``k`` ends where ``k + 1`` starts), whatever the size (``0.1`` is not exact in binary). Beyond
2**51 slides from the epoch neighbouring windows can round to the same start; windows with one start
are one window, the one of the largest index.
"""

from __future__ import annotations

import math
from functools import lru_cache

LIMIT = 2**51  # window indexes below it: a float product and one correcting step are exact


def Fraction(value):  # noqa: N802 - fractions imports decimal: only what needs it pays for it
    """``fractions.Fraction(value)``, imported on first use."""
    import fractions

    return fractions.Fraction(value)


def start_of(k: int, slide: float) -> float:
    """The start of window ``k``: ``k * slide`` rounded once.

    >>> start_of(3, 0.1)
    0.30000000000000004
    """
    if -LIMIT < k < LIMIT:
        return k * slide  # k converts to float exactly: one rounding, of the product
    return float(Fraction(k) * Fraction(slide))


def end_of(k: int, size: float, slide: float) -> float:
    """The end of window ``k``: ``k * slide + size`` rounded once (a tumbling window's is the next
    one's start).

    >>> end_of(2, 0.1, 0.1) == start_of(3, 0.1)
    True
    """
    if size == slide:
        return start_of(k + 1, slide)
    return _sliding_end(k, size, slide)


@lru_cache(maxsize=8192)
def _sliding_end(k: int, size: float, slide: float) -> float:
    # Exact: the float sum of the rounded product would round twice (an overlap or a gap of one ulp
    # between windows that should meet). Cached: a stream in time order asks for few indexes.
    return float(Fraction(k) * Fraction(slide) + Fraction(size))


def last_index(ts: float, slide: float) -> int:
    """The largest ``k`` whose window starts at or before ``ts``, in constant time.

    >>> last_index(0.3, 0.1), last_index(0.30000000000000004, 0.1)
    (2, 3)
    """
    quotient = ts / slide
    if -LIMIT < quotient < LIMIT:
        k = math.floor(quotient)
        while k * slide > ts:  # the division rounded up across a boundary
            k -= 1
        while (k + 1) * slide <= ts:
            k += 1
        return k
    # Far from the epoch: round(k * slide) <= ts exactly when k * slide lies below the midpoint
    # between ts and the next float (or on it, when that rounds down to ts).
    mid = (Fraction(ts) + Fraction(math.nextafter(ts, math.inf))) / 2
    k = math.ceil(mid / Fraction(slide)) - 1
    if start_of(k + 1, slide) <= ts:
        k += 1
    return k


def first_index(ts: float, size: float, slide: float, last: int) -> int:
    """The smallest ``k`` whose window ends after ``ts`` (``last``: ``last_index(ts, slide)``)."""
    if size == slide:
        return last
    if -LIMIT < last < LIMIT:
        k = last - math.ceil(size / slide)
        while end_of(k, size, slide) > ts:
            k -= 1
        k += 1
        while end_of(k, size, slide) <= ts:
            k += 1
        return k
    mid = (Fraction(ts) + Fraction(math.nextafter(ts, math.inf))) / 2
    k = math.floor((mid - Fraction(size)) / Fraction(slide)) + 1
    if end_of(k - 1, size, slide) > ts:
        k -= 1
    return k


def windows_of(ts: float, size: float, slide: float) -> list[int]:
    """The indexes of the windows holding ``ts``, oldest first (one per start)."""
    last = last_index(ts, slide)
    first = first_index(ts, size, slide, last)
    if -LIMIT < first and last < LIMIT:
        return list(range(first, last + 1))
    indexes: list[int] = []
    for k in range(first, last + 1) if last - first < 64 else _spread(first, last, slide):
        if indexes and start_of(indexes[-1], slide) == start_of(k, slide):
            indexes[-1] = k  # one window per start: the largest index
        else:
            indexes.append(k)
    return indexes


def _spread(first: int, last: int, slide: float) -> list[int]:
    """Indexes in ``[first, last]`` one per distinct start, for a span too long to walk (windows
    so far from the epoch that many indexes share each start)."""
    out = []
    k = first
    while k <= last:
        start = start_of(k, slide)
        k = min(last, last_index(start, slide))  # the largest index with this start
        out.append(k)
        k += 1
    return out


def end_of_start(start: float, size: float, slide: float) -> float:
    """The end of the window that starts at ``start`` (one window per start: the largest index)."""
    return end_of(last_index(start, slide), size, slide)
