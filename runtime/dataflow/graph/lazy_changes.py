"""A window's changes to a task's graph chunks recorded without reading them: the partition knows
which vertices the chunks hold and where, so each changed chunk becomes a ``PendingChunk`` (the
chunk before and the logged change) and the window's cost is its changes, not the chunks' sizes.

The changes are the ones ``chunks.add_window_input`` and ``removals.apply_changes`` make, logged
alike (``changelog``); a window with vertex removals, detached vertices or blocks of arrays takes
that path instead, since it reshapes the chunks."""

from __future__ import annotations

from operator import itemgetter

import attrs
import numpy as np

from gyreflow.plan.graph_changes import REMOVE_VERTEX, RemoveVertex
from gyreflow.runtime.dataflow.graph.arrays import concat_ids, distinct, id_array, key_groups
from gyreflow.runtime.dataflow.graph.change_batches import add_changes, match_changes
from gyreflow.runtime.dataflow.graph.changelog import add_change, later, match_change
from gyreflow.runtime.dataflow.graph.chunks import chunk_key
from gyreflow.runtime.dataflow.graph.removals import _split

_NO_IDS = np.zeros(0, np.int64)


@attrs.define
class LoggedWindow:
    """What a window did to the chunks (recorded lazily) and what the partition needs next."""

    changed: set  # the chunk keys that changed
    touched: np.ndarray  # the ids the window's input touched
    added: tuple  # the edge halves added: (vertex ids, other ends, sides, values or None)
    new: dict  # key group -> the vertices the group gained, in the order its chunk has them
    removals: tuple | None = None  # the removal halves (vertex ids, other ends, sides)
    removed: int = 0  # how many halves the removals took
    lost: np.ndarray = _NO_IDS  # the ids of the removal halves' vertices
    ensured: np.ndarray = _NO_IDS  # ends of dropped additions, created when missing
    given: np.ndarray = _NO_IDS  # the vertices the vertex stream gave values
    given_values: np.ndarray | None = None  # their values


def can_log(records: list) -> bool:
    """Whether a window's input can be logged without reading the chunks: tuples only (no blocks
    of arrays), no vertex removals and no detached vertices."""
    for role, batch in records:
        if not batch:
            continue
        if role == "detach":
            return False
        if role in ("edge", "vertex") and not (type(batch[0]) is tuple
                                               and type(batch[-1]) is tuple):
            return False
        if role == "edge" and REMOVE_VERTEX in map(_SIDE, batch):  # a vertex removal as a half
            return False
        if role == "vertex" and any(type(value) is RemoveVertex for _, value in batch):
            return False
    return True


_SIDE = itemgetter(3)


def log_window(chunks: dict, records: list, part, max_parallelism: int, log) -> LoggedWindow:
    """Record a window's input (removals first, as ``removals.apply_changes`` orders them, then
    additions) on the chunks of the task whose partition is ``part``; the removals are applied
    to ``part`` here (it says which of them took a half: only those are logged), the additions
    are left to ``Partition.extend``."""
    additions, removal_halves, _, _ = _split(records)
    changed: set = set()
    removals, lost, removed = None, _NO_IDS, 0
    if removal_halves:
        vids = id_array([h[0] for h in removal_halves])
        others = id_array([h[1] for h in removal_halves])
        sides = -np.array([h[3] for h in removal_halves], dtype=np.int8)
        removals, lost = (vids, others, sides), vids
        removed, matched = part.remove(vids, others, sides)
        vids, others, sides = vids[matched], others[matched], sides[matched]
        groups = key_groups(vids, max_parallelism)
        order = np.argsort(groups, kind="stable")
        bounds = np.searchsorted(groups[order], np.arange(max_parallelism + 1))
        present = distinct(groups).tolist()
        encoded = match_changes(present, vids[order], others[order], sides[order], bounds)
        for i, group in enumerate(present):
            key = chunk_key(group, max_parallelism)
            chunk = chunks.get(key)
            if chunk is None:  # nothing to remove there
                continue
            if encoded is None:
                at = order[bounds[group]:bounds[group + 1]]
                change = match_change(vids[at], others[at], sides[at])
            else:
                change = encoded[i]
            chunks[key] = later(chunk, change)
            log(key, change)
            changed.add(key)
    window = _log_additions(chunks, additions, part, max_parallelism, log)
    window.changed |= changed
    window.removals, window.lost, window.removed = removals, lost, removed
    window.touched = concat_ids([lost, window.touched])
    window.ensured = id_array([vid for role, batch in additions if role == "ensure"
                               for vid in batch])
    return window


def _log_additions(chunks: dict, records: list, part, max_parallelism: int,
                   log) -> LoggedWindow:
    """``chunks.add_window_input`` for tuples, with the chunks' vertices read from ``part``."""
    given: dict = {}
    halves: list = []
    ensured: list = []
    for role, batch in records:
        if not batch:
            continue
        if role == "ensure":
            ensured.extend(batch)
        elif role == "vertex":
            given.update(batch)
        elif role == "edge":
            halves.extend(batch)
    vertex_ids = id_array(list(given))
    values = None
    if halves:
        vids = id_array(list(map(itemgetter(0), halves)))
        others = id_array(list(map(itemgetter(1), halves)))
        listed = list(map(itemgetter(2), halves))
        if listed.count(None) != len(listed):
            values = np.empty(len(listed), dtype=object)
            values[:] = listed
        sides = np.array(list(map(itemgetter(3), halves)), dtype=np.int8)
    else:
        vids, others, sides = _NO_IDS, _NO_IDS, np.zeros(0, np.int8)
    ensured_ids = id_array(ensured)
    touched = concat_ids([vertex_ids, vids, ensured_ids])
    added = (vids, others, sides, values)
    window = LoggedWindow(set(), touched, added, {}, given=vertex_ids)
    if len(vertex_ids):
        window.given_values = np.empty(len(vertex_ids), dtype=object)
        window.given_values[:] = list(given.values())
    if not len(touched):
        return window
    # Every id with its key group, in the order a chunk meets them: its vertex records, then
    # its halves, then the ensured ends; the first sighting of each id decides its place.
    groups = key_groups(touched, max_parallelism)
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(max_parallelism + 1))
    ordered = touched[order]
    _, first = np.unique(ordered, return_index=True) if ordered.dtype != object else (
        None, np.array(sorted({v: i for i, v in reversed(list(enumerate(ordered.tolist())))
                               }.values()), dtype=np.int64))
    first = np.sort(first)
    candidates = ordered[first]
    positions, found = part.index.lookup(candidates)
    is_new = np.zeros(len(ordered), dtype=bool)
    is_new[first[~found]] = True
    if not len(vertex_ids) and _log_batched(chunks, window, groups, order, ordered, is_new,
                                            max_parallelism, log):
        return window
    block = {group: i for i, group in enumerate(part.groups)}
    n_vertices, n_halves = len(vertex_ids), len(vids)
    for group in distinct(groups).tolist():
        lo, hi = bounds[group], bounds[group + 1]
        at = order[lo:hi]  # positions in touched: vertex records, halves, ensured
        new = ordered[lo:hi][is_new[lo:hi]]
        half_at = at[(at >= n_vertices) & (at < n_vertices + n_halves)] - n_vertices
        vertex_at = at[at < n_vertices]
        key = chunk_key(group, max_parallelism)
        given_at, given_values = _NO_IDS, None
        if len(vertex_at):
            ids_here = vertex_ids[vertex_at]
            i = block.get(group)
            start, size = (0, 0) if i is None else (int(part.offsets[i]),
                                                    int(part.offsets[i + 1] - part.offsets[i]))
            where, present = part.index.lookup(ids_here)
            given_at = np.where(present, where - start, 0)
            if not present.all():
                fresh = {v: size + k for k, v in enumerate(new.tolist())}
                given_at[~present] = [fresh[v] for v in ids_here[~present].tolist()]
            given_values = np.empty(len(ids_here), dtype=object)
            given_values[:] = [given[v] for v in ids_here.tolist()]
        change = add_change(new, given_at, given_values, vids[half_at], others[half_at],
                            None if values is None else values[half_at], sides[half_at])
        chunks[key] = later(chunks.get(key), change)
        log(key, change)
        window.changed.add(key)
        if len(new):
            new_given = np.full(len(new), None, dtype=object)
            if given:
                new_given[:] = [given.get(v) for v in new.tolist()]
            window.new[group] = (new, new_given)
    return window


def _log_batched(chunks: dict, window: LoggedWindow, groups: np.ndarray, order: np.ndarray,
                 ordered: np.ndarray, is_new: np.ndarray, max_parallelism: int, log) -> bool:
    """``_log_additions``' loop for a window without vertex records, its changes encoded for all
    key groups at once (``change_batches``); False (nothing done) when they cannot be."""
    vids, others, sides, values = window.added
    mp = max_parallelism
    steps = np.arange(mp + 1)
    half_groups = groups[:len(vids)]  # no vertex records: the halves come first in ``touched``
    half_order = np.argsort(half_groups, kind="stable")
    half_bounds = np.searchsorted(half_groups[half_order], steps)
    new = ordered[is_new]
    new_bounds = np.searchsorted(groups[order][is_new], steps)
    present = distinct(groups).tolist()
    encoded = add_changes(present, new, new_bounds, vids[half_order], others[half_order],
                          sides[half_order], None if values is None else values[half_order],
                          half_bounds)
    if encoded is None:
        return False
    for group, change in zip(present, encoded, strict=True):
        key = chunk_key(group, mp)
        chunks[key] = later(chunks.get(key), change)
        log(key, change)
        window.changed.add(key)
        lo, hi = int(new_bounds[group]), int(new_bounds[group + 1])
        if hi > lo:
            window.new[group] = (new[lo:hi], np.full(hi - lo, None, dtype=object))
    return True
