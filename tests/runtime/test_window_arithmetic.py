"""Tumbling and sliding window assignment with decimal sizes and huge times, on rows and on
columns, against windows computed with exact fractions."""

from __future__ import annotations

import math
import threading
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.time.event_columns import window_starts
from gyreflow.runtime.dataflow.time.window_assignment import starts_of
from gyreflow.runtime.dataflow.time.window_grid import end_of_start

SHAPES = [(0.1, 0.1), (0.2, 0.2), (0.3, 0.3), (1.5, 1.5), (0.3, 0.1), (0.2, 0.1), (1.5, 0.5),
          (1.5, 1.0), (0.5, 0.2), (60.0, 60.0)]


def oracle(ts: float, size: float, slide: float) -> list[tuple[float, float]]:
    """Every window ``k`` whose bounds hold ``ts``: ``[k * slide, k * slide + size)``, each bound
    the exact value rounded once."""
    exact_slide, exact_size = Fraction(slide), Fraction(size)
    middle = math.floor(Fraction(ts) / exact_slide)
    reach = math.ceil(exact_size / exact_slide) + 2
    found = []
    for k in range(middle - reach, middle + 3):
        start, end = float(k * exact_slide), float(k * exact_slide + exact_size)
        if start <= ts < end:
            found.append((start, end))
    return found


times = st.one_of(
    st.integers(-100_000, 100_000).map(lambda n: round(n * 0.1, 1)),   # decimal times
    st.integers(-10_000, 10_000).map(lambda n: n * 0.1),               # products, as computed
    st.floats(-1e6, 1e6, allow_nan=False),
    st.integers(-10**6, 10**6).map(lambda n: 1.7e9 + n * 0.001),
    st.floats(-1e12, 1e12, allow_nan=False))


@settings(max_examples=400, deadline=None)
@given(ts=times, shape=st.sampled_from(SHAPES))
def test_rows_join_exactly_the_windows_whose_bounds_hold_them(ts, shape):
    size, slide = shape
    got = [(start, end_of_start(start, size, slide)) for start in starts_of(ts, size, slide)]
    assert got == oracle(ts, size, slide)
    assert all(start <= ts < end for start, end in got)


@settings(max_examples=150, deadline=None)
@given(batch=st.lists(times, min_size=1, max_size=40), shape=st.sampled_from(SHAPES))
def test_columns_join_the_windows_rows_join(batch, shape):
    size, slide = shape
    ts = np.asarray(batch, dtype=np.float64)
    rows, starts, late = window_starts(ts, np.full(len(ts), -np.inf), size, slide)
    assert len(late) == 0
    got = sorted(zip(rows.tolist(), starts.tolist(), strict=True))
    expected = sorted((row, start) for row, t in enumerate(batch)
                      for start, _ in oracle(t, size, slide))
    assert got == expected


@pytest.mark.parametrize("shape", SHAPES)
def test_a_tumbling_or_sliding_window_is_late_only_once_its_end_passed(shape):
    size, slide = shape
    ts = np.asarray([round(i * 0.1, 1) for i in range(60)], dtype=np.float64)
    _, starts, late = window_starts(ts, ts.copy(), size, slide)  # each row's own time as watermark
    assert len(late) == 0  # a time is never at or behind the end of a window holding it
    assert all(end_of_start(s, size, slide) > 0 for s in starts.tolist())


def _finishes(fn, seconds: float = 5.0):
    box = []
    worker = threading.Thread(target=lambda: box.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert box, "window assignment did not finish: it must take constant time"
    return box[0]


@pytest.mark.parametrize("ts", [1e17, 1e30, -1e30, 1e300, -1e300, 2.0**60 + 2.0**8])
@pytest.mark.parametrize("shape", [(1.0, 1.0), (0.1, 0.1), (2.0, 1.0), (0.3, 0.1)])
def test_a_huge_time_is_placed_at_once_in_windows_that_hold_it(ts, shape):
    size, slide = shape
    starts = _finishes(lambda: starts_of(ts, size, slide))
    assert starts and starts == sorted(set(starts))
    for start in starts:
        assert start <= ts <= end_of_start(start, size, slide)
    if size == slide:
        assert len(starts) == 1


def test_a_pipeline_with_decimal_tumbling_windows_counts_each_record_once():
    import pyarrow as pa

    from gyreflow.api import ArrowSource, Environment, SizeTumblingWindow, Tumbling

    stamps = [round(i * 0.1, 1) for i in range(40)]
    pipeline = Environment.local(progress=False).pipeline("decimal-windows")

    @pipeline.task
    def job(ctx):
        rows = (ctx.source([(t, "a") for t in stamps], SizeTumblingWindow(5), parallelism=1)
                .with_timestamps(lambda r: r[0]).key_by(lambda r: r[1]).window(Tumbling(0.1))
                .apply(lambda key, records, window: sorted(r[0] for r in records)))
        rows.collect("rows")
        table = pa.table({"ts": stamps, "k": ["a"] * 40})
        columns = (ctx.source(ArrowSource(table), SizeTumblingWindow(5), parallelism=1)
                   .with_timestamps("ts").key_by("k").window(Tumbling(0.1)).count())
        columns.collect("columns")
        columns.late().collect("late")

    result = pipeline.execute()["job"]
    placed = sorted(t for r in result.output("rows") for t in r.value)
    assert placed == stamps
    assert all(r.start <= t < r.end for r in result.output("rows") for t in r.value)
    assert sorted((r.start, r.end, r.value) for r in result.output("columns")) == \
        sorted((r.start, r.end, len(r.value)) for r in result.output("rows"))
    assert result.output("late") == []
