"""The logged table of graph chunks: what its snapshots write, folded back by a restore, equals the
chunks the task holds, at every version a store keeps; and a window of few changes writes bytes in
proportion to them, not to the graph."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.graph import changelog
from gyreflow.runtime.dataflow.graph.chunks import add_window_input, chunk_key
from gyreflow.runtime.dataflow.graph.removals import apply_changes
from gyreflow.state.keys import logged
from gyreflow.state.keys.keyed import KeyedStateStore
from gyreflow.state.keys.keygroups import key_group_of

MP = 8


class VersionedDict:
    """A plain store: each version's written and removed keys, read back as of a version."""

    def __init__(self) -> None:
        self.versions: list[tuple[int, dict, set]] = []

    def write(self, version: int, written: dict, removed: set) -> None:
        # stored as bytes, as a real store does: nothing shared with the live table
        self.versions.append((version, pickle.dumps(written), set(removed)))

    def read(self, version: int) -> dict:
        data: dict = {}
        for at, written, removed in self.versions:
            if at > version:
                break
            for key in removed:
                data.pop(key, None)
            data.update(pickle.loads(written))
        return data


def plain_graph(chunks: dict) -> tuple[dict, list]:
    """The oracle's view of chunks: vertex -> given value, and the sorted edge halves."""
    vertices, halves = {}, []
    for chunk in chunks.values():
        vertices.update(zip(chunk[0].tolist(), chunk[1].tolist(), strict=True))
        values = [None] * len(chunk[2]) if chunk[4] is None else chunk[4].tolist()
        halves.extend(zip(chunk[2].tolist(), chunk[3].tolist(), values, chunk[5].tolist(),
                          strict=True))
    return vertices, sorted(halves, key=repr)


def same_chunks(left: dict, right: dict) -> bool:
    if set(left) != set(right):
        return False
    for key in left:
        a, b = left[key], right[key]
        for x, y in zip(a, b, strict=True):
            if (x is None) != (y is None):
                return False
            if x is not None and (x.dtype != y.dtype or x.tolist() != y.tolist()):
                return False
    return True


windows = st.lists(
    st.lists(st.one_of(
        st.tuples(st.just("edge"), st.integers(0, 30), st.integers(0, 30),
                  st.one_of(st.none(), st.integers(0, 9))),
        st.tuples(st.just("cut"), st.integers(0, 30), st.integers(0, 30), st.none()),
        st.tuples(st.just("vertex"), st.integers(0, 30), st.integers(0, 30), st.none()),
    ), max_size=12),
    min_size=1, max_size=40)


def window_records(changes: list) -> list:
    """``(role, batch)`` pairs of a window, as the graph operator receives them (undirected:
    every edge is an out-half at both ends)."""
    records = []
    for kind, a, b, value in changes:
        if kind == "edge":
            records.append(("edge", [(a, b, value, 1), (b, a, value, 1)] if a != b
                            else [(a, b, value, 1)]))
        elif kind == "cut":
            records.append(("edge", [(a, b, None, -1), (b, a, None, -1)] if a != b
                            else [(a, b, None, -1)]))
        else:
            records.append(("vertex", [(a, f"v{b}")]))
    return records


@settings(max_examples=60, deadline=None)
@given(windows, st.integers(1, 4), st.integers(1, 3), st.booleans(), st.data())
def test_every_version_folds_back_to_the_chunks_the_task_held(changes, level, level2, tight, data):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logged, "LEVEL", level)  # levels fill, merge and fold within a few windows
        patch.setattr(logged, "LEVEL2", level2)
        if tight:  # one fold a window: the others wait, in spare level-2 slots, or fold when full
            patch.setattr(logged, "FOLD_FLOOR", 1)
        check_versions(changes, data)


def check_versions(changes, data):
    state = KeyedStateStore(MP)
    table = changelog.chunk_table(state, "g:chunks")
    store = VersionedDict()
    held = {}
    for version, window in enumerate(changes, start=1):
        records = window_records(window)
        if any(kind == "cut" for kind, *_ in window):
            apply_changes(table.data, records, MP, False, range(MP), table.record)
        else:
            add_window_input(table.data, records, MP, False, range(MP), table.record)
        written, removed = table.take_changes()
        assert all(key_group_of(k, MP) in range(MP) for k in written)
        store.write(version, written, removed)
        held[version] = {k: list(v) for k, v in table.data.items()}
        if data.draw(st.booleans()):  # a restore of some earlier version, then on from there
            back = data.draw(st.integers(1, version))
            restored = KeyedStateStore(MP)
            other = changelog.chunk_table(restored, "g:chunks")
            other.data = store.read(back)
            other.after_restore(relaid=False)
            assert same_chunks(other.data, held[back])
            assert plain_graph(other.data) == plain_graph(held[back])
    for version in held:
        restored = changelog.chunk_table(KeyedStateStore(MP), "g:chunks")
        restored.data = store.read(version)
        restored.after_restore(relaid=False)
        assert same_chunks(restored.data, held[version])


def test_values_changes_fold_back():
    state = KeyedStateStore(MP)
    table = changelog.values_table(state, "g:values")
    key = chunk_key(3, MP)
    store = VersionedDict()
    table.data[key] = np.arange(10, dtype=np.int64)
    table.changed.add(key)
    store.write(1, *table.take_changes())
    expected = {1: np.arange(10)}
    values = np.arange(10, dtype=np.int64)
    rng = np.random.default_rng(5)
    for version in range(2, 120):
        if version % 7 == 0:
            drop = np.unique(rng.integers(0, len(values), 2))
            keep = np.ones(len(values), dtype=bool)
            keep[drop] = False
            values = values[keep]
            table.data[key] = values
            table.record(key, (changelog.DROP, changelog.pack(drop.astype(np.int64))))
        else:
            new = np.concatenate([values, rng.integers(0, 99, int(rng.integers(0, 3)))])
            at = np.unique(rng.integers(0, len(values), 3))
            new[at] = rng.integers(100, 200, len(at))
            table.data[key] = new
            table.record(key, changelog.set_change(at, new[at], new[len(values):]))
            values = new
        store.write(version, *table.take_changes())
        expected[version] = values.copy()
    for version, want in expected.items():
        restored = changelog.values_table(KeyedStateStore(MP), "g:values")
        restored.data = store.read(version)
        restored.after_restore(relaid=False)
        assert restored.data[key].tolist() == want.tolist()


def test_a_window_of_few_changes_writes_bytes_in_proportion_to_them():
    """Oracle: the bytes of the whole graph (window 1, written whole) against a later window's."""
    rng = np.random.default_rng(1)
    mp = 128
    state = KeyedStateStore(mp)
    table = changelog.chunk_table(state, "g:chunks")
    edges = rng.integers(0, 20_000, (50_000, 2))
    halves = [(int(a), int(b), None, 1) for a, b in edges] + [
        (int(b), int(a), None, 1) for a, b in edges]
    add_window_input(table.data, [("edge", halves)], mp, False, range(mp), table.record)
    whole = len(pickle.dumps(table.take_changes()))
    sizes = []
    for _ in range(100):
        few = rng.integers(0, 20_000, (100, 2))
        records = [("edge", [(int(a), int(b), None, 1) for a, b in few]
                    + [(int(b), int(a), None, 1) for a, b in few])]
        add_window_input(table.data, records, mp, False, range(mp), table.record)
        sizes.append(len(pickle.dumps(table.take_changes())))
    # 100 windows of 100 changes (0.2% of the graph's edges) write, folds included, about what
    # the changes weigh: far less than one whole graph each
    assert sum(sizes) / 100 < whole / 20
    assert sum(sizes) / (100 * 100) < 200  # bytes per change, folds amortised


def test_key_groups_changing_at_the_same_pace_fold_in_different_windows(monkeypatch):
    # 128 key groups, each with a large base and one small change every window: none reaches its
    # fold by size, so each folds when its slots are full; those must not all fill in one window
    # (it would write every base at once).
    groups = 128
    table = logged.LoggedTable("t", groups, lambda value, change: value + [change], len)
    keys = [chunk_key(g, groups) for g in range(groups)]
    for key in keys:
        table.data[key] = list(range(100_000))
        table.changed.add(key)
    table.take_changes()
    folds: dict[int, int] = {}
    level, level2 = 16, 1
    monkeypatch.setattr(logged, "LEVEL", level)  # a fold by count within ~600 windows
    monkeypatch.setattr(logged, "LEVEL2", level2)
    period = (level2 + 1) * (level + 1) ** 2
    windows = 2 * period + 2  # two folds by count of each group
    for window in range(1, windows):
        for key in keys:
            table.data[key].append(window)
            table.record(key, window)
        written, _ = table.take_changes()
        bases = sum(1 for key in keys if key in written)
        if bases:
            folds[window] = bases
    assert sum(folds.values()) >= 2 * groups  # every group folded twice in that many windows
    assert max(folds.values()) <= groups // 8, folds
    # after its first, a group folds every (LEVEL2 + 1) * (LEVEL + 1) ** 2 windows
    assert sum(folds.values()) < 3 * groups


value_changes = st.lists(st.one_of(
    st.tuples(st.just("set"), st.lists(st.integers(0, 40), max_size=4),
              st.lists(st.integers(-5, 5), max_size=6), st.booleans()),
    st.tuples(st.just("drop"), st.lists(st.integers(0, 40), max_size=3), st.just([]),
              st.just(False))), max_size=30)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-9, 9), max_size=8), value_changes)
def test_a_run_of_value_changes_equals_them_applied_one_by_one(start, steps):
    """Oracle: a plain list edited change by change (appends, sets at positions, drops)."""
    plain = list(start)
    stored = np.asarray(start, dtype=np.int64)
    changes = []
    for kind, positions, new, floats in steps:
        if kind == "set":
            appended = np.asarray(new, dtype=np.float64 if floats else np.int64)
            plain.extend(appended.tolist())
            at = np.unique([p % len(plain) for p in positions]) if plain else np.zeros(0, int)
            values = np.asarray([7] * len(at), dtype=appended.dtype)
            for p in at.tolist():
                plain[p] = 7
            changes.append(changelog.set_change(at.astype(np.int64), values, appended))
        elif plain:
            drop = np.unique([p % len(plain) for p in positions]).astype(np.int64)
            plain = [v for i, v in enumerate(plain) if i not in set(drop.tolist())]
            changes.append((changelog.DROP, changelog.pack(drop)))
    one_by_one = stored
    for change in changes:
        one_by_one = changelog.apply_values_change(one_by_one, change)
    run = changelog.apply_values_changes(stored, changes)
    assert run.tolist() == one_by_one.tolist() == plain
    assert run.dtype == one_by_one.dtype


def test_folds_due_together_spread_over_windows_within_the_budget(monkeypatch):
    """64 key groups whose changes all come to twice their base's size in one window: a window's
    folds write at most the budget (one base past it at the most), every group folds within a few
    windows, and every version restores to the values the table held (oracle: lists kept by
    hand)."""
    monkeypatch.setattr(logged, "FOLD_FLOOR", 1)  # the budget is the bases' share alone
    groups = 64
    table = logged.LoggedTable("t", groups, lambda value, change: value + [change],
                               lambda value: 100 * len(value))
    keys = [chunk_key(g, groups) for g in range(groups)]
    store = VersionedDict()
    held = {}
    for key in keys:
        table.data[key] = list(range(1000))  # a base of 100,000 "bytes"
        table.changed.add(key)
    store.write(1, *table.take_changes())
    budget = groups * 100_000 // logged.FOLD_SHARE  # two bases a window
    bases_by_window, folded = {}, set()
    for window in range(2, 100):
        for key in keys:
            change = bytes(250_000) if window == 2 else window.to_bytes(4, "little")
            table.data[key] = table.data[key] + [change]
            table.record(key, change)
        written, removed = table.take_changes()
        store.write(window, written, removed)
        held[window] = {key: list(value) for key, value in table.data.items()}
        bases_by_window[window] = [key for key in keys if key in written]
        folded.update(bases_by_window[window])
    # from window 2 every group's changes weigh more than twice its base: all are due at once
    assert max(map(len, bases_by_window.values())) * 100_000 <= budget + 100_000
    assert folded == set(keys)  # each folded, a few a window
    assert sum(1 for found in bases_by_window.values() if found) >= groups // 2
    for window in (2, 10, 40, 99):
        restored = logged.LoggedTable("t", groups, lambda value, change: value + [change],
                                      lambda value: 100 * len(value))
        restored.data = store.read(window)
        restored.after_restore(relaid=False)
        assert restored.data == held[window], window


def test_a_fold_past_the_budget_waits_in_spare_slots_then_folds_when_they_are_full(monkeypatch):
    """Every window a large value is written whole first, so the budget is spent before the
    logged groups' folds by count: they wait, their changes moving up into the spare level-2
    slots, and fold once those are full. Every version restores to the values held."""
    monkeypatch.setattr(logged, "LEVEL", 1)
    monkeypatch.setattr(logged, "LEVEL2", 1)
    monkeypatch.setattr(logged, "FOLD_FLOOR", 1)
    mp = 8

    def make():
        return logged.LoggedTable("t", mp, lambda value, change: value + [change], len)

    table = make()
    big, *small = sorted(chunk_key(g, mp) for g in range(3))  # ``big`` is taken first
    store, held = VersionedDict(), {}
    most_slots, folds = 0, 0
    for window in range(1, 200):
        table.data[big] = list(range(10_000 + window))
        table.changed.add(big)  # written whole, unlogged: it spends the window's budget
        for key in small:
            if window == 1:
                table.data[key] = []
                table.changed.add(key)
            else:
                table.data[key] = table.data[key] + [window]
                table.record(key, window)
        before = {key: len(table.logs.get(key, [[], [], []])[2]) for key in small}
        written, removed = table.take_changes()
        store.write(window, written, removed)
        held[window] = {key: list(value) for key, value in table.data.items()}
        for key in small:
            most_slots = max(most_slots, len(table.logs[key][2]))
            folds += key in written and window > 1 and before[key] > 0
    assert most_slots == logged.LEVEL2 + logged.SPARE  # the spare slots filled ...
    assert folds  # ... and the groups folded when they were full
    for window in (1, 50, 120, 199):
        restored = make()
        restored.data = store.read(window)
        restored.after_restore(relaid=False)
        assert restored.data == held[window], window
