"""Removals on a task's graph chunks (array programs): edge halves and vertices taken out of the
per-key-group chunks of ``partition``, in the order the window's streams carried them."""

from __future__ import annotations

from operator import itemgetter

import attrs
import numpy as np

from gyreflow.plan.graph_changes import REMOVE_VERTEX, RemoveVertex, VertexStillConnectedError
from gyreflow.runtime.dataflow.graph.arrays import concat_ids, distinct, id_array, key_groups
from gyreflow.runtime.dataflow.graph.changelog import (
    DROP_HALVES,
    DROP_VERTICES,
    drop_change,
    keep_halves,
    keep_vertices,
)
from gyreflow.runtime.dataflow.graph.chunks import add_window_input, chunk_key
from gyreflow.runtime.errors import DataError

_SIDE = itemgetter(3)


def has_removals(records: list) -> bool:
    """Whether a window's input (``(role, batch)`` pairs of tuples) removes anything."""
    for role, batch in records:
        if role == "detach" and batch:
            return True
        if not batch or type(batch[0]) is not tuple:
            continue
        if role == "edge":
            if min(map(_SIDE, batch)) <= 0:
                return True
        elif role == "vertex" and any(type(value) is RemoveVertex for _, value in batch):
            return True
    return False


def _split(records: list) -> tuple[list, list, list, list]:
    """The window's input as ``(additions, removal halves, removed vertices, detached vertices)``.

    Removals apply to the stored graph first, then the additions, then the vertex removals. That
    keeps the arrival order of every edge: an addition that a removal of the same half follows in
    the window is dropped (the removal takes it), one that follows the removal stays."""
    additions: list = []
    removals: list = []
    vertices: list = []
    detached: list = []
    last_removal: dict = {}
    position = 0
    for role, batch in records:
        if role == "vertex":
            kept = [vertex for vertex in batch if type(vertex[1]) is not RemoveVertex]
            vertices.extend(vertex[0] for vertex in batch if type(vertex[1]) is RemoveVertex)
            if kept:
                additions.append((role, kept, None))
        elif role == "edge":
            for half in batch:
                side = half[3]
                if side <= 0:
                    if side == REMOVE_VERTEX:
                        vertices.append(half[0])
                    else:
                        removals.append(half)
                        last_removal[(half[0], half[1], -side)] = position
                position += 1
            additions.append((role, batch, position - len(batch)))
        elif role == "detach":
            detached.extend(batch)
        else:
            additions.append((role, batch, None))
    kept_additions = []
    ensured = []  # the ends of dropped additions: an edge creates its vertices all the same
    for role, batch, first in additions:
        if role != "edge":
            kept_additions.append((role, batch))
            continue
        kept = []
        for at, half in enumerate(batch, first):
            if half[3] > 0:
                if last_removal.get((half[0], half[1], half[3]), -1) < at:
                    kept.append(half)
                else:
                    ensured.append(half[0])
        if kept:
            kept_additions.append((role, kept))
    if ensured:
        kept_additions.append(("ensure", ensured))
    return kept_additions, removals, vertices, detached


@attrs.define
class AppliedChanges:
    """What ``apply_changes`` did to a task's chunks."""

    changed: set  # the chunk keys that changed
    touched: np.ndarray  # the ids the window's input touched
    lost: np.ndarray  # the ids that lost an edge
    removed: int  # how many halves and vertices were removed
    kept: dict  # chunk key -> mask of the vertices kept, where vertices went (values follow)
    gone: list  # the removed vertices
    removals: tuple  # the removal halves applied, ``(vertex ids, other ends, sides)``
    added: tuple | None  # the halves added after them (``add_window_input``'s ``added``)
    ensured: np.ndarray  # ends of dropped additions, created when missing
    reshaped: bool  # vertices were removed (or came in blocks): positions may have moved
    given: np.ndarray  # the vertices the vertex stream gave values (added when missing)


def apply_changes(chunks: dict, records: list, max_parallelism: int, directed: bool,
                  owned, log=None) -> AppliedChanges:
    """Apply a window's input that removes something, with the effect of its arrival order
    (``_split``), then the detached vertices' edges and the vertex removals; ``log(key, change)``
    hears each chunk's change (``changelog``)."""
    additions, removals, vertices, detached = _split(records)
    changed, removed, lost = set(), 0, np.zeros(0, np.int64)
    if removals:
        changed, removed, lost = _remove_halves(chunks, removals, max_parallelism, log)
    touched = [lost]
    added = None
    if additions:
        more, ids, added = add_window_input(chunks, additions, max_parallelism, directed, owned,
                                            log)
        changed |= more
        touched.append(ids)
    if detached:
        more, count, neighbours = _detach(chunks, id_array(list(dict.fromkeys(detached))), log)
        changed |= more
        removed += count
        lost = concat_ids([lost, neighbours])
        touched.append(neighbours)
    kept, gone = (_remove_vertices(chunks, vertices, max_parallelism, log) if vertices
                  else ({}, []))
    changed |= set(kept)
    removed += len(gone)
    halves = (id_array([h[0] for h in removals]), id_array([h[1] for h in removals]),
              -np.array([h[3] for h in removals], dtype=np.int8))
    ensured = id_array([vid for role, batch in additions if role == "ensure" for vid in batch])
    given, blocks = vertex_record_ids(additions)
    reshaped = bool(detached or kept or blocks)
    return AppliedChanges(changed, concat_ids(touched), lost, removed, kept, gone, halves, added,
                          ensured, reshaped, given)


def refused_removal(vertex, error: Exception) -> DataError:
    """The one-line error of a ``RemoveVertex`` the graph refuses: the input asks for it, so a fix
    of the input (or ``detach=True`` where it is made) and a resume go on (``gyreflow run`` exit 5)."""
    return DataError(f"RemoveVertex({vertex!r}) refused: {error}")


def vertex_record_ids(records: list) -> tuple[np.ndarray, bool]:
    """The ids of a window's vertex records (``(role, batch)`` pairs), and whether vertices also
    came in blocks (arrays of many, not listed)."""
    ids: list = []
    blocks = False
    for role, batch in records:
        if role != "vertex" or not batch:
            continue
        if type(batch[0]) is tuple and type(batch[-1]) is tuple:
            ids.extend(record[0] for record in batch)
        else:
            blocks = True
    return id_array(ids), blocks


def _by_chunk(ids: np.ndarray, max_parallelism: int) -> dict[int, np.ndarray]:
    """Positions of ``ids`` grouped by the key of their chunk."""
    groups = key_groups(ids, max_parallelism)
    found: dict[int, np.ndarray] = {}
    for group in distinct(groups).tolist():
        found[chunk_key(group, max_parallelism)] = np.flatnonzero(groups == group)
    return found


def _remove_halves(chunks: dict, halves: list, max_parallelism: int,
                   log=None) -> tuple[set, int, np.ndarray]:
    """Remove every stored half equal to a removal half (vertex, other end, side)."""
    vids = id_array([h[0] for h in halves])
    changed, count = set(), 0
    for key, at in _by_chunk(vids, max_parallelism).items():
        chunk = chunks.get(key)
        if chunk is None:
            continue
        wanted = {(halves[i][0], halves[i][1], -halves[i][3]) for i in at.tolist()}
        stored_vids = chunk[2]
        candidates = np.flatnonzero(np.isin(stored_vids, id_array([w[0] for w in wanted])))
        if len(candidates) == 0:
            continue
        pairs = zip(stored_vids[candidates].tolist(), chunk[3][candidates].tolist(),
                    chunk[5][candidates].tolist(), strict=True)
        drop = candidates[[triple in wanted for triple in pairs]]
        if len(drop) == 0:
            continue
        keep = np.ones(len(stored_vids), dtype=bool)
        keep[drop] = False
        chunks[key] = keep_halves(chunk, keep)
        if log is not None:
            log(key, drop_change(DROP_HALVES, drop))
        changed.add(key)
        count += len(drop)
    return changed, count, vids


def _detach(chunks: dict, detached: np.ndarray, log=None) -> tuple[set, int, np.ndarray]:
    """Remove every half of an edge of a ``detached`` vertex from the task's chunks; returns the
    changed chunk keys, how many halves went, and the vertices left that lost an edge."""
    changed, count, neighbours = set(), 0, []
    for key, chunk in list(chunks.items()):
        if len(chunk[2]) == 0:
            continue
        own = np.isin(chunk[2], detached)
        other = np.isin(chunk[3], detached)
        drop = own | other
        if not drop.any():
            continue
        neighbours.append(chunk[2][other & ~own])
        chunks[key] = keep_halves(chunk, ~drop)
        if log is not None:
            log(key, drop_change(DROP_HALVES, np.flatnonzero(drop)))
        changed.add(key)
        count += int(drop.sum())
    return changed, count, concat_ids(neighbours)


def _remove_vertices(chunks: dict, vertices: list, max_parallelism: int,
                     log=None) -> tuple[dict, list]:
    """Remove the vertices (which must have no edges left); returns the kept-vertex mask per chunk
    key that lost vertices, and the removed ids."""
    ids = id_array(list(dict.fromkeys(vertices)))
    kept: dict[int, np.ndarray] = {}
    gone_ids: list = []
    for key, at in _by_chunk(ids, max_parallelism).items():
        chunk = chunks.get(key)
        if chunk is None:
            continue
        gone = ids[at]
        connected = np.isin(chunk[2], gone)
        if connected.any():
            vertex = chunk[2][connected][0]
            vertex = vertex.item() if isinstance(vertex, np.generic) else vertex
            others = chunk[3][chunk[2] == vertex]
            shown = ", ".join(repr(o) for o in list(dict.fromkeys(others.tolist()))[:5])
            msg = (f"vertex {vertex!r} still has {len(others)} edge(s) at the end of the window "
                   f"(to or from {shown}): remove them with RemoveEdge first, or the vertex with "
                   "RemoveVertex(id, detach=True)")
            error = VertexStillConnectedError(msg)
            error.vertex = vertex
            raise error
        mask = ~np.isin(chunk[0], gone)
        if mask.all():
            continue
        gone_ids.extend(chunk[0][~mask].tolist())
        chunks[key] = keep_vertices(chunk, mask)
        if log is not None:
            log(key, drop_change(DROP_VERTICES, np.flatnonzero(~mask)))
        kept[key] = mask
    return kept, gone_ids
