"""A window's chunk changes for every key group of a task encoded at once: the ids of all groups
are turned into bytes in one call and each group's change is a few slices of them, giving the
bytes ``changelog.add_change`` and ``changelog.match_change`` give group by group (a thousand
random changes touch nearly every key group, and encoding each group's few halves on its own
cost more than the halves)."""

from __future__ import annotations

import numpy as np

from gyreflow.runtime.dataflow.graph.changelog import _COMPACT_ADD, _COMPACT_MATCH, _int_values

_SMALL = (-(2**31), 2**31)


def _fit(*arrays: np.ndarray) -> bool:
    """Whether every array is int64 with values that fit 4-byte ints."""
    for array in arrays:
        if array.dtype != np.int64:
            return False
        if len(array) and (int(array.min()) < _SMALL[0] or int(array.max()) >= _SMALL[1]):
            return False
    return True


def add_changes(groups: list[int], new_ids: np.ndarray, new_bounds: np.ndarray,
                vids: np.ndarray, others: np.ndarray, sides: np.ndarray,
                values: np.ndarray | None, half_bounds: np.ndarray) -> list[bytes] | None:
    """Per group of ``groups``, the compact ``add_change`` of the group's new vertices
    (``new_ids[new_bounds[g]:new_bounds[g + 1]]``) and halves (``half_bounds`` over the halves
    sorted by group), none with a given value; None where they do not all fit 4-byte ints or an
    edge value is no int (the caller encodes group by group)."""
    weights = None if values is None else _int_values(values)
    if (values is not None and weights is None) or not _fit(new_ids, vids, others):
        return None
    if not groups:
        return []
    kind = b"A" if weights is None else b"B"
    new_bytes = new_ids.astype("<i4").tobytes()
    vid_bytes = vids.astype("<i4").tobytes()
    other_bytes = others.astype("<i4").tobytes()
    side_bytes = sides.astype(np.int8).tobytes()
    weight_bytes = b"" if weights is None else weights.astype("<i8").tobytes()
    pack = _COMPACT_ADD.pack
    out = []
    for a, b, c, d in zip(new_bounds[groups].tolist(), new_bounds[np.add(groups, 1)].tolist(),
                          half_bounds[groups].tolist(), half_bounds[np.add(groups, 1)].tolist(),
                          strict=True):
        out.append(b"".join((pack(kind, 4, b - a, d - c), new_bytes[4 * a:4 * b],
                             vid_bytes[4 * c:4 * d], other_bytes[4 * c:4 * d], side_bytes[c:d],
                             weight_bytes[8 * c:8 * d])))
    return out


def match_changes(groups: list[int], vids: np.ndarray, others: np.ndarray, sides: np.ndarray,
                  bounds: np.ndarray) -> list[bytes] | None:
    """Per group of ``groups``, the compact ``match_change`` of the removal halves
    ``bounds[g]:bounds[g + 1]`` (sorted by group); None where the ids do not fit 4-byte ints."""
    if not _fit(vids, others):
        return None
    if not groups:
        return []
    vid_bytes = vids.astype("<i4").tobytes()
    other_bytes = others.astype("<i4").tobytes()
    side_bytes = sides.astype(np.int8).tobytes()
    pack = _COMPACT_MATCH.pack
    return [b"".join((pack(b"M", 4, d - c), vid_bytes[4 * c:4 * d], other_bytes[4 * c:4 * d],
                      side_bytes[c:d]))
            for c, d in zip(bounds[groups].tolist(), bounds[np.add(groups, 1)].tolist(),
                            strict=True)]
