"""A FileSink fsyncs what it stages only when the job's commits outlive the machine: with the memory
state backend (commits end with the process) a staged window need only outlive a killed process."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from gyreflow.api import Environment, FileSink, SizeTumblingWindow


def count_words(tmp_path, backend: str, monkeypatch) -> tuple[int, list[list[tuple]]]:
    """Run a cumulative word count into a FileSink; return (fsync calls, rows per window file)."""
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    lines = ["a b a", "c a", "b b d", "a"]
    out = tmp_path / f"out-{backend}"
    env = Environment.from_config(None, {
        "environment.type": "local", "environment.parallelism": 1, "environment.workers": 1,
        "progress.enabled": False, "state.backend": backend,
        "state.path": str(tmp_path / f"state-{backend}")})
    pipeline = env.pipeline(f"fsync-{backend}")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(lines, SizeTumblingWindow(2), parallelism=1)
         .flat_map(str.split).key_by().count().sink(FileSink(out)))

    pipeline.execute()
    windows = [sorted(tuple(json.loads(line)) for line in path.read_text().splitlines())
               for path in sorted(out.glob("window-*.jsonl"))]
    return len(synced), windows


def oracle(lines_per_window: list[list[str]]) -> list[list[tuple]]:
    counts: Counter = Counter()
    windows = []
    for lines in lines_per_window:
        words = " ".join(lines).split()
        counts.update(words)
        windows.append(sorted((word, counts[word]) for word in set(words)))
    return windows


EXPECTED = oracle([["a b a", "c a"], ["b b d", "a"]])


def test_memory_backend_stages_without_fsync(tmp_path, monkeypatch):
    synced, windows = count_words(tmp_path, "memory", monkeypatch)
    assert windows == EXPECTED
    assert synced == 0


@pytest.mark.parametrize("backend", ["rocksdb", "jdbc"])
def test_durable_backends_fsync_every_staged_window_and_its_summary(tmp_path, monkeypatch,
                                                                     backend):
    synced, windows = count_words(tmp_path, backend, monkeypatch)
    assert windows == EXPECTED
    # each window's file, with its summary (an attribute of the file, or a .sum where the file
    # system keeps none), and the store's own
    assert synced >= len(EXPECTED)
