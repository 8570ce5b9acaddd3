"""What a window changed in a task's graph chunks and value chunks, as changes a snapshot writes
(``state.keys.logged``) and a restore applies again, so that a checkpoint costs what the window
changed, not the graph.

A chunk change is one of:

- ``("add", new ids, given positions, given values, half vertices, other ends, half values or
  None, sides)``: vertices appended (their given values None), given values set at positions, edge
  halves appended (what ``chunks.add_window_input`` does to a chunk);
- ``("drop halves", positions)``: edge halves removed;
- ``("drop vertices", positions)``: vertices removed;
- ``("drop matching", half vertices, other ends, sides)``: every edge half equal to one of these
  removed (what a window's ``RemoveEdge`` records do, logged without looking the halves up).

A chunk a window changed may stay a ``PendingChunk``: the chunk before and the changes logged,
applied when it is read.

A value-chunk change is ``("set", positions, values, appended)`` (values appended, then set at
positions) or ``("drop", positions)``. Arrays of int64 are stored as their bytes, of objects as lists,
others as they are.
"""

from __future__ import annotations

import itertools
import pickle
import struct
from functools import cache

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import appended, id_array
from gyreflow.runtime.dataflow.graph.chunk_runs import COMPACT_ADD as _COMPACT_ADD
from gyreflow.runtime.dataflow.graph.chunk_runs import COMPACT_MATCH as _COMPACT_MATCH
from gyreflow.runtime.dataflow.graph.chunk_runs import apply_compact_run, apply_run
from gyreflow.state.keys.logged import logged_table

ADD, DROP_HALVES, DROP_VERTICES = "add", "drop halves", "drop vertices"
DROP_MATCHING = "drop matching"
SET, DROP = "set", "drop"
_EMPTY = np.zeros(0, np.int64)


def pack(array: np.ndarray | None):
    """An array as compact picklable data: int64 and int8 as bytes, objects as a list."""
    if array is None:
        return None
    if array.dtype == np.int64:
        return array.tobytes()
    if array.dtype == np.int8:
        return ("i1", array.tobytes())
    if array.dtype == object:
        return array.tolist()
    return array  # other dtypes (floats, records of fields) pickle whole


def unpack(packed, objects: bool = False) -> np.ndarray | None:
    """The array ``pack`` gave; ``objects``: a list comes back as an object array, else as ids."""
    if packed is None:
        return None
    if type(packed) is bytes:
        return np.frombuffer(packed, dtype=np.int64).copy()
    if type(packed) is tuple:
        return np.frombuffer(packed[1], dtype=np.dtype(packed[0])).copy()
    if isinstance(packed, np.ndarray):
        return packed
    if objects:
        array = np.empty(len(packed), dtype=object)
        array[:] = packed
        return array
    return id_array(packed)


def _ints(arrays: list[np.ndarray]) -> tuple[int, bytes]:
    """Int64 arrays as the bytes of 4-byte ints where every value fits, else 8-byte ones."""
    joined = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
    small = not len(joined) or (-(2**31) <= int(joined.min()) and int(joined.max()) < 2**31)
    return (4, joined.astype("<i4").tobytes()) if small else (8, joined.astype("<i8").tobytes())


def _read_ints(data: bytes, at: int, width: int, count: int) -> tuple[np.ndarray, int]:
    end = at + width * count
    dtype = "<i4" if width == 4 else "<i8"
    return np.frombuffer(data[at:end], dtype=dtype).astype(np.int64), end


_COMPACT_DROP = struct.Struct("<cBI")  # b"D" (halves) or b"V" (vertices), int width, count


def add_change(new_ids, at, given_values, vids, others, values, sides):
    """The change ``add_to_chunk`` made, as stored: the bytes of its int ids where it has no
    other values than ints (most windows' edges, weighted or not), else a tuple of packed
    arrays."""
    if (not len(at) and new_ids.dtype == np.int64 and vids.dtype == np.int64
            and others.dtype == np.int64):
        weights = None if values is None else _int_values(values)
        if values is None or weights is not None:
            width, ids = _ints([new_ids, vids, others])
            kind = b"A" if weights is None else b"B"
            return (_COMPACT_ADD.pack(kind, width, len(new_ids), len(vids)) + ids
                    + sides.astype(np.int8).tobytes()
                    + (b"" if weights is None else weights.astype("<i8").tobytes()))
    return (ADD, pack(new_ids), pack(at), pack(given_values), pack(vids), pack(others),
            pack(values), pack(sides))


def drop_change(kind: str, positions: np.ndarray) -> bytes:
    """Edge halves (``DROP_HALVES``) or vertices (``DROP_VERTICES``) removed at ``positions``."""
    width, data = _ints([positions.astype(np.int64)])
    return _COMPACT_DROP.pack(b"D" if kind == DROP_HALVES else b"V", width, len(positions)) + data


def match_change(vids: np.ndarray, others: np.ndarray, sides: np.ndarray):
    """Every half equal to one of (``vids[i]``, ``others[i]``, ``sides[i]``) removed: the bytes of
    the int ids where they are ints, else a tuple of packed arrays."""
    sides = sides.astype(np.int8)
    if vids.dtype == np.int64 and others.dtype == np.int64:
        width, ids = _ints([vids, others])
        return _COMPACT_MATCH.pack(b"M", width, len(vids)) + ids + sides.tobytes()
    return (DROP_MATCHING, pack(vids), pack(others), pack(sides))


def _int_values(values: np.ndarray) -> np.ndarray | None:
    """Edge values as int64 when every one is an int that fits, else None."""
    listed = values.tolist()
    if set(map(type, listed)) != {int}:
        return None
    try:
        return np.array(listed, dtype=np.int64)
    except OverflowError:
        return None


def _decode(change: bytes) -> tuple:
    """A compact change as the tuple of arrays ``apply_chunk_change`` takes."""
    if change[:1] == b"M":
        _, width, count = _COMPACT_MATCH.unpack_from(change)
        vids, at = _read_ints(change, _COMPACT_MATCH.size, width, count)
        others, at = _read_ints(change, at, width, count)
        return (DROP_MATCHING, vids, others, np.frombuffer(change[at:at + count], np.int8))
    if change[:1] in (b"A", b"B"):
        kind, width, new, halves = _COMPACT_ADD.unpack_from(change)
        at = _COMPACT_ADD.size
        new_ids, at = _read_ints(change, at, width, new)
        vids, at = _read_ints(change, at, width, halves)
        others, at = _read_ints(change, at, width, halves)
        sides = np.frombuffer(change[at:at + halves], dtype=np.int8).copy()
        values = None
        if kind == b"B":
            at += halves
            values = np.frombuffer(change[at:at + 8 * halves], dtype="<i8").astype(object)
        return (ADD, new_ids, _EMPTY, None, vids, others, values, sides)
    kind, width, count = _COMPACT_DROP.unpack_from(change)
    positions, _ = _read_ints(change, _COMPACT_DROP.size, width, count)
    return (DROP_HALVES if kind == b"D" else DROP_VERTICES, positions)


def add_to_chunk(chunk: list, new_ids: np.ndarray, at: np.ndarray, given_values: np.ndarray,
                 vids: np.ndarray, others: np.ndarray, values: np.ndarray | None,
                 sides: np.ndarray) -> list:
    """``chunk`` with vertices ``new_ids`` appended, given values set at ``at`` and the edge halves
    appended (a new list; the old chunk's arrays read as they did: appends go after their ends,
    ``arrays.appended``)."""
    chunk = list(chunk)
    if len(new_ids):
        chunk[0] = appended(id_array(chunk[0]), id_array(new_ids))
        chunk[1] = appended(chunk[1], np.full(len(new_ids), None, dtype=object))
    if len(at):
        chunk[1] = chunk[1].copy()
        chunk[1][at] = given_values
    if len(vids):
        old_count = len(chunk[2])
        chunk[2] = appended(chunk[2], id_array(vids))
        chunk[3] = appended(chunk[3], id_array(others))
        if values is not None or chunk[4] is not None:
            old = chunk[4] if chunk[4] is not None else np.full(old_count, None, dtype=object)
            more = values if values is not None else np.full(len(vids), None, dtype=object)
            chunk[4] = appended(old.astype(object, copy=False), more.astype(object, copy=False))
        chunk[5] = appended(chunk[5], sides.astype(np.int8, copy=False))
    return chunk


def keep_halves(chunk: list, keep: np.ndarray) -> list:
    """``chunk`` with the edge halves of mask ``keep`` only."""
    chunk = list(chunk)
    chunk[2], chunk[3], chunk[5] = chunk[2][keep], chunk[3][keep], chunk[5][keep]
    if chunk[4] is not None:
        chunk[4] = chunk[4][keep]
    return chunk


def keep_vertices(chunk: list, keep: np.ndarray) -> list:
    """``chunk`` with the vertices of mask ``keep`` only."""
    chunk = list(chunk)
    chunk[0], chunk[1] = chunk[0][keep], chunk[1][keep]
    return chunk


def _mask(length: int, dropped: np.ndarray) -> np.ndarray:
    keep = np.ones(length, dtype=bool)
    keep[dropped] = False
    return keep


def decoded(change) -> tuple:
    """A stored chunk change as a tuple of arrays (its kind first)."""
    if type(change) is bytes:
        return _decode(change)
    kind = change[0]
    if kind == ADD:
        _, new_ids, at, given, vids, others, values, sides = change
        return (ADD, unpack(new_ids), unpack(at), unpack(given, objects=True), unpack(vids),
                unpack(others), unpack(values, objects=True), unpack(sides))
    if kind == DROP_MATCHING:
        return (DROP_MATCHING, unpack(change[1]), unpack(change[2]), unpack(change[3]))
    return (kind, unpack(change[1]))


def apply_decoded(chunk: list | None, change: tuple) -> list:
    """``chunk`` after one ``decoded`` change (``chunk`` None: an empty one)."""
    if chunk is None:
        chunk = empty_chunk()
    kind = change[0]
    if kind == ADD:
        return add_to_chunk(chunk, *change[1:])
    if kind == DROP_MATCHING:
        return drop_matching(chunk, *change[1:])
    if kind == DROP_HALVES:
        return keep_halves(chunk, _mask(len(chunk[2]), change[1]))
    if kind == DROP_VERTICES:
        return keep_vertices(chunk, _mask(len(chunk[0]), change[1]))
    msg = f"unknown graph change {kind!r}"
    raise ValueError(msg)


def apply_chunk_change(chunk: list | None, change: tuple) -> list:
    """``chunk`` after one stored change (``chunk`` None: an empty one)."""
    return apply_decoded(chunk, decoded(change))


def apply_chunk_changes(chunk: list | None, changes) -> list:
    """``chunk`` after the stored ``changes`` in order, a run of appends and matching drops in
    one pass (``chunk_runs``)."""
    chunk = chunk if chunk is not None else empty_chunk()
    applied = apply_compact_run(chunk, changes)
    if applied is not None:
        return applied
    return apply_run(chunk, [decoded(change) for change in changes], apply_decoded)


def drop_matching(chunk: list, vids: np.ndarray, others: np.ndarray, sides: np.ndarray) -> list:
    """``chunk`` without the halves equal to any (``vids[i]``, ``others[i]``, ``sides[i]``)."""
    stored = chunk[2]
    candidates = np.flatnonzero(np.isin(stored, vids))
    if not len(candidates):
        return chunk
    wanted = set(zip(vids.tolist(), others.tolist(), sides.tolist(), strict=True))
    found = zip(stored[candidates].tolist(), chunk[3][candidates].tolist(),
                chunk[5][candidates].tolist(), strict=True)
    drop = candidates[[triple in wanted for triple in found]]
    if not len(drop):
        return chunk
    return keep_halves(chunk, _mask(len(stored), drop))


class PendingChunk:
    """A graph chunk as the chunk before a few windows and the changes they logged since, applied
    (``apply_chunk_change``, as a restore applies the same changes) when it is first read, or by
    the change that finds ``limit`` of them waiting. It reads as the chunk list it stands for
    (indexing, ``len``, iteration) and pickles as it: a window records its changes without copying
    the chunk's arrays, and only a fold, a rebuild or a version read pays for applying them."""

    __slots__ = ("_base", "_changes", "_limit", "_settled")

    def __init__(self, base: list | None, changes: tuple, limit: int = 0) -> None:
        self._base, self._changes, self._settled = base, changes, None
        self._limit = limit or _next_limit()

    def settled(self) -> list:
        """The chunk with the changes applied."""
        if self._settled is None:
            self._settled = apply_chunk_changes(self._base, self._changes)
            self._base, self._changes = None, ()
        return self._settled

    def __getitem__(self, index):
        return self.settled()[index]

    def __len__(self) -> int:
        return 6

    def __iter__(self):
        return iter(self.settled())

    def __reduce__(self):
        return (list, (list(self.settled()),))


MAX_PENDING = 256  # changes a pending chunk holds before the next one applies them (in one run)
_PENDING_SPREAD = MAX_PENDING // 2
_STARTED = itertools.count()


def _next_limit() -> int:
    """How many changes a new pending chunk holds, between half of ``MAX_PENDING`` and all of it,
    dealt out in turn (37 is prime to the spread): the chunks a window changes all wait from the
    same window, and with one limit they would all be applied in the same few windows later."""
    return MAX_PENDING - next(_STARTED) * 37 % _PENDING_SPREAD


def later(chunk, change) -> PendingChunk:
    """``chunk`` (a list, a ``PendingChunk`` or None) with ``change`` to apply when read."""
    if isinstance(chunk, PendingChunk):
        if chunk._settled is not None:
            return PendingChunk(chunk._settled, (change,))
        if len(chunk._changes) >= chunk._limit:
            return PendingChunk(chunk.settled(), (change,))
        return PendingChunk(chunk._base, (*chunk._changes, change), chunk._limit)
    return PendingChunk(chunk, (change,))


def empty_chunk() -> list:
    """[ids, given values, half vertices, half other ends, half values or None, half sides]."""
    return [_EMPTY, np.empty(0, object), _EMPTY, _EMPTY, None, np.zeros(0, np.int8)]


def array_bytes(array) -> int:
    """About the bytes ``array`` takes when stored."""
    if array is None:
        return 0
    if array.dtype == object:
        return 16 * len(array)
    return array.nbytes


def chunk_size(chunk: list) -> int:
    """About the bytes of a chunk stored whole."""
    return sum(array_bytes(a) for a in chunk)


_COMPACT_SET = struct.Struct("<cBIII")  # b"S", int width, dtype bytes, positions, appended


@cache
def _dtype_bytes(dtype: np.dtype) -> bytes:
    return pickle.dumps(dtype, protocol=5)


@cache
def _dtype_of(data: bytes) -> np.dtype:
    return pickle.loads(data)  # a dtype this module wrote; the stored chunk's check covers it


def set_change(positions: np.ndarray, values: np.ndarray, appended: np.ndarray):
    """A value chunk's change: ``appended`` values added, then ``values`` set at ``positions``:
    bytes where the values are of one dtype without objects (numbers, the records of repairing
    programs), else a tuple of packed arrays."""
    dtype = values.dtype
    if not dtype.hasobject and appended.dtype == dtype and positions.dtype.kind in "iu":
        described = _dtype_bytes(dtype)
        width, ints = _ints([positions.astype(np.int64)])
        return (_COMPACT_SET.pack(b"S", width, len(described), len(positions), len(appended))
                + described + ints + values.tobytes() + appended.tobytes())
    return (SET, pack(positions), pack(values), pack(appended))


def _decode_set(change: bytes) -> tuple:
    _, width, described, count, more = _COMPACT_SET.unpack_from(change)
    at = _COMPACT_SET.size
    dtype = _dtype_of(change[at:at + described])
    positions, at = _read_ints(change, at + described, width, count)
    values = np.frombuffer(change[at:at + dtype.itemsize * count], dtype=dtype)
    at += dtype.itemsize * count
    appended = np.frombuffer(change[at:at + dtype.itemsize * more], dtype=dtype)
    return (SET, positions, values, appended)


def apply_values_change(stored: np.ndarray | None, change) -> np.ndarray:
    """A value chunk after one stored change."""
    kind, positions, values, appended = _value_change(change)
    if kind == SET:
        if stored is None:
            stored = appended.copy()
        elif len(appended):
            stored = np.concatenate([stored, appended]) if stored.dtype == appended.dtype or (
                stored.dtype != object and appended.dtype != object) else np.concatenate(
                [stored.astype(object), appended.astype(object)])
        else:
            stored = stored.copy()
        if len(positions):
            stored[positions] = values
        return stored
    return stored[_mask(len(stored), positions)]


def apply_values_changes(stored: np.ndarray | None, changes: list) -> np.ndarray:
    """A value chunk after stored changes in order, in one pass (a restore's): the array is
    copied once and grows by doubling, so a run of appends costs what it appends, not the chunk
    each time."""
    buffer = None if stored is None else stored.copy()
    length = 0 if stored is None else len(stored)
    for change in changes:
        kind, positions, values, appended = _value_change(change)
        if kind == SET and buffer is not None and appended.dtype == buffer.dtype:
            if length + len(appended) > len(buffer):
                grown = np.empty(max(2 * len(buffer), length + len(appended)), buffer.dtype)
                grown[:length] = buffer[:length]
                buffer = grown
            buffer[length:length + len(appended)] = appended
            length += len(appended)
            if len(positions):
                buffer[positions] = values
            continue
        buffer = apply_values_change(None if buffer is None else buffer[:length], change)
        length = len(buffer)
    return buffer[:length].copy() if buffer is not None and length < len(buffer) else buffer


def _value_change(change) -> tuple:
    """``(kind, positions, values, appended)`` of a stored value-chunk change (a drop's values
    and appended None)."""
    if type(change) is bytes:
        return _decode_set(change)
    kind = change[0]
    if kind == SET:
        return (SET, unpack(change[1]), unpack(change[2], objects=True),
                unpack(change[3], objects=True))
    if kind == DROP:
        return (DROP, unpack(change[1]), None, None)
    msg = f"unknown value change {kind!r}"
    raise ValueError(msg)


def chunk_table(state, name: str):
    """The task's logged table of graph chunks ``name``."""
    return logged_table(state, name, apply_chunk_change, chunk_size, apply_chunk_changes)


def values_table(state, name: str):
    """The task's logged table of value chunks ``name``."""
    return logged_table(state, name, apply_values_change, array_bytes, apply_values_changes)
