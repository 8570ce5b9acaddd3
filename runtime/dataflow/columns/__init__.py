"""Columns: records as Arrow column batches (``batch``: ``ColumnBatch``, ``Column``, keys encoded for
routing, column aggregates), the column expressions of ``filter(col(...) > x)`` (``expressions``),
the stream-table join of whole batches (``table_join``) and rows zipped from columns (``zipped``).
It is the bottom of the dataflow: it imports nothing of ``runtime/dataflow`` but its own modules,
so that operators, windows and the task machinery can all build on it.
"""
