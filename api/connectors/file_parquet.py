"""Parquet files read by cursor: row groups one at a time as batches, the position ``(row group,
row)``, its fingerprint the row groups' metadata (``file_fingerprints``)."""

from __future__ import annotations

import os

from gyreflow.api.connectors.file_fingerprints import ParquetFingerprints
from gyreflow.api.connectors.file_formats import (
    FileCursor,
    MalformedRecordError,
    changed_input,
    require_pyarrow,
)
from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch


class ParquetCursor(FileCursor):
    """Parquet: row groups are read one at a time as batches; the position is (row group, row)."""

    def __init__(self, path: str, columns: tuple[str, ...] | None, position,
                 columnar: bool = False) -> None:
        pq = require_pyarrow("a Parquet source")
        self.path = path
        self.columnar = columnar  # batches as column batches (ColumnBatch), not lists of dicts
        self.columns = list(columns) if columns is not None else None
        resumed = position is not None and tuple(position) != (0, 0)
        try:
            self.file = pq.ParquetFile(path)
            if columnar:  # text columns as dictionaries: counted and routed by their codes
                self.file = pq.ParquetFile(path, read_dictionary=_text_columns(self.file))
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            if resumed:  # it was a Parquet file when the job read it: cut short, or replaced
                raise changed_input(path, _row_named(position),
                                    f"it is no Parquet file now ({exc})") from None
            raise MalformedRecordError("file footer", f"not a Parquet file ({exc})") from None
        self.position = tuple(position) if position is not None else (0, 0)
        self._group: list | None = None
        self._fingerprints: ParquetFingerprints | None = None
        self._raw: int | None = None  # the file's descriptor, for the bytes fingerprints read
        if resumed:
            self._refuse_if_cut()

    def _fingerprinted(self) -> ParquetFingerprints:
        if self._fingerprints is None:
            self._raw = os.open(self.path, os.O_RDONLY)
            self._fingerprints = ParquetFingerprints(self.file, self._raw)
        return self._fingerprints

    def _groups_read(self) -> int:
        group, row = self.position
        return group + 1 if row else group

    def fingerprint(self) -> tuple:
        return self._fingerprinted().at(self._groups_read())

    def refuse_if_changed(self, check) -> None:
        if not self._groups_read():
            return
        problem = self._fingerprinted().problem(check)
        if problem is not None:
            raise changed_input(self.path, _row_named(self.position), problem)

    def _refuse_if_cut(self) -> None:
        """Refuse a file that no longer has the row the position is at (a file rewritten with
        fewer row groups or rows): reading on would silently skip the rows between."""
        group, row = self.position
        groups = self.file.num_row_groups
        if group > groups or (group == groups and row > 0):
            self.close()
            raise changed_input(self.path, _row_named(self.position),
                                f"it now has {plural(groups, 'row group')}")
        if group < groups and row > 0:
            rows = self.file.metadata.row_group(group).num_rows
            if row >= rows:
                self.close()
                raise changed_input(self.path, _row_named(self.position),
                                    f"row group {group} now has {plural(rows, 'row')}")

    def read(self, max_records: int) -> list:
        # A row group without rows is skipped: an empty list means the end of the file.
        while True:
            group = self.position[0]
            batch = self._read_group(max_records)
            if batch or self.position[0] == group:
                return batch

    def _read_group(self, max_records: int) -> list:
        group, row = self.position
        if group >= self.file.num_row_groups:
            return []
        if self._group is None:
            try:
                # Values Python cannot hold exactly (nanoseconds in a timestamp) are refused here,
                # with the row group, rather than rounded.
                table = self.file.read_row_group(group, columns=self.columns)
                self._group = ColumnBatch.of(table) if self.columnar else table.to_pylist()
            except Exception as exc:  # noqa: BLE001
                self.position = (group + 1, 0)
                return [MalformedRecordError(f"row group {group}", f"cannot be read ({exc})")]
        batch = self._group[row:row + max_records]
        row += len(batch)
        if row >= len(self._group):
            self._group = None
            self.position = (group + 1, 0)
        else:
            self.position = (group, row)
        return batch

    def close(self) -> None:
        self._group = None
        if self._raw is not None:
            os.close(self._raw)
            self._raw = None
        close = getattr(self.file, "close", None)
        if close is not None:
            close()


def _row_named(position) -> str:
    group, row = position
    return f"row group {group}, row {row}" if row else f"row group {group}"


def _text_columns(file) -> list[str]:
    """The string and binary columns of a Parquet file (read as dictionary arrays: most such
    columns repeat their values, and the file often stores them as dictionaries already)."""
    import pyarrow as pa

    kinds = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
             pa.types.is_large_binary)
    return [field.name for field in file.schema_arrow if any(kind(field.type) for kind in kinds)]
