"""The stream-table join on column batches (``join_table(..., merged=True)``): table updates taken
as the last row per key of a batch, and a batch of stream records joined whole, each distinct key
looked up once and the table's fields added as columns.

A merged record is the stream record with the table value's fields added (a field both have keeps
the record's value), on rows as on columns; on columns a record without a table value gets nulls in
the table's columns.
"""

from __future__ import annotations

from gyreflow.runtime.dataflow.columns.batch import Column, ColumnBatch, encode_keys


def last_per_key(batch: ColumnBatch, key: Column) -> list[tuple[object, dict]]:
    """``[(key, record)]``: the last row of ``batch`` of each distinct value of column ``key``
    (what a row-by-row update would leave), in order of those rows."""
    import numpy as np

    keys, codes = encode_keys(batch, key)
    if not len(codes):
        return []
    reversed_codes = codes[::-1]
    _, first_from_end = np.unique(reversed_codes, return_index=True)
    last = np.sort(len(codes) - 1 - first_from_end)
    rows = batch.take(last).rows()
    return [(keys[codes[index]], row) for index, row in zip(last.tolist(), rows, strict=True)]


def merge_row(record, value) -> dict:
    """``record`` (a dict) with the fields of ``value`` (a dict) it does not have."""
    if not isinstance(record, dict) or not isinstance(value, dict):
        kind = type(record if not isinstance(record, dict) else value).__name__
        msg = f"join_table(merged=True) joins dicts (records and table values), got a {kind}"
        raise TypeError(msg)
    merged = dict(record)
    for field, field_value in value.items():
        merged.setdefault(field, field_value)
    return merged


def merge_columns(batch: ColumnBatch, key: Column, lookup, inner: bool) -> ColumnBatch | None:
    """``batch`` with the fields of each row's table value as columns (``lookup(key)`` gives the
    value, a dict, or None), rows without one dropped when ``inner``; None when the values'
    fields do not make columns (of one type each): the rows are then merged one by one."""
    import numpy as np
    import pyarrow as pa

    keys, codes = encode_keys(batch, key)
    values = [lookup(k) for k in keys]
    if any(v is not None and not isinstance(v, dict) for v in values):
        return None
    fields: dict[str, None] = {}
    for value in values:
        if value is not None:
            fields.update(dict.fromkeys(value))
    data = batch.data
    found = np.asarray([v is not None for v in values], dtype=bool)
    keep = found[codes] if inner else None
    indices = pa.array(codes if keep is None else codes[keep])
    if keep is not None:
        data = data.filter(pa.array(keep))
    for field in fields:
        if data.schema.get_field_index(field) >= 0:
            continue  # the record's own value wins
        try:
            column = pa.array([None if v is None else v.get(field) for v in values])
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            return None
        data = data.append_column(field, column.take(indices))
    return ColumnBatch(data)
