"""Fingerprints of what a file source read, stored with its offset: a resume refuses a file replaced
since by another one, as it refuses one cut short, and reads on in a file that only grew.

A byte file's fingerprint (text, JSON lines, CSV, rows or columns) is ``("bytes", raw, digest)``: a
digest of the file's first ``PREFIX_BYTES`` and of the ``TAIL_BYTES`` before ``raw``, the position
in the file on disk up to which the job had read (the byte offset itself; in a .gz file, the
position in its compressed bytes). Taking one costs two ``pread`` calls of 4 KiB, whatever the
file's size; a file appended to keeps both parts. A Parquet file's fingerprint is
``("parquet", groups, digest)``: a digest of its schema, of the metadata of the row groups read
(rows, column chunk offsets, sizes and statistics, chained group by group so that each is hashed
once) and of the last ``TAIL_BYTES`` of the data of each. A change elsewhere (in the middle of a long
file, with the same length around it) is not seen: the check is a sample, not a proof.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "in.txt")
>>> with open(path, "wb") as out:
...     _ = out.write(b"a\\nb\\n")
>>> with open(path, "rb") as file:
...     check = byte_fingerprint(file, 2)
>>> with open(path, "ab") as out:
...     _ = out.write(b"c\\n")   # appended to: the same bytes up to the offset
>>> with open(path, "rb") as file:
...     byte_check_problem(file, check)
>>> with open(path, "wb") as out:
...     _ = out.write(b"x\\ny\\nz\\n")   # replaced
>>> with open(path, "rb") as file:
...     byte_check_problem(file, check)
'its bytes up to there are not the ones it read'
"""

from __future__ import annotations

import gzip
import hashlib
import os

PREFIX_BYTES = 4096
TAIL_BYTES = 4096
_DIFFERENT = "its bytes up to there are not the ones it read"


def _raw(file):
    """The file on disk under ``file`` (a .gz file's compressed bytes)."""
    return file.fileobj if isinstance(file, gzip.GzipFile) else file


def _sample_digest(fd: int, raw: int) -> str:
    """A digest of the first ``PREFIX_BYTES`` of the file and the ``TAIL_BYTES`` before ``raw``
    (fewer bytes than asked, in a file now shorter, digest otherwise)."""
    head_size = min(PREFIX_BYTES, raw)
    head = os.pread(fd, head_size, 0)
    tail_start = max(head_size, raw - TAIL_BYTES)
    tail = os.pread(fd, raw - tail_start, tail_start) if raw > tail_start else b""
    digest = hashlib.blake2b(head, digest_size=12)
    digest.update(len(head).to_bytes(4, "big"))
    digest.update(tail)
    return digest.hexdigest()


def byte_fingerprint(file, position: int) -> tuple[str, int, str]:
    """The fingerprint of ``file`` (from ``open_binary``) read up to byte ``position`` of its
    data: at that byte of a plain file, at the compressed bytes read so far of a .gz file."""
    raw_file = _raw(file)
    raw = raw_file.tell() if raw_file is not file else position
    return ("bytes", raw, _sample_digest(raw_file.fileno(), raw))


def byte_check_problem(file, check) -> str | None:
    """What differs between ``file`` now and the fingerprint ``check`` taken of it, or None."""
    kind, raw, digest = check
    if kind != "bytes":
        return f"it was read as another kind of file ({kind})"
    if _sample_digest(_raw(file).fileno(), raw) != digest:
        return _DIFFERENT
    return None


class ParquetFingerprints:
    """Fingerprints of one Parquet file (``pyarrow.parquet.ParquetFile``) at its row groups,
    chained and kept as they are first taken, so that each row group is looked at once: its
    metadata and the last ``TAIL_BYTES`` of its data. ``fd``: the file opened for reading."""

    def __init__(self, parquet_file, fd: int) -> None:
        self.metadata = parquet_file.metadata
        self.fd = fd
        schema = self.metadata.schema
        columns = [f"{c.path}:{c.physical_type}:{c.logical_type}:{c.max_definition_level}:"
                   f"{c.max_repetition_level}" for c in (schema.column(i) for i in range(len(schema)))]
        self.chain = [hashlib.blake2b("\n".join(columns).encode(), digest_size=12).digest()]

    def at(self, groups: int) -> tuple[str, int, str]:
        """The fingerprint after the first ``groups`` row groups were read (whole or in part)."""
        while len(self.chain) <= groups:
            digest = hashlib.blake2b(self.chain[-1], digest_size=12)
            digest.update(self._group_sample(len(self.chain) - 1))
            self.chain.append(digest.digest())
        return ("parquet", groups, self.chain[groups].hex())

    def problem(self, check) -> str | None:
        """What differs between the file now and the fingerprint ``check``, or None."""
        kind, groups, digest = check
        if kind != "parquet":
            return f"it was read as another kind of file ({kind})"
        if groups > self.metadata.num_row_groups:
            return f"it has {self.metadata.num_row_groups} row groups now"
        if self.at(groups)[2] != digest:
            return "its row groups up to there are not the ones it read"
        return None

    def _group_sample(self, index: int) -> bytes:
        """Row group ``index``'s rows, its column chunks' places, sizes and statistics, and the
        last ``TAIL_BYTES`` of its data."""
        group = self.metadata.row_group(index)
        parts = [f"{group.num_rows}:{group.total_byte_size}"]
        end = 0
        for column in (group.column(i) for i in range(group.num_columns)):
            stats = column.statistics if column.is_stats_set else None
            shown = (f"{stats.null_count}:{stats.min!r}:{stats.max!r}"
                     if stats is not None and stats.has_min_max else "")
            parts.append(f"{column.data_page_offset}:{column.dictionary_page_offset}:"
                         f"{column.total_compressed_size}:{column.num_values}:{shown}")
            first = (column.dictionary_page_offset if column.has_dictionary_page
                     else column.data_page_offset)
            end = max(end, (first or 0) + column.total_compressed_size)
        start = max(0, end - TAIL_BYTES)
        return "|".join(parts).encode() + b"\x00" + os.pread(self.fd, end - start, start)
