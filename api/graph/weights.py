"""Edge weights of property graphs: a number, 1 without a value, or a named property of a property
map or ``(label, properties)`` pair, read for the weighted algorithms (SSSP)."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from gyreflow.runtime.errors import DataError


def edge_weight(value: Any, weight: str | None, algorithm: str, src: Any, dst: Any) -> float:
    """The weight of edge ``src -> dst`` whose value is ``value``: 1.0 without a value or with
    ``weight`` None, the value itself when it is a number, else its property ``weight`` (a
    mapping's key, or the properties of a ``(label, properties)`` pair). A missing or non-numeric
    property is a ``DataError`` naming the algorithm, the edge and the property.

    >>> edge_weight({"label": "ROAD", "km": 4}, "km", "sssp", 1, 2)
    4.0
    >>> edge_weight(2.5, "weight", "sssp", 1, 2), edge_weight(None, "weight", "sssp", 1, 2)
    (2.5, 1.0)
    """
    if value is None or weight is None:
        return 1.0
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return float(value)
    properties = value
    if (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], Mapping)
            and not isinstance(value[0], Mapping)):
        properties = value[1]
    found = properties.get(weight) if isinstance(properties, Mapping) else None
    if isinstance(found, (int, float, np.number)) and not isinstance(found, bool):
        return float(found)
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "..."
    what = "has no property" if found is None else f"has {found!r}, not a number, as property"
    msg = (f"{algorithm}: edge {src!r} -> {dst!r} {what} {weight!r} (its value is {shown}): name "
           f"the weight's key with {algorithm}(..., weight='KEY'), or weight=None to count every "
           "edge as 1")
    raise DataError(msg)


def out_edge_weights(part, where: np.ndarray, weight: str | None, algorithm: str,
                     read: dict | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rows, columns, weights)`` of the out-edges of the vertices at positions ``where``: the
    CSR data, with the entries that are no number (NaN: property maps) read by ``edge_weight``
    from the raw edge values; all 1.0 with ``weight`` None. ``read`` keeps, per out-edge matrix
    (by ``id``, with a weak reference to it), the weights read so far: an edge relaxed again is
    not read again (a window that changes the edges brings a new matrix)."""
    rows, columns, weights = part.edges(where, "out")
    if weight is None:
        return rows, columns, np.ones(len(rows))
    odd = np.flatnonzero(np.isnan(weights))
    if not len(odd) or part.out_values is None:
        return rows, columns, weights
    matrix = part.out_edges
    indptr = matrix.indptr
    where = np.asarray(where, dtype=np.int64)
    starts, lengths = indptr[where], indptr[where + 1] - indptr[where]
    at = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(len(rows))
    kept = None if read is None else read.get(id(matrix))
    known = kept[1] if kept is not None and kept[0]() is matrix else None
    weights = weights.copy()
    if known is not None:
        weights[odd] = known[at[odd]]
        odd = odd[np.isnan(weights[odd])]
    weights[odd] = [edge_weight(value, weight, algorithm, src, dst)
                    for value, src, dst in zip(part.out_values[at[odd]].tolist(),
                                               part.ids[rows[odd]].tolist(),
                                               part.columns[columns[odd]].tolist(), strict=True)]
    if read is not None:
        if known is None:
            for key in [key for key, (ref, _) in read.items() if ref() is None]:
                del read[key]  # matrices of earlier windows
            known = matrix.data.copy()
            read[id(matrix)] = (weakref.ref(matrix), known)
        known[at[odd]] = weights[odd]
    return rows, columns, weights


def raw_weights(part, rows: np.ndarray, columns: np.ndarray, raw: np.ndarray | None,
                weight: str | None, algorithm: str) -> np.ndarray:
    """The weights of the edges ``rows`` -> ``columns`` whose raw values are ``raw`` (None: no
    edge has one), read as ``out_edge_weights`` reads them from the partition: a number as it
    is, 1.0 without a value, a property map's ``weight`` (``edge_weight``); 1.0 with ``weight``
    None."""
    from gyreflow.runtime.dataflow.graph.arrays import edge_weights

    if weight is None:
        return np.ones(len(rows))
    weights = np.array(edge_weights(raw, len(rows)), dtype=float)
    odd = np.flatnonzero(np.isnan(weights))
    if len(odd):
        weights[odd] = [edge_weight(value, weight, algorithm, src, dst)
                        for value, src, dst in zip(raw[odd].tolist(),
                                                   part.ids[rows[odd]].tolist(),
                                                   part.columns[columns[odd]].tolist(),
                                                   strict=True)]
    return weights
