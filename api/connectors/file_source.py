"""Text files as a source: lines with resumable byte offsets, split into byte ranges across tasks,
read a block at a time where the encoding allows."""

from __future__ import annotations

import codecs
import gzip
import os
import sys
import zlib

import attrs

from gyreflow.api.config.loading import ConfigError
from gyreflow.api.connectors.file_fingerprints import byte_check_problem, byte_fingerprint
from gyreflow.api.connectors.file_formats import changed_input, strip_line_ending
from gyreflow.api.connectors.sources import Source, SourceReader
from gyreflow.runtime.errors import DataError


class _TextFileReader(SourceReader):
    """Reads the lines that start inside ``[start, stop)`` bytes of a file (Hadoop-style splits).

    In an encoding where a line ending is the bytes of ``\\n`` and nothing else contains them
    (UTF-8, ASCII, Latin-1, cp1252) lines are read a block at a time: the block's complete lines
    decoded at once and cut at ``\\n``, one pass in C instead of a readline and a decode per line.
    Other encodings, and a block that does not decode, go line by line (which names the line).
    """

    BLOCK = 1 << 18  # bytes read ahead at a time

    def __init__(self, path: str, start: int, stop: int, encoding: str) -> None:
        self._path = path
        self._file = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
        self._stop = stop
        self._encoding = encoding
        self._blocks = codecs.lookup(encoding).name in _BLOCK_ENCODINGS
        self._ahead = b""  # bytes read after the position, not yet returned
        self._ahead_lines = 0  # the line endings among them
        self._at_end = False  # nothing after ``_ahead``
        self._decoded: list[str] = []  # lines decoded ahead (ASCII, ``\n`` endings): not returned
        self._next = 0  # from ``_decoded[_next]`` on
        self._seek_split_start(start)

    def _seek_split_start(self, start: int) -> None:
        if start == 0:
            self._file.seek(0)
        else:
            # A line belongs to the split in which it starts: skip the partial line at the start.
            self._file.seek(start - 1)
            self._file.readline()
        self._pos = self._file.tell()
        self._ahead, self._ahead_lines, self._at_end = b"", 0, False
        self._decoded, self._next = [], 0

    def read(self, max_records: int) -> list:
        out: list = []
        while len(out) < max_records:
            lines, first = self._decoded, self._next
            if first < len(lines):
                taken = lines[first:first + max_records - len(out)]
                self._next = first + len(taken)
                self._pos += sum(map(len, taken)) + len(taken)  # a byte a character, and "\n"
                if out:
                    out += taken
                else:
                    out = taken
            elif not self._decode_ahead(max_records - len(out)):
                out += self._read_block(max_records - len(out))
                break
        return out

    def _decode_ahead(self, wanted: int) -> bool:
        """Decode the whole lines read ahead in one call and cut them at ``\n`` in another when
        they are ASCII without ``\r`` (a byte a character, so the position follows from their
        lengths): one pass per block instead of one per batch (a batch's lines split off the bytes
        ahead, then the rest of them copied). False when ``_read_block`` reads them: other text, a
        split's end among them, a line without its ending at the end of the file."""
        self._decoded, self._next = [], 0
        if not self._blocks or self._pos >= self._stop or wanted <= 0:
            return False
        if not self._fill_ahead(wanted):
            return False  # the block path names where
        ahead = self._ahead
        cut = ahead.rfind(b"\n") + 1
        if not cut or self._pos + cut > self._stop:
            return False
        whole = ahead[:cut] if cut < len(ahead) else ahead
        if not whole.isascii() or b"\r" in whole:
            return False
        lines = whole.decode("ascii").split("\n")  # every encoding read in blocks is ASCII's superset
        lines.pop()  # after the last ending: nothing
        self._decoded = lines
        self._ahead = ahead[cut:]
        self._ahead_lines = 0
        return True

    def _fill_ahead(self, lines: int) -> bool:
        """Read blocks until ``lines`` line endings are ahead or the file ends; False when a read
        fails (the caller falls back to the line path, which names where)."""
        while self._ahead_lines < lines and not self._at_end:
            try:
                block = self._file.read(self.BLOCK)
            except (OSError, EOFError, zlib.error):
                return False
            if block:
                self._ahead += block
                self._ahead_lines += block.count(b"\n")
            else:
                self._at_end = True
        return True

    def _read_block(self, max_records: int) -> list:
        """Up to ``max_records`` lines of the bytes ahead, any text the encoding reads."""
        if not self._blocks or self._pos >= self._stop or max_records <= 0:
            return self._read_lines(max_records)
        if not self._fill_ahead(max_records):
            return self._read_lines(max_records)  # names the line it fails in
        ahead = self._ahead
        parts = ahead.split(b"\n", max_records)
        if len(parts) > max_records:  # max_records whole lines, then the rest
            rest = parts.pop()
            taken = len(ahead) - len(rest)
            ended = True
        else:  # at the end of the file: every line, the last perhaps without its ending
            rest, taken = b"", len(ahead)
            ended = not parts[-1]
            if ended:
                parts.pop()
        if self._pos + taken > self._stop:  # the split ends among these lines
            parts, taken, ended = self._within_split(parts, taken, ended)
        if not parts:
            return []
        try:
            text = ahead[:taken].decode(self._encoding)
        except UnicodeDecodeError:
            return self._read_lines(max_records)  # names the line and the byte offset
        lines = text.split("\n")
        if ended:
            lines.pop()  # after the last ending: nothing
        if "\r" in text:
            last = len(lines) - 1
            lines = [line[:-1] if line.endswith("\r") and (i < last or ended) else line
                     for i, line in enumerate(lines)]
        self._ahead = ahead[taken:] if rest or taken < len(ahead) else b""
        self._ahead_lines -= len(lines) if ended else len(lines) - 1
        self._pos += taken
        return lines

    def _within_split(self, parts: list, taken: int, ended: bool) -> tuple[list, int, bool]:
        """The first of ``parts`` that start before the split's end, their bytes with endings,
        and whether the last of them has its ending."""
        start, kept = self._pos, 0
        for part in parts:
            if start >= self._stop:
                break
            start += len(part) + 1
            kept += 1
        if kept == len(parts):
            return parts, taken, ended
        return parts[:kept], start - self._pos, True

    def _read_lines(self, max_records: int) -> list:
        """Up to ``max_records`` lines read one at a time from the position."""
        if self._ahead or self._at_end:  # after a block: back to the position
            self._file.seek(self._pos)
            self._ahead, self._ahead_lines, self._at_end = b"", 0, False
        out = []
        readline, stop, encoding = self._file.readline, self._stop, self._encoding
        pos = self._pos
        while len(out) < max_records and pos < stop:
            try:
                raw = readline()
            except (OSError, EOFError, zlib.error) as exc:  # a damaged or cut .gz stream
                msg = f"input file {self._path}: cannot be read after byte {pos} ({exc})"
                raise DataError(msg) from None
            if not raw:
                break
            try:
                out.append(strip_line_ending(raw).decode(encoding))
            except UnicodeDecodeError as exc:
                msg = (f"input file {self._path}: the line at byte offset {pos} is not valid "
                       f"{encoding} (byte offset {pos + exc.start}: {exc.reason})")
                raise DataError(msg) from None
            pos += len(raw)
        self._pos = pos
        return out

    def offset(self) -> dict:
        """The byte position, the end of the task's split (fixed at the first start, so that a
        file appended to is not split anew on a resume) and the file's fingerprint there."""
        return {"at": self._pos, "stop": self._stop,
                "check": byte_fingerprint(self._file, self._pos)}

    def seek(self, offset: object) -> None:
        check = None
        if isinstance(offset, dict):
            self._stop = offset["stop"]
            check = offset["check"]
            offset = offset["at"]
        offset = int(offset)  # an offset stored before fingerprints: the position alone
        if not self._path.endswith(".gz"):
            size = os.fstat(self._file.fileno()).st_size
            if offset > size:  # resumed past the end: the lines read before were changed
                raise changed_input(self._path, f"byte {offset}", f"it now has {size} bytes")
        if check is not None and offset:
            problem = byte_check_problem(self._file, check)
            if problem is not None:
                read = (f"byte {offset} of its uncompressed data" if self._path.endswith(".gz")
                        else f"byte {offset}")
                raise changed_input(self._path, read, problem)
        self._file.seek(offset)
        self._pos = offset
        self._ahead, self._ahead_lines, self._at_end = b"", 0, False
        self._decoded, self._next = [], 0

    def close(self) -> None:
        self._file.close()


# Encodings (codecs' names) in which b"\n" is a line ending wherever it occurs, so that a block's
# lines can be decoded together; a BOM-stripping or stateful codec is read line by line.
_BLOCK_ENCODINGS = frozenset({"utf-8", "ascii", "latin-1", "iso8859-1", "cp1252"})


@attrs.frozen(eq=False)
class FileSource(Source):
    """Lines of a text file, without their ending (``\\n`` or ``\\r\\n``; any other ``\\r`` is part of
    the line); a blank line is an empty string. The offset is a byte position.

    With parallelism ``p`` the file is cut into ``p`` byte ranges and each task reads the lines that
    start in its range. A ``.gz`` file is read decompressed, by one task (the offset counts
    uncompressed bytes). The offset carries a fingerprint of the file up to it
    (``file_fingerprints``): a resume refuses a file cut short or replaced since, naming the file
    and the offset, and reads on in a file that was appended to.
    """

    # Absolute from where the job starts: Spark executors resolve nothing in their own folders.
    path: str = attrs.field(converter=lambda path: os.path.abspath(os.fspath(path)))
    encoding: str = "utf-8"

    def __attrs_post_init__(self) -> None:
        if not os.path.isfile(self.path):
            what = "is not a file" if os.path.exists(self.path) else "does not exist"
            msg = f"FileSource: input file {self.path!r} {what}"
            raise ConfigError(msg)
        if not os.access(self.path, os.R_OK):
            msg = f"FileSource: input file {self.path!r} cannot be read (permission denied)"
            raise ConfigError(msg)
        try:
            line_ending = "\r\n".encode(self.encoding)
        except LookupError:
            msg = f"FileSource: unknown encoding {self.encoding!r}"
            raise ConfigError(msg) from None
        if not line_ending.endswith(b"\r\n"):  # UTF-16 and UTF-32 spread "\n" over several bytes
            msg = (f"FileSource: encoding {self.encoding!r} cannot be read line by line (lines are "
                   "cut at the byte of \\n): convert the file to UTF-8, or use an encoding that "
                   "writes \\n as one byte (latin-1, cp1252, ...)")
            raise ConfigError(msg)

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        if self.path.endswith(".gz"):  # a compressed stream cannot be entered in the middle
            return _TextFileReader(self.path, 0, sys.maxsize if task_index == 0 else 0,
                                   self.encoding)
        size = os.path.getsize(self.path)
        start = size * task_index // parallelism
        # The last task reads to the end, wherever it is when it gets there.
        stop = size * (task_index + 1) // parallelism if task_index + 1 < parallelism else sys.maxsize
        return _TextFileReader(self.path, start, stop, self.encoding)

    def describe(self) -> str:
        return f"FileSource({os.path.basename(self.path)})"
