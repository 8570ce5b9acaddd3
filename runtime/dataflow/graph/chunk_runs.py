"""A run of logged chunk changes applied in one pass: the appends of a run joined once and its
matching drops found by one join of the halves with the removals, instead of one copy of the
chunk per change (``changelog.apply_chunk_change`` copies a chunk of many thousand halves for
every window's few removals, which a pending chunk of 32 windows paid 16 times over).

The result is the chunk that applying the changes one by one gives: a removal takes the equal
halves that were there when it came (the chunk's own and those appended before it), not those
appended after it.

``apply_compact_run`` does the same for a run of stored changes that are all compact bytes of
4-byte ids (what nearly every window logs): each field of every change is cut out of its bytes
and read with one ``frombuffer``, instead of decoding each change into arrays first (a pending
chunk applies a few hundred changes at once, and a decode costs more than the change's halves).
"""

from __future__ import annotations

import struct

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import concat_ids, id_array

ADD, DROP_MATCHING = "add", "drop matching"


def apply_run(chunk: list, changes: list, apply_one) -> list:
    """``chunk`` after the decoded ``changes`` (``apply_one(chunk, change)`` applies one: runs
    that hold other kinds of change, or ids that are no ints, go one by one)."""
    kinds = {change[0] for change in changes}
    if len(changes) < 2 or not kinds <= {ADD, DROP_MATCHING} or not (
            chunk[2].dtype == np.int64 and chunk[3].dtype == np.int64
            and all(_ints(change) for change in changes)):
        for change in changes:
            chunk = apply_one(chunk, change)
        return chunk
    ids, given = [chunk[0]], [chunk[1]]
    vids, others, sides = [chunk[2]], [chunk[3]], [chunk[5]]
    values = [chunk[4]]
    births = [np.full(len(chunk[2]), -1, dtype=np.int64)]
    removals: list = []
    for i, change in enumerate(changes):
        if change[0] == DROP_MATCHING:
            _, rv, ro, rs = change
            if not len(rv):
                continue
            removals.append((rv, ro, rs.astype(np.int8), np.full(len(rv), i, np.int64)))
            continue
        _, new_ids, at, given_values, hv, ho, hvalues, hs = change
        if len(new_ids):
            ids.append(id_array(new_ids))
            given.append(np.full(len(new_ids), None, dtype=object))
        if len(at):
            joined = np.concatenate(given) if len(given) > 1 else given[0].copy()
            joined[at] = given_values
            given = [joined]
        if len(hv):
            vids.append(hv)
            others.append(ho)
            sides.append(hs.astype(np.int8, copy=False))
            values.append(hvalues)
            births.append(np.full(len(hv), i, dtype=np.int64))
    out = [concat_ids(ids), np.concatenate(given) if len(given) > 1 else given[0],
           concat_ids(vids), concat_ids(others), _values(values, vids), np.concatenate(sides)]
    if removals:
        keep = _kept(out[2], out[3], out[5], np.concatenate(births), removals)
        if keep is not None:
            out[2], out[3], out[5] = out[2][keep], out[3][keep], out[5][keep]
            if out[4] is not None:
                out[4] = out[4][keep]
    return out


def _ints(change) -> bool:
    if change[0] == DROP_MATCHING:
        return change[1].dtype == np.int64 and change[2].dtype == np.int64
    return change[1].dtype == np.int64 and change[4].dtype == np.int64 and (
        change[5].dtype == np.int64)


def _values(parts: list, vids: list) -> np.ndarray | None:
    """The halves' values joined (None: no half has one), None-filled where a part has none."""
    if all(part is None for part in parts):
        return None
    return np.concatenate([part.astype(object, copy=False) if part is not None
                           else np.full(len(ids), None, dtype=object)
                           for part, ids in zip(parts, vids, strict=True)])


def _kept(vids: np.ndarray, others: np.ndarray, sides: np.ndarray, births: np.ndarray,
          removals: list) -> np.ndarray | None:
    """The mask of the halves no later removal equal to them took (None: all are kept)."""
    removed = np.concatenate([r[0] for r in removals])
    low, high = int(removed.min()), int(removed.max())
    kind = "table" if high - low < 1 << 23 else None  # no sort of every half's vertex
    candidates = np.flatnonzero(np.isin(vids, removed, kind=kind))
    if not len(candidates):
        return None
    count = len(candidates)
    all_v = np.concatenate([vids[candidates], removed])
    all_o = np.concatenate([others[candidates], *[r[1] for r in removals]])
    all_s = np.concatenate([sides[candidates], *[r[2] for r in removals]]).astype(np.int64)
    # a half's birth, or a removal's window position; removals are told apart by position
    when = np.concatenate([births[candidates], *[r[3] for r in removals]])
    order = np.lexsort((all_s, all_o, all_v))
    v, o, s = all_v[order], all_o[order], all_s[order]
    starts = np.flatnonzero(np.concatenate(([True], (v[1:] != v[:-1]) | (o[1:] != o[:-1])
                                            | (s[1:] != s[:-1]))))
    is_removal = order >= count
    latest = np.where(is_removal, when[order], -2)
    group_latest = np.maximum.reduceat(latest, starts)
    flags = np.zeros(len(order), dtype=np.int64)
    flags[starts] = 1
    group = np.cumsum(flags) - 1
    halves = ~is_removal
    dropped = group_latest[group[halves]] > when[order][halves]
    if not dropped.any():
        return None
    keep = np.ones(len(vids), dtype=bool)
    keep[candidates[order[halves][dropped]]] = False
    return keep


COMPACT_ADD = struct.Struct("<cBII")  # a compact add: b"A" or b"B", int width, new vertices, halves
COMPACT_MATCH = struct.Struct("<cBI")  # a compact matching drop: b"M", int width, halves


def apply_compact_run(chunk: list, changes) -> list | None:
    """``apply_run`` of stored ``changes`` that are all compact bytes of 4-byte ids, adds (b"A",
    or b"B" with int weights, not both in one run) and matching drops (b"M"), onto a chunk of int
    ids whose halves carry values only in a weighted run; None (nothing done) otherwise."""
    if len(changes) < 2 or not (chunk[0].dtype == chunk[2].dtype == chunk[3].dtype == np.int64):
        return None
    new_ids, vids, others, sides, weights = [], [], [], [], []
    removed, removed_others, removed_sides = [], [], []
    halves_of, removals_of = [], []  # per change
    kinds = set()
    for change in changes:
        if type(change) is not bytes:
            return None
        kind = change[:1]
        if kind == b"M":
            _, width, count = COMPACT_MATCH.unpack_from(change)
            at = COMPACT_MATCH.size
            removed.append(change[at:at + 4 * count])
            removed_others.append(change[at + 4 * count:at + 8 * count])
            removed_sides.append(change[at + 8 * count:at + 9 * count])
            halves_of.append(0)
            removals_of.append(count)
        elif kind == b"A" or kind == b"B":
            _, width, new, count = COMPACT_ADD.unpack_from(change)
            at = COMPACT_ADD.size
            new_ids.append(change[at:at + 4 * new])
            at += 4 * new
            vids.append(change[at:at + 4 * count])
            others.append(change[at + 4 * count:at + 8 * count])
            sides.append(change[at + 8 * count:at + 9 * count])
            if kind == b"B":
                weights.append(change[at + 9 * count:at + 17 * count])
            if count:
                kinds.add(kind)
            halves_of.append(count)
            removals_of.append(0)
        else:
            return None
        if width != 4:
            return None
    if len(kinds) > 1 or (chunk[4] is not None and b"A" in kinds):
        return None
    weighted = b"B" in kinds or chunk[4] is not None
    added = _ids(new_ids)
    out = [np.concatenate([chunk[0], added]),
           np.concatenate([chunk[1], np.full(len(added), None, dtype=object)]),
           np.concatenate([chunk[2], _ids(vids)]), np.concatenate([chunk[3], _ids(others)]),
           None, np.concatenate([chunk[5], np.frombuffer(b"".join(sides), np.int8)])]
    if weighted:
        before = (chunk[4] if chunk[4] is not None
                  else np.full(len(chunk[2]), None, dtype=object))
        out[4] = np.concatenate([before.astype(object, copy=False),
                                 np.frombuffer(b"".join(weights), "<i8").astype(object)])
    if any(removals_of):
        positions = np.arange(len(changes), dtype=np.int64)
        births = np.concatenate([np.full(len(chunk[2]), -1, dtype=np.int64),
                                 np.repeat(positions, halves_of)])
        removals = [(_ids(removed), _ids(removed_others),
                     np.frombuffer(b"".join(removed_sides), np.int8),
                     np.repeat(positions, removals_of))]
        keep = _kept(out[2], out[3], out[5], births, removals)
        if keep is not None:
            out[2], out[3], out[5] = out[2][keep], out[3][keep], out[5][keep]
            if out[4] is not None:
                out[4] = out[4][keep]
    return out


def _ids(parts: list[bytes]) -> np.ndarray:
    """4-byte ids cut out of changes, as one int64 array."""
    return np.frombuffer(b"".join(parts), "<i4").astype(np.int64)
