"""Running a one-task pipeline and the plain-Python oracles of its windows, for the operator tests."""

from __future__ import annotations

from collections import Counter


def run(env, build, name: str = "job"):
    """Run a single pipeline task built by ``build(ctx)`` and return its TaskResult."""
    pipeline = env.pipeline("operators")
    pipeline.task(build, name=name)
    return pipeline.execute()[name]


def chunks(items: list, size: int) -> list[list]:
    """The windows of ONE source task by definition: consecutive chunks of ``size`` records,
    no empty trailing window, and one empty window for an empty input."""
    out = [items[i:i + size] for i in range(0, len(items), size)]
    return out or [[]]


def as_multisets(by_window: dict[int, list]) -> dict[int, Counter]:
    return {window: Counter(records) for window, records in by_window.items()}


def expect(per_window: list[list]) -> dict[int, Counter]:
    """Oracle windows (a list, window 1 first) as ``{window id: Counter}``."""
    return {index + 1: Counter(records) for index, records in enumerate(per_window)}


LINES = [
    "the quick brown fox", "jumps over the lazy dog", "", "the dog barks",
    "a fox is quick", "the end", "über café naïve", "dog dog dog", "x",
    "quick quick", "brown", "lazy fox jumps",
]

PARALLELISM = [1, 4]
BATCH = [1, 3, 1024]
