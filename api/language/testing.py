"""A testing kit: a source with end-of-input and abort markers, and a sink that records by window."""

from __future__ import annotations

import itertools
import threading

from gyreflow.api.connectors.sinks import Sink, SinkWriter
from gyreflow.api.connectors.sources import Source, SourceReader
from gyreflow.plan.words import plural


class TestingSourceAbort(RuntimeError):  # noqa: N818 - reads as what it is
    """Raised by a TestingSource at its ABORT marker: simulates a crash in the middle of the input."""


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"TestingSource.{self.name}"


class _TestingReader(SourceReader):
    def __init__(self, items: tuple, task_index: int, parallelism: int) -> None:
        self.items = items[task_index::parallelism]
        self.position = 0

    def read(self, max_records: int) -> list:
        out = []
        items = self.items
        while len(out) < max_records and self.position < len(items):
            item = items[self.position]
            if item is TestingSource.EOF:
                break
            if item is TestingSource.ABORT:
                self.position += 1  # a resumed run continues after the marker
                if out:
                    self.position -= 1  # hand out what came before; abort on the next read
                    return out
                msg = "TestingSource reached its ABORT marker"
                raise TestingSourceAbort(msg)
            out.append(item)
            self.position += 1
        return out

    def offset(self) -> int:
        return self.position

    def seek(self, offset: object) -> None:
        self.position = int(offset)


class TestingSource(Source):
    """Records from a list, with markers: ``TestingSource.EOF`` ends the input there;
    ``TestingSource.ABORT`` makes the read raise ``TestingSourceAbort`` (a resumed run continues after
    it). With parallelism ``p`` task ``i`` reads items ``i, i + p, ...``.

    >>> from gyreflow.api import Environment
    >>> sink = TestingSink()
    >>> p = Environment.local(progress=False).pipeline("t")
    >>> @p.task
    ... def t(ctx):
    ...     ctx.source(TestingSource([1, 2, TestingSource.EOF, 3])).sink(sink)
    >>> _ = p.execute(); sink.records()
    [1, 2]
    """

    __test__ = False  # not a pytest test class
    EOF = _Marker("EOF")
    ABORT = _Marker("ABORT")

    def __init__(self, items) -> None:
        self.items = tuple(items)

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        return _TestingReader(self.items, task_index, parallelism)

    def describe(self) -> str:
        return f"TestingSource({plural(len(self.items), 'item')})"


class _TestingWriter(SinkWriter):
    def __init__(self, sink: TestingSink, task_index: int) -> None:
        self.sink = sink
        self.task_index = task_index
        self.staged: dict[int, list] = {}

    def write(self, window: int, records: list) -> None:
        self.staged.setdefault(window, []).extend(records)

    def finish_window(self, window: int) -> None:
        self.staged.setdefault(window, [])

    def publish(self, window: int) -> None:
        for done in sorted(w for w in self.staged if w <= window):
            records = self.staged.pop(done)
            with self.sink._lock:
                self.sink.windows.setdefault(done, []).extend(records)

    def recover(self, window: int) -> None:
        self.staged.clear()  # staged records lived in the failed run's memory


class TestingSink(Sink):
    """Records everything written to it in memory, by window (in-process environments only).

    ``records()`` lists every record in window order; ``windows`` maps window id to its records.
    """

    __test__ = False

    def __init__(self) -> None:
        self.windows: dict[int, list] = {}
        self._lock = threading.Lock()

    def create_writer(self, task_index: int, parallelism: int) -> SinkWriter:
        return _TestingWriter(self, task_index)

    def records(self) -> list:
        """Every record, in window order."""
        return list(itertools.chain.from_iterable(self.windows[w] for w in sorted(self.windows)))
