"""The vectorised array kernels: key groups against ``key_group_of``, label histograms against ``Counter``."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from gyreflow.runtime.dataflow.graph.arrays import (
    id_array,
    key_groups,
    most_frequent,
    reduce_messages,
)
from gyreflow.state.keys.keygroups import key_group_of


def test_vectorised_key_groups_equal_key_group_of():
    rng = np.random.default_rng(11)
    ids = np.concatenate([rng.integers(-(2**63), 2**63 - 1, 500, dtype=np.int64),
                          np.array([0, 1, -1, 2**63 - 1, -(2**63)], dtype=np.int64)])
    for max_parallelism in (1, 7, 128, 1000):
        assert key_groups(ids, max_parallelism).tolist() == [
            key_group_of(int(v), max_parallelism) for v in ids]


@pytest.mark.parametrize("kind", ["small ints", "wide ints", "strings"])
def test_label_histograms_pick_the_most_frequent_label_like_counter(kind):
    rng = random.Random(13)
    size = 40
    positions = [rng.randrange(size) for _ in range(600)]
    raw = [rng.randrange(6) for _ in positions]
    labels = {"small ints": raw, "wide ints": [(-(2**62) if r % 2 else 2**62) + r for r in raw],
              "strings": [f"l{r}" for r in raw]}[kind]
    counts = [rng.randrange(1, 4) for _ in positions]
    expected: dict = {}
    for position, label, count in zip(positions, labels, counts, strict=True):
        expected.setdefault(position, Counter())[label] += count
    halves = len(positions) // 2
    pieces = []
    for lo, hi in ((0, halves), (halves, len(positions))):  # two senders, then the receiver
        p, v, c = reduce_messages("histogram", np.array(positions[lo:hi]),
                                  id_array(labels[lo:hi]), np.array(counts[lo:hi]), size)
        assert [(int(a), b) for a, b in zip(p, v.tolist(), strict=True)] == sorted(
            {(a, b) for a, b in zip(positions[lo:hi], labels[lo:hi], strict=True)})
        pieces.append((p, v, c))
    p, v, c = reduce_messages("histogram", np.concatenate([x[0] for x in pieces]),
                              np.concatenate([x[1] for x in pieces]),
                              np.concatenate([x[2] for x in pieces]), size)
    assert {(int(a), b): int(n) for a, b, n in zip(p, v.tolist(), c, strict=True)} == {
        (a, b): n for a, hist in expected.items() for b, n in hist.items()}
    chosen_at, chosen = most_frequent(p, v, c)
    best = {a: min(b for b, n in hist.items() if n == max(hist.values()))
            for a, hist in expected.items()}
    assert dict(zip(chosen_at.tolist(), chosen.tolist(), strict=True)) == best
