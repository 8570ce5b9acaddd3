"""A task's graph as per-key-group chunks in state: a chunk holds the vertices of one key group (ids,
the values the vertex stream gave) and their edge halves (vertex, other end, edge value, side: 1 out,
3 in) in arrival order, stored under a key of its own key group; a window's records are folded into
them here (``add_window_input``), and ``partition`` builds the CSR partition from them."""

from __future__ import annotations

from functools import cache
from operator import itemgetter

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import (
    IdIndex,
    concat_ids,
    distinct,
    id_array,
    index_of,
    key_groups,
)
from gyreflow.runtime.dataflow.graph.changelog import add_change, add_to_chunk, empty_chunk
from gyreflow.state.keys.keygroups import key_group_of

OUT, IN = 1, 3


@cache
def _chunk_keys(max_parallelism: int) -> dict[int, int]:
    candidates = -np.arange(1, 64 * max_parallelism + 1, dtype=np.int64)
    groups = key_groups(candidates, max_parallelism)
    keys: dict[int, int] = {}
    for key, group in zip(candidates.tolist(), groups.tolist(), strict=True):
        keys.setdefault(group, key)
    k = len(candidates) + 1
    while len(keys) < max_parallelism:  # not reached for usual sizes: 64 tries per group
        keys.setdefault(key_group_of(-k, max_parallelism), -k)
        k += 1
    return keys

def chunk_key(group: int, max_parallelism: int) -> int:
    """A state key that falls in key group ``group``: the key of that group's chunk (a negative
    int; the chunks table holds nothing else)."""
    return _chunk_keys(max_parallelism)[group]

_NO_POSITIONS = np.zeros(0, np.int64)

def _objects(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array

def _first_seen(ids: np.ndarray) -> np.ndarray:
    if ids.dtype == np.int64:
        _, first = np.unique(ids, return_index=True)
        return ids[np.sort(first)]
    return id_array(list(dict.fromkeys(ids.tolist())))

def add_window_input(chunks: dict, records: list, max_parallelism: int, directed: bool = True,
                     owned: range | None = None, log=None) -> tuple[set, np.ndarray, tuple]:
    """Add a window's input (``(role, batch)`` pairs; role ``"ensure"``: ids of vertices to create
    when missing) to the chunks (chunk key -> chunk); returns
    the chunk keys that changed, the ids the input touched and the edge halves it added
    (``(vertex ids, other ends, sides, values or None)``). Vertex and edge *blocks* (arrays of
    many, broadcast to every task) contribute the vertices of the ``owned`` key groups. ``log(key,
    change)`` hears each chunk's change (``changelog``)."""
    given: dict = {}
    halves: list = []
    blocks: list = []
    ensured: list = []  # vertices to create when missing, their values left alone
    for role, batch in records:
        if not batch:
            continue
        if role == "ensure":
            ensured.extend(batch)
            continue
        tuples = type(batch[0]) is tuple and type(batch[-1]) is tuple
        if role == "vertex":
            if tuples:
                given.update(batch)
            else:
                for block in batch:
                    _add_vertex_block(given, block, max_parallelism, owned)
        elif role == "edge":
            if tuples:
                halves.extend(batch)
            else:
                blocks.extend(_edge_block_halves(block, directed, max_parallelism, owned)
                              for block in batch)
    vertex_ids = id_array(list(given))
    if halves:  # column by column: zip(*halves) over millions of tuples costs several times more
        values = list(map(itemgetter(2), halves))
        blocks.insert(0, (id_array(list(map(itemgetter(0), halves))),
                          id_array(list(map(itemgetter(1), halves))),
                          None if values.count(None) == len(values) else _objects(values),
                          np.array(list(map(itemgetter(3), halves)), dtype=np.int8)))
    vids = concat_ids([b[0] for b in blocks])
    others = concat_ids([b[1] for b in blocks])
    sides = np.concatenate([b[3] for b in blocks]) if blocks else np.zeros(0, np.int8)
    if any(b[2] is not None for b in blocks):
        values = np.concatenate([b[2] if b[2] is not None else np.full(len(b[0]), None, object)
                                 for b in blocks])
    else:
        values = None
    ensured_ids = id_array(ensured)
    touched = concat_ids([vertex_ids, vids, ensured_ids])
    added = (vids, others, sides, values)
    changed = set()
    vertex_groups, vertex_order, vertex_bounds = _grouped(vertex_ids, max_parallelism)
    half_groups, half_order, half_bounds = _grouped(vids, max_parallelism)
    ensured_groups, ensured_order, ensured_bounds = _grouped(ensured_ids, max_parallelism)
    ensured_ids = ensured_ids[ensured_order]
    vertex_ids = vertex_ids[vertex_order]
    vids, others, sides = vids[half_order], others[half_order], sides[half_order]
    if values is not None:
        values = values[half_order]
    for group in distinct(np.concatenate([vertex_groups, half_groups, ensured_groups])).tolist():
        key = chunk_key(group, max_parallelism)
        chunk = chunks.get(key)
        if chunk is None:
            chunk = empty_chunk()
        ids_here = vertex_ids[vertex_bounds[group]:vertex_bounds[group + 1]]
        lo, hi = half_bounds[group], half_bounds[group + 1]
        candidates = _first_seen(concat_ids([
            ids_here, vids[lo:hi], ensured_ids[ensured_bounds[group]:ensured_bounds[group + 1]]]))
        _, found = index_of(chunk[0]).lookup(candidates)
        new = candidates[~found]
        at = _NO_POSITIONS
        given_values = None
        if len(ids_here):
            at, present = index_of(chunk[0]).lookup(ids_here)
            if not present.all():  # a vertex the window brought: after the chunk's own
                more, _ = IdIndex(new).lookup(ids_here[~present])
                at[~present] = len(chunk[0]) + more
            given_values = _objects([given[v] for v in ids_here.tolist()])
        change = (new, at, given_values, vids[lo:hi], others[lo:hi],
                  None if values is None else values[lo:hi], sides[lo:hi])
        chunks[key] = add_to_chunk(chunk, *change)
        if log is not None:
            log(key, add_change(*change))
        changed.add(key)
    return changed, touched, added

def _owned(ids: np.ndarray, max_parallelism: int, owned: range | None) -> np.ndarray | None:
    """A mask of the ids in the ``owned`` key groups (None: all are)."""
    if owned is None or (owned.start == 0 and owned.stop >= max_parallelism):
        return None
    groups = key_groups(ids, max_parallelism)
    return (groups >= owned.start) & (groups < owned.stop)

def _add_vertex_block(given: dict, block, max_parallelism: int, owned: range | None) -> None:
    ids = id_array(block.ids)
    values = block.values
    keep = _owned(ids, max_parallelism, owned)
    if keep is not None:
        ids = ids[keep]
        values = None if values is None else np.asarray(values, dtype=object)[keep]
    if values is None:
        given.update(dict.fromkeys(ids.tolist()))
    else:
        given.update(zip(ids.tolist(), np.asarray(values, dtype=object).tolist(), strict=True))

def _edge_block_halves(block, directed: bool, max_parallelism: int, owned: range | None):
    """The edge halves of a block of edges, as arrays, those of the ``owned`` vertices only."""
    src, dst = id_array(block.src), id_array(block.dst)
    values = None if block.values is None else np.asarray(block.values)
    if directed:
        vids, others = concat_ids([src, dst]), concat_ids([dst, src])
        sides = np.concatenate([np.full(len(src), OUT, np.int8), np.full(len(dst), IN, np.int8)])
        both = None if values is None else np.concatenate([values, values])
    else:  # an undirected edge is an out-edge at both ends, a self-loop once
        other_end = np.asarray(src != dst, dtype=bool)
        vids, others = concat_ids([src, dst[other_end]]), concat_ids([dst, src[other_end]])
        sides = np.full(len(vids), OUT, np.int8)
        both = None if values is None else np.concatenate([values, values[other_end]])
    keep = _owned(vids, max_parallelism, owned)
    if keep is not None:
        vids, others, sides = vids[keep], others[keep], sides[keep]
        both = None if both is None else both[keep]
    if both is not None and both.dtype != object:
        both = both.astype(object)
    return vids, others, both, sides

def _grouped(ids: np.ndarray, max_parallelism: int):
    """The key groups present in ``ids``, the stable order that sorts ``ids`` by key group and the
    bounds of each group in that order (``bounds[g]:bounds[g + 1]``)."""
    groups = key_groups(ids, max_parallelism)
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(max_parallelism + 1))
    return distinct(groups), order, bounds
