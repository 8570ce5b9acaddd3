"""A changing graph kept at the cost of its changes: the CSR matrices as a base plus the rows,
columns and entries changed since (``delta_csr``), read without merging and merged now and then;
id indexes over positions that move (``positions``); runs of logged chunk changes applied in one
pass (``chunk_runs``) and a window's changes encoded for every key group at once
(``change_batches``). Each is checked against plain-Python lists or the one-by-one path, and a
version restored from its logged changes after merges against a loop over the edges."""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.runtime.dataflow.graph.arrays import copied, csr
from gyreflow.runtime.dataflow.graph.change_batches import add_changes, match_changes
from gyreflow.runtime.dataflow.graph.changelog import (
    PendingChunk,
    add_change,
    apply_chunk_change,
    apply_chunk_changes,
    match_change,
)
from gyreflow.runtime.dataflow.graph.chunks import add_window_input, chunk_key
from gyreflow.runtime.dataflow.graph.delta_csr import DeltaCsr
from gyreflow.runtime.dataflow.graph.lazy_changes import log_window
from gyreflow.runtime.dataflow.graph.partition import Partition
from gyreflow.runtime.dataflow.graph.positions import ShiftedIndex, inserted

MP = 8
_OP = st.tuples(st.sampled_from(["rows", "columns", "add", "add", "remove", "merge"]),
                st.integers(0, 10**6), st.integers(1, 4))


def _insert_points(rng: random.Random, size: int, count: int) -> list[int]:
    return sorted(rng.randrange(size + 1) for _ in range(count))


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(_OP, max_size=30), merge_always=st.booleans(), seed=st.integers(0, 99))
def test_a_delta_csr_lists_every_row_as_a_plain_loop_does(ops, merge_always, seed):
    rng = random.Random(seed)
    n = m = 6
    lists = [[(rng.randrange(m), float(rng.randrange(1, 9)))] * rng.randrange(3) for _ in range(n)]
    rows = np.array([r for r, row in enumerate(lists) for _ in row], dtype=np.int64)
    cols = np.array([c for row in lists for c, _ in row], dtype=np.int64)
    data = np.array([w for row in lists for _, w in row])
    store = DeltaCsr(csr(rows, cols, data, (n, m)))
    if merge_always:
        store.floor = 0  # every change makes a merge due
    for kind, pick, count in ops:
        rng.seed(pick)
        if kind == "rows":
            points = _insert_points(rng, len(lists), count)
            store.insert_rows(np.array(points, dtype=np.int64))
            for i, point in enumerate(points):
                lists.insert(point + i, [])
        elif kind == "columns":
            points = _insert_points(rng, m, count)
            store.insert_columns(np.array(points, dtype=np.int64))
            lists = [[(c + sum(p <= c for p in points), w) for c, w in row] for row in lists]
            m += count
        elif kind == "add" and lists:
            added = [(rng.randrange(len(lists)), rng.randrange(m), float(rng.randrange(1, 9)))
                     for _ in range(count * 2)]
            store.append(np.array([a[0] for a in added]), np.array([a[1] for a in added]),
                         np.array([a[2] for a in added]))
            for r, c, w in added:
                lists[r].append((c, w))
        elif kind == "remove" and lists:
            pairs = []
            for _ in range(count):
                r = rng.randrange(len(lists))
                if lists[r] and rng.random() < 0.7:
                    pairs.append((r, rng.choice(lists[r])[0]))
                else:
                    pairs.append((r, rng.randrange(m)))
            gone, matched = store.remove(np.array([p[0] for p in pairs]),
                                         np.array([p[1] for p in pairs]))
            hit = [any(c == col for c, _ in lists[r]) for r, col in pairs]
            wanted = set(pairs)
            expected_gone = sum(1 for r, row in enumerate(lists) for c, _ in row
                                if (r, c) in wanted)
            lists = [[(c, w) for c, w in row if (r, c) not in wanted]
                     for r, row in enumerate(lists)]
            assert (gone, matched.tolist()) == (expected_gone, hit)
        elif kind == "merge":
            store.merged()
        assert store.shape == (len(lists), m)
        assert store.degree().tolist() == [len(row) for row in lists]
        asked = np.array(rng.sample(range(len(lists)), min(3, len(lists))) * 2, dtype=np.int64)
        r, c, w = store.entries(asked)
        assert list(zip(r.tolist(), c.tolist(), w.tolist(), strict=True)) == [
            (int(a), col, weight) for a in asked for col, weight in lists[a]]
    merged = store.merged()
    assert merged.shape == (len(lists), m)
    assert [list(zip(merged.indices[merged.indptr[r]:merged.indptr[r + 1]].tolist(),
                     merged.data[merged.indptr[r]:merged.indptr[r + 1]].tolist(), strict=True))
            for r in range(len(lists))] == lists


def test_ids_are_found_at_their_positions_after_insertions_and_new_indexes():
    rng = random.Random(3)
    ids = list(range(0, 400, 2))
    index = ShiftedIndex(np.array(ids, dtype=np.int64))
    fresh = 1001
    for _ in range(60):
        points = np.array(_insert_points(rng, len(ids), rng.randrange(1, 12)), dtype=np.int64)
        more = np.arange(fresh, fresh + len(points), dtype=np.int64)
        fresh += len(points)
        everything = inserted(np.array(ids, dtype=np.int64), points, more)
        ids = everything.tolist()
        index.insert(points, more, everything)
        query = np.array(rng.sample(ids, 20) + [1, 3, 10**9], dtype=np.int64)
        positions, found = index.lookup(query)
        assert found.tolist() == [True] * 20 + [False] * 3
        assert positions[:20].tolist() == [ids.index(v) for v in query[:20].tolist()]



_REPAIR_VALUE = np.dtype([("value", np.float64), ("id", np.int64), ("parent", np.int64),
                          ("link", np.int8)])  # unaligned, as a repairing program's values are


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.tuples(st.floats(allow_nan=False), st.integers(-2**63, 2**63 - 1),
                               st.integers(-5, 5), st.integers(-128, 127)), max_size=12),
       inserts=st.lists(st.tuples(st.integers(0, 12), st.floats(allow_nan=False),
                                  st.integers(-9, 9)), max_size=8))
def test_structured_values_take_insertions_and_copies_as_a_list_does(rows, inserts):
    array = np.array(rows, dtype=_REPAIR_VALUE)
    inserts = sorted((min(at, len(rows)), value, i) for at, value, i in inserts)
    points = np.array([at for at, _, _ in inserts], dtype=np.int64)
    items = np.array([(value, i, i, 1) for _, value, i in inserts], dtype=_REPAIR_VALUE)
    expected = list(rows)
    for offset, (at, value, i) in enumerate(inserts):  # each before the item at ``at`` was
        expected.insert(at + offset, (value, i, i, 1))
    out = inserted(array, points, items)
    assert out.dtype == _REPAIR_VALUE and out.tolist() == expected
    copy = copied(out)
    assert copy.dtype == _REPAIR_VALUE and copy.tolist() == expected
    if len(copy):
        copy["parent"][0] += 1  # a copy: the original keeps its values
        assert out.tolist() == expected

def _halves(a, b, value, removal):
    side = -1 if removal else 1
    return [(a, b, value, side)] + ([(b, a, value, side)] if a != b else [])


def _run(chunks: dict, part: Partition, windows: list, logged: dict, adjacency: dict,
         reads: list) -> None:
    """Log ``windows`` on the chunks, follow them in ``part``, and check what ``part`` reads
    without merging against ``adjacency`` (vertex -> other ends in arrival order) each window."""
    for batch in windows:
        records = [("edge", [h for a, b, v, removal in batch for h in _halves(a, b, v, removal)])]
        window = log_window(chunks, records, part, MP,
                            lambda key, change: logged[key].append(change))
        assert part.extend(window.added, chunks, None, new=window.new)
        for a, b, _, removal in batch:
            if removal:
                adjacency[a] = [o for o in adjacency[a] if o != b]
                adjacency[b] = [o for o in adjacency[b] if o != a]
        for i, (a, b, _, removal) in enumerate(batch):
            later = {(x, y) for x, y, _, r in batch[i + 1:] if r}
            if not removal and (a, b) not in later and (b, a) not in later:
                adjacency[a].append(b)
                if a != b:
                    adjacency[b].append(a)
        rows = np.arange(part.n)
        r, c, _ = part.edges(rows, "out")
        got = defaultdict(list)
        for row, column in zip(r.tolist(), c.tolist(), strict=True):
            got[int(part.ids[row])].append(int(part.columns_ids[column]))
        assert {v: o for v, o in got.items() if o} == {v: o for v, o in adjacency.items() if o}
        assert part.out_degree.tolist() == [len(adjacency[int(v)]) for v in part.ids]
        reads.append(part._out.changed())


def test_a_partition_followed_over_windows_with_merges_restores_from_its_logged_changes():
    rng = random.Random(5)
    first = [(v, (v * 7 + 1) % 30, rng.randrange(1, 5), False) for v in range(30)]
    chunks: dict = {}
    add_window_input(chunks, [("edge", [h for a, b, v, r in first for h in _halves(a, b, v, r)])],
                     MP, False)
    base = {key: list(chunk) for key, chunk in chunks.items()}
    part = Partition([(g, chunks[chunk_key(g, MP)]) for g in range(MP)
                      if chunk_key(g, MP) in chunks], False, 1, MP)
    part._out.floor = 40  # merges every few windows, not every one
    adjacency: dict = defaultdict(list)
    for a, b, _, _ in first:
        adjacency[a].append(b)
        if a != b:
            adjacency[b].append(a)
    present = {(min(a, b), max(a, b)) for a, b, _, _ in first}
    windows = []
    fresh = 30
    for _ in range(25):
        batch = []
        for _ in range(8):
            if present and rng.random() < 0.3:
                a, b = rng.choice(sorted(present))
                present.discard((a, b))
                batch.append((a, b, None, True))
            else:
                a = fresh if rng.random() < 0.3 else rng.randrange(fresh)
                fresh += a == fresh
                b = rng.randrange(fresh)
                present.add((min(a, b), max(a, b)))
                batch.append((a, b, rng.randrange(1, 5), False))
        windows.append(batch)
    logged: dict = defaultdict(list)
    reads: list = []
    _run(chunks, part, windows, logged, adjacency, reads)
    assert False in reads and True in reads  # some windows read merged, others base + changes
    restored = {}
    for key in set(base) | set(logged):
        one_by_one = base.get(key)
        for change in logged[key]:
            one_by_one = apply_chunk_change(one_by_one, change)
        in_a_run = apply_chunk_changes(base.get(key), logged[key])
        assert [np.asarray(a).tolist() for a in in_a_run if a is not None] == [
            np.asarray(a).tolist() for a in one_by_one if a is not None]
        restored[key] = in_a_run
    again = Partition([(g, restored[chunk_key(g, MP)]) for g in range(MP)
                       if chunk_key(g, MP) in restored], False, 1, MP)
    merged = part.out_edges
    assert again.ids.tolist() == part.ids.tolist()
    assert (again.out_edges.indptr.tolist(), again.out_edges.indices.tolist(),
            again.out_edges.data.tolist()) == (merged.indptr.tolist(), merged.indices.tolist(),
                                               merged.data.tolist())


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 6),
                                                                  st.integers(0, 6)),
                                                        min_size=1, max_size=5)),
                      min_size=1, max_size=12))
def test_a_run_of_logged_changes_leaves_the_chunk_one_by_one_leaves(steps):
    chunk = [np.array([0, 1], dtype=np.int64), np.array([None, "g"], dtype=object),
             np.array([0, 1, 0], dtype=np.int64), np.array([1, 0, 2], dtype=np.int64), None,
             np.array([1, 1, 3], dtype=np.int8)]
    changes = []
    for removal, pairs in steps:
        vids = np.array([a for a, _ in pairs], dtype=np.int64)
        others = np.array([b for _, b in pairs], dtype=np.int64)
        sides = np.array([1 + 2 * (a % 2) for a, _ in pairs], dtype=np.int8)
        if removal:
            changes.append(match_change(vids, others, sides))
        else:
            new = np.array(sorted({int(v) for v in vids} - {0, 1}), dtype=np.int64)
            changes.append(add_change(new, np.zeros(0, np.int64), None, vids, others, None,
                                      sides))
    one_by_one = chunk
    for change in changes:
        one_by_one = apply_chunk_change(one_by_one, change)
    pending = PendingChunk(chunk, tuple(changes))
    assert [np.asarray(a).tolist() for a in pending if a is not None] == [
        np.asarray(a).tolist() for a in one_by_one if a is not None]


_HALF = st.tuples(st.integers(0, 6), st.integers(0, 6), st.sampled_from([1, 3]))


@settings(max_examples=150, deadline=None)
@given(base_halves=st.lists(_HALF, max_size=6), weighted=st.booleans(), wide=st.booleans(),
       steps=st.lists(st.tuples(st.booleans(), st.lists(_HALF, min_size=0, max_size=5),
                                st.lists(st.integers(7, 12), max_size=2, unique=True)),
                      min_size=2, max_size=14))
def test_a_run_of_stored_changes_leaves_the_chunk_a_plain_list_of_halves_would(
        base_halves, weighted, wide, steps):
    """Pending changes applied as one run (the compact path for 4-byte ids, the decoding path
    for ids beyond them) against a list of (vertex, other end, side, value) with each change
    applied in order: an add appends, a removal takes every equal half there when it came."""
    shift = 2**40 if wide else 0  # 8-byte ids: the run goes the decoding way
    value_of = (lambda a, b: a * 10 + b + 1) if weighted else (lambda a, b: None)
    ids = sorted({v for v, _, _ in base_halves} | {0})
    model_ids = list(ids)
    model = [(v, o, s, value_of(v, o)) for v, o, s in base_halves]
    chunk = [np.array([v + shift for v in ids], dtype=np.int64),
             np.full(len(ids), None, dtype=object),
             np.array([v + shift for v, _, _ in base_halves], dtype=np.int64),
             np.array([o + shift for _, o, _ in base_halves], dtype=np.int64),
             (np.array([value_of(v, o) for v, o, _ in base_halves], dtype=object)
              if weighted else None),
             np.array([s for _, _, s in base_halves], dtype=np.int8)]
    changes = []
    for removal, halves, fresh in steps:
        vids = np.array([v + shift for v, _, _ in halves], dtype=np.int64)
        others = np.array([o + shift for _, o, _ in halves], dtype=np.int64)
        sides = np.array([s for _, _, s in halves], dtype=np.int8)
        if removal:
            changes.append(match_change(vids, others, sides))
            gone = set(halves)
            model = [h for h in model if h[:3] not in gone]
        else:
            new = [v for v in fresh if v not in model_ids]
            model_ids.extend(new)
            values = (np.array([value_of(v, o) for v, o, _ in halves], dtype=object)
                      if weighted else None)
            changes.append(add_change(np.array([v + shift for v in new], dtype=np.int64),
                                      np.zeros(0, np.int64), None, vids, others, values, sides))
            model.extend((v, o, s, value_of(v, o)) for v, o, s in halves)
    if wide:  # what has ids is stored with 8-byte ones
        assert all(change[1] == 8 for change in changes if len(change) > 10)
    pending = PendingChunk(chunk, tuple(changes))
    got_ids, _, got_v, got_o, got_values, got_s = pending.settled()
    assert (got_ids - shift).tolist() == model_ids
    values = [None] * len(got_v) if got_values is None else got_values.tolist()
    assert list(zip((got_v - shift).tolist(), (got_o - shift).tolist(), got_s.tolist(), values,
                    strict=True)) == model


def test_changes_encoded_for_all_key_groups_at_once_are_the_bytes_of_each_group_alone():
    rng = np.random.default_rng(2)
    groups = np.sort(rng.integers(0, MP, 40))
    vids, others = rng.integers(0, 1000, 40), rng.integers(0, 1000, 40)
    sides = rng.choice([1, 3], 40).astype(np.int8)
    values = np.array(rng.integers(1, 9, 40).tolist(), dtype=object)
    new = np.sort(rng.choice(1000, 12, replace=False))
    new_groups = np.sort(rng.integers(0, MP, 12))
    steps = np.arange(MP + 1)
    bounds, new_bounds = np.searchsorted(groups, steps), np.searchsorted(new_groups, steps)
    present = sorted(set(groups.tolist()) | set(new_groups.tolist()))
    for weights in (None, values):
        batch = add_changes(present, new, new_bounds, vids, others, sides, weights, bounds)
        alone = [add_change(new[new_bounds[g]:new_bounds[g + 1]], np.zeros(0, np.int64), None,
                            vids[bounds[g]:bounds[g + 1]], others[bounds[g]:bounds[g + 1]],
                            None if weights is None else weights[bounds[g]:bounds[g + 1]],
                            sides[bounds[g]:bounds[g + 1]]) for g in present]
        assert batch == alone
    assert match_changes(present, vids, others, sides, bounds) == [
        match_change(vids[bounds[g]:bounds[g + 1]], others[bounds[g]:bounds[g + 1]],
                     sides[bounds[g]:bounds[g + 1]]) for g in present]
    assert add_changes(present, new, new_bounds, vids + 2**40, others, sides, None,
                       bounds) is None  # ids beyond 4 bytes: encoded group by group


def test_given_values_are_kept_only_once_a_vertex_has_one_and_read_as_a_dict_says():
    chunks: dict = {}
    add_window_input(chunks, [("edge", [h for a in range(12) for h in _halves(a, (a + 5) % 12, 1,
                                                                             False)])], MP, False)
    part = Partition([(g, chunks[chunk_key(g, MP)]) for g in range(MP)
                      if chunk_key(g, MP) in chunks], False, 1, MP)
    assert part._given is None  # edges only: no array of Nones is kept
    expected = dict.fromkeys(range(12))
    part.place({0: (np.array([40, 41]), np.array([None, None], dtype=object))})
    expected.update({40: None, 41: None})
    assert part._given is None
    assert part.given_at(np.arange(part.n)).tolist() == [None] * part.n
    part.set_given(np.array([3, 41]), np.array(["three", 41.5], dtype=object))
    expected.update({3: "three", 41: 41.5})
    part.place({1: (np.array([50]), np.array([{"name": "x"}], dtype=object)),
                2: (np.array([51]), np.array([None], dtype=object))})
    expected.update({50: {"name": "x"}, 51: None})
    positions, found = part.index.lookup(np.array(sorted(expected)))
    assert found.all()
    assert part.given[positions].tolist() == [expected[v] for v in sorted(expected)]
    assert part.given_at(positions).tolist() == part.given[positions].tolist()
    assert part.columns_ids is part.ids  # one task: the column ids are its vertex ids


@settings(max_examples=60, deadline=None)
@given(base=st.integers(0, 300), batches=st.lists(st.lists(st.integers(0, 10**6), max_size=12),
                                                  max_size=6), seed=st.integers(0, 2**16))
def test_stable_ids_and_current_positions_after_insertions_are_a_lists(base, batches, seed):
    """``Insertions`` against a list of stable ids in position order: ``current`` and ``stable``
    give the same answers for small queries (a search per item) and large ones (dense tables,
    made once per batch of insertions and read again)."""
    from gyreflow.runtime.dataflow.graph.positions import Insertions

    rng = random.Random(seed)
    order = list(range(base))  # stable id at each current position
    insertions = Insertions(base)
    serial = 0
    for batch in batches:
        points = sorted(p % (len(order) + 1) for p in batch)
        for shift, point in enumerate(points):
            order.insert(point + shift, base + serial)
            serial += 1
        insertions.insert(np.array(points, dtype=np.int64))
        where = {stable: at for at, stable in enumerate(order)}
        for size in (1, 3, len(order) + 5):  # the last one reads the dense tables
            if not order:
                break
            positions = np.array([rng.randrange(len(order)) for _ in range(size)], dtype=np.int64)
            assert insertions.stable(positions).tolist() == [order[p] for p in positions]
            stable = np.array([order[p] for p in positions], dtype=np.int64)
            assert insertions.current(stable).tolist() == [where[s] for s in stable.tolist()]
        assert insertions.base_positions().tolist() == [where[b] for b in range(base)]
