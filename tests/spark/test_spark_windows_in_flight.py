"""Windows in flight on Spark in rounds mode: with ``max_flying_windows = 2`` the next window's
first stage runs while the previous window's keyed stage still runs (two Spark jobs at once), with
output equal to a plain-Python running count; with 1, rounds never overlap. Every task's start and
end of a window is logged by the tasks themselves (a system-wide monotonic clock), so overlap is read
off what ran, not inferred from timings."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from gyreflow.api import Environment, SizeTumblingWindow

LINES = [f"w{i % 11} v{(i * 7) % 13} u{i % 5}" for i in range(80)]
WINDOW = 10
pytestmark = pytest.mark.xdist_group("spark-windows-in-flight")


def logger(path: str, stage: str, pause: float = 0.0):
    def log(record, ctx):
        if pause:
            time.sleep(pause)
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{stage} {ctx.window} {time.monotonic()}\n")
        return record
    return log


def running_counts() -> dict[int, dict[str, int]]:
    totals: Counter = Counter()
    out = {}
    for window, start in enumerate(range(0, len(LINES), WINDOW), start=1):
        words = [w for line in LINES[start:start + WINDOW] for w in line.split()]
        totals.update(words)
        out[window] = {w: totals[w] for w in set(words)}
    return out


def run(tmp_path, flying: int) -> tuple[dict, dict[tuple[str, int], list[float]]]:
    log = str(tmp_path / f"log-{flying}.txt")
    env = Environment.from_config(None, {
        # parallelism 1 on 2 slots: a window's keyed stage leaves a slot for the next window's read
        "environment.type": "spark", "spark.master": "local[2]", "spark.mode": "rounds",
        "environment.parallelism": 1,
        "progress.enabled": False,
        "state.backend": "rocksdb", "state.path": str(tmp_path / f"state-{flying}"),
        "scheduler.max_flying_windows": flying})
    pipeline = env.pipeline(f"in-flight-{flying}")

    @pipeline.task
    def counts(ctx):
        (ctx.source(LINES, SizeTumblingWindow(WINDOW), parallelism=1)
         .map_with_context(logger(log, "read")).flat_map(str.split)
         .key_by().count().map_with_context(logger(log, "counted", pause=0.01)).collect("out"))

    result = pipeline.execute()["counts"]
    got = {w: dict(records) for w, records in result.by_window("out").items()}
    times: dict[tuple[str, int], list[float]] = {}
    with open(log, encoding="utf-8") as handle:
        for line in handle:
            stage, window, at = line.split()
            times.setdefault((stage, int(window)), []).append(float(at))
    return got, times


def overlapping(times) -> list[int]:
    """Windows ``w`` whose keyed stage was still running when window ``w + 1`` was being read."""
    windows = sorted({w for _, w in times})
    return [w for w in windows if ("read", w + 1) in times and ("counted", w) in times
            and min(times[("read", w + 1)]) < max(times[("counted", w)])]


def test_two_windows_in_flight_overlap_and_count_exactly(tmp_path):
    expected = running_counts()
    one, one_times = run(tmp_path, 1)
    two, two_times = run(tmp_path, 2)
    assert one == expected
    assert two == expected
    assert overlapping(one_times) == [], "one window in flight: rounds one after the other"
    assert len(overlapping(two_times)) >= len(expected) // 2, overlapping(two_times)


def test_the_widest_round_is_the_heaviest_antichain():
    import random

    import networkx as nx

    from gyreflow.runtime.spark.round_order import widest

    rng = random.Random(5)
    for _ in range(60):
        n = rng.randint(1, 8)
        edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.3]
        parallelism = {v: rng.randint(1, 4) for v in range(n)}
        graph = nx.DiGraph(edges)
        graph.add_nodes_from(range(n))
        oracle = max(sum(parallelism[v] for v in chain) for chain in nx.antichains(graph) if chain)
        assert widest(parallelism, edges) == oracle


def test_rounds_in_flight_leave_a_slot_for_the_oldest():
    from gyreflow.runtime.spark.round_order import windows_in_flight

    for asked in range(1, 6):
        for slots in range(1, 9):
            for width in range(1, 5):
                rounds = windows_in_flight(asked, slots, width)
                assert 1 <= rounds <= asked
                assert rounds == 1 or slots > (rounds - 1) * width  # a slot stays free
                assert rounds == asked or slots <= rounds * width  # and no fewer than that allows
