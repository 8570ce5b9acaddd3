"""Sources: the reader contract, in-memory collections, Arrow columns and Python generators (text
files are in ``file_source``)."""

from __future__ import annotations

import inspect
import itertools
import time
from collections.abc import Callable, Iterable, Iterator

import attrs

from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch, as_record_batch, concat, join_batches


class SourceReader:
    """Reads one source task's share of the input in batches.

    ``offset()`` is a picklable position after the records read so far; ``seek(offset)`` returns
    there, which is how a resumed job replays from a completed window.

    A *live* reader (``live = True``) has records that arrive over time: ``poll`` returns what
    arrives within a time limit, and only ``exhausted`` ends the input (a short or empty poll does
    not), so processing-time windows close on time while the source waits for records.
    """

    live = False

    def read(self, max_records: int) -> list:
        """Return the next ``max_records`` records; fewer (down to none) only when the input
        ended. A reader that skips what carries no record (blank lines, empty row groups) reads on
        past it: a short batch ends the source's input."""
        raise NotImplementedError

    def poll(self, max_records: int, timeout: float | None) -> list:
        """Live readers: up to ``max_records`` records arriving within ``timeout`` seconds (None:
        wait until there are ``max_records`` or the input ended)."""
        return self.read(max_records)

    @property
    def exhausted(self) -> bool:
        """Live readers: the input ended and every record was returned."""
        return False

    def offset(self) -> object:
        """The position after the last record returned."""
        raise NotImplementedError

    def seek(self, offset: object) -> None:
        """Continue from ``offset``, a value returned by ``offset()``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release files and iterators."""


# The longest a poll of growing input blocks: a stop request is seen within it.
_LONGEST_WAIT = 0.5


class GrowingInputReader(SourceReader):
    """A reader of input that may grow while the job runs (a followed directory or table).

    Subclasses set ``source`` (with ``follow``, ``poll_interval`` and ``until_idle``) and
    ``last_data`` (the wall-clock time of the last record, kept in their offset so that idle time
    counts across processes), and give ``_take(n)``: up to ``n`` records there now. ``_next_look``
    says when looking again may find more.
    """

    ended = False

    @property
    def live(self) -> bool:
        return self.source.follow

    def _take(self, max_records: int) -> list:
        raise NotImplementedError

    def _next_look(self) -> float:
        """The monotonic time at which ``_take`` may find new records."""
        return time.monotonic() + self.source.poll_interval

    def _look_now(self) -> None:
        """Let the next ``_take`` look for new input at once (readers that look at most every
        ``poll_interval`` seconds)."""

    def read(self, max_records: int) -> list:
        return self.poll(max_records, None)

    def poll(self, max_records: int, timeout: float | None) -> list:
        if self.ended:
            return []
        out = self._take(max_records)
        if not self.source.follow:
            self.ended = not out
            return out
        # A count window (no timeout) is waited for in short polls: a short batch does not end
        # a live reader's window, and between polls the job sees a stop request.
        deadline = time.monotonic() + (timeout if timeout is not None else _LONGEST_WAIT)
        idle = self.source.until_idle
        if out:
            self.last_data = time.time()
        while len(out) < max_records:
            if idle is not None and time.time() - self.last_data >= idle:
                if not out:  # one last look: input that came since the last one is not lost
                    self._look_now()
                    out = self._take(max_records)
                    if out:
                        self.last_data = time.time()
                self.ended = not out  # what came is handed over first; the next poll ends
                break
            now = time.monotonic()
            if now >= deadline:
                break
            wake = min(self._next_look(), deadline)
            if idle is not None:
                wake = min(wake, now + max(0.0, self.last_data + idle - time.time()))
            time.sleep(max(0.0, wake - now))
            more = self._take(max_records - len(out))
            if more:
                self.last_data = time.time()
                out = join_batches(out, more)
        return out

    @property
    def exhausted(self) -> bool:
        return self.ended


class Source:
    """Base of sources: a light description that opens a reader per source task."""

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        """Open the reader of task ``task_index`` of ``parallelism``."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short text for ``explain``."""
        return type(self).__name__

    def requires(self) -> tuple:
        """The modules its readers import, as ``Requirement`` values (api/connectors/requirements.py):
        a job whose plan needs one that is not installed stops before any data moves, with one
        line naming the operator and how to install the module."""
        return ()


class _IteratorReader(SourceReader):
    """A reader over an iterator factory; the offset is the number of records consumed."""

    def __init__(self, make: Callable[[], Iterator]) -> None:
        self._make = make
        self._it = make()
        self._consumed = 0

    def read(self, max_records: int) -> list:
        batch = list(itertools.islice(self._it, max_records))
        self._consumed += len(batch)
        return batch

    def offset(self) -> int:
        return self._consumed

    def seek(self, offset: object) -> None:
        self._it = self._make()
        skipped = sum(1 for _ in itertools.islice(self._it, int(offset)))
        self._consumed = skipped

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()


class _LiveIteratorReader(_IteratorReader):
    """A reader over a generator whose records may take time to come: a thread pulls them into a
    bounded queue, ``poll`` waits for them no longer than asked, and the end is explicit."""

    live = True
    _END = object()

    def __init__(self, make: Callable[[], Iterator]) -> None:
        self._make = make
        self._consumed = 0
        self._restarted = False
        self._start(make())

    def _start(self, iterator: Iterator) -> None:
        import queue
        import threading

        self._it = iterator
        self._queue: queue.Queue = queue.Queue(maxsize=8192)
        self._ended = False
        self._error: BaseException | None = None
        self._stop = threading.Event()
        # Started by the first poll: the generator's time runs with the windows', not before.
        self._thread = threading.Thread(target=self._pull, name="gyreflow-source", daemon=True)

    def _pull(self) -> None:
        import queue

        try:
            for record in self._it:
                while not self._stop.is_set():
                    try:
                        self._queue.put(record, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reading task
            self._error = exc
        self._queue.put(self._END)

    def poll(self, max_records: int, timeout: float | None) -> list:
        import queue
        import time

        out: list = []
        if self._ended:
            return out
        if not self._thread.is_alive() and self._thread.ident is None:
            self._thread.start()
        if self._restarted:
            # The generator was started again and walked to the offset (a resume, or a task built
            # afresh for a window): wait for its next record, so that a short window cannot end
            # empty again and again while a slow generator catches up.
            self._restarted = False
            first = self._queue.get()
            if first is self._END:
                self._ended = True
                if self._error is not None:
                    raise self._error
                return out
            out.append(first)
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(out) < max_records:
            try:
                if out or deadline is not None and deadline <= time.monotonic():
                    record = self._queue.get_nowait()
                else:
                    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                    record = self._queue.get(timeout=wait)
            except queue.Empty:
                break
            if record is self._END:
                self._ended = True
                if self._error is not None:
                    raise self._error
                break
            out.append(record)
        self._consumed += len(out)
        return out

    def read(self, max_records: int) -> list:
        return self.poll(max_records, None)

    @property
    def exhausted(self) -> bool:
        return self._ended

    def seek(self, offset: object) -> None:
        self.close()
        iterator = self._make()
        skipped = sum(1 for _ in itertools.islice(iterator, int(offset)))
        self._consumed = skipped
        self._restarted = True
        self._start(iterator)

    def close(self) -> None:
        self._stop.set()
        close = getattr(self._it, "close", None)
        if close is not None:
            try:
                close()
            except ValueError:
                pass  # running in the pulling thread, which stops before its next record


@attrs.frozen(eq=False)
class CollectionSource(Source):
    """Records from an in-memory sequence; task ``i`` of ``p`` reads items ``i, i + p, i + 2p, ...``.

    >>> reader = CollectionSource([1, 2, 3]).create_reader(0, 1)
    >>> reader.read(2), reader.read(2), reader.read(2)
    ([1, 2], [3], [])
    """

    items: tuple = attrs.field(converter=lambda items: tuple(items))  # not ``tuple``: attrs reads a
    # builtin converter's signature through tokenize, whose patterns cost start-up ~2 ms to compile

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        items = self.items
        return _IteratorReader(lambda: itertools.islice(items, task_index, None, parallelism))

    def describe(self) -> str:
        return f"CollectionSource({plural(len(self.items), 'item')})"


@attrs.frozen(eq=False)
class GeneratorSource(Source):
    """Records from a Python generator function.

    ``factory`` is called in each source task as ``factory(task_index, parallelism)`` when it takes two
    arguments (each task yields its own share), or as ``factory()`` when it takes none (then the source
    runs with parallelism 1). The offset is the count of records consumed: a resumed job calls the
    factory again and skips them, so the generator must be deterministic.

    The generator is live: it may take its time between records (polling a queue, a socket, a
    clock). A ``TimeTumblingWindow`` closes on time while it waits, and the input ends only when
    the generator returns.
    """

    factory: Callable

    @property
    def splittable(self) -> bool:
        """Whether the factory takes (task_index, parallelism)."""
        try:
            return len(inspect.signature(self.factory).parameters) >= 2
        except (TypeError, ValueError):
            return False

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        if self.splittable:
            return _LiveIteratorReader(lambda: iter(self.factory(task_index, parallelism)))
        if parallelism != 1:
            msg = (
                f"GeneratorSource({getattr(self.factory, '__name__', self.factory)}) takes no "
                "(task_index, parallelism) arguments, so it can only run with parallelism 1"
            )
            raise ValueError(msg)
        return _LiveIteratorReader(lambda: iter(self.factory()))

    def describe(self) -> str:
        return f"GeneratorSource({getattr(self.factory, '__name__', 'generator')})"


class _ArrowReader(SourceReader):
    """Reads column batches of up to ``max_records`` rows from an iterable of record batches; the
    offset is the number of rows consumed (a resume makes the iterable again and skips them)."""

    def __init__(self, make: Callable[[], Iterable], rows_per_batch: int) -> None:
        self.rows_per_batch = rows_per_batch
        self._make = make
        self._batches = iter(make())
        self._pending = None  # the rest of the record batch being read
        self._consumed = 0

    def read(self, max_records: int) -> list | ColumnBatch:
        parts = []
        needed = max_records
        while needed > 0:
            if self._pending is None or self._pending.num_rows == 0:
                item = next(self._batches, None)
                if item is None:
                    self._pending = None
                    break
                self._pending = as_record_batch(item)
                continue
            part = self._pending.slice(0, needed)
            self._pending = self._pending.slice(part.num_rows)
            parts.append(ColumnBatch(part))
            needed -= part.num_rows
        if not parts:
            return []
        self._consumed += max_records - needed
        return parts[0] if len(parts) == 1 else concat(parts)

    def offset(self) -> int:
        return self._consumed

    def seek(self, offset: object) -> None:
        self.close()
        self._batches = iter(self._make())
        self._pending = None
        self._consumed = 0
        skip = int(offset)
        while skip > 0:
            batch = self.read(min(skip, 1 << 20))
            if not batch:
                break
            skip -= len(batch)

    def close(self) -> None:
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


@attrs.frozen(eq=False)
class ArrowSource(Source):
    """Columns: records as Arrow record batches, which stay columnar through the operators
    gyreflow defines on columns (``key_by("column")``, ``count()``); user functions see each record
    as a dict.

    ``data`` is a ``pyarrow.Table`` or ``RecordBatch`` (task ``i`` of ``p`` reads the ``i``-th of
    ``p`` row ranges), or a function returning an iterable of record batches, tables or dicts of
    column name -> array: called as ``data(task_index, parallelism)`` when it takes two arguments
    (each task yields its own share), else as ``data()`` with parallelism 1. The offset is the
    number of rows read, so a resumed job calls the function again and skips them: it must give
    the same rows again. A source task reads ``rows_per_batch`` rows at a time (at least
    ``runtime.batch_size``): the work per batch is per column, not per row.

    >>> import pyarrow as pa
    >>> reader = ArrowSource(pa.table({"word": ["a", "b", "c"]})).create_reader(0, 1)
    >>> reader.read(2).rows(), reader.read(2).rows(), reader.read(2)
    ([{'word': 'a'}, {'word': 'b'}], [{'word': 'c'}], [])
    """

    data: object
    rows_per_batch: int = attrs.field(default=65_536, validator=attrs.validators.ge(1))

    @property
    def splittable(self) -> bool:
        """Whether every task reads its own share."""
        if not callable(self.data):
            return True
        try:
            return len(inspect.signature(self.data).parameters) >= 2
        except (TypeError, ValueError):
            return False

    def create_reader(self, task_index: int, parallelism: int) -> SourceReader:
        data = self.data
        if not callable(data):
            batch = as_record_batch(data)
            start = batch.num_rows * task_index // parallelism
            stop = batch.num_rows * (task_index + 1) // parallelism
            share = batch.slice(start, stop - start)
            return _ArrowReader(lambda: [share], self.rows_per_batch)
        if self.splittable:
            return _ArrowReader(lambda: data(task_index, parallelism), self.rows_per_batch)
        if parallelism != 1:
            msg = (f"ArrowSource({getattr(data, '__name__', data)}) takes no (task_index, "
                   "parallelism) arguments, so it can only run with parallelism 1")
            raise ValueError(msg)
        return _ArrowReader(data, self.rows_per_batch)

    def requires(self) -> tuple:
        from gyreflow.api.connectors.requirements import PYARROW

        return (PYARROW,)

    def describe(self) -> str:
        if callable(self.data):
            return f"ArrowSource({getattr(self.data, '__name__', 'batches')})"
        return f"ArrowSource({plural(as_record_batch(self.data).num_rows, 'row')})"


def as_source(value: Source | Iterable) -> Source:
    """Accept a Source, or wrap a plain iterable in a CollectionSource."""
    if isinstance(value, Source):
        return value
    if type(value).__module__.startswith("pyarrow") and type(value).__name__ in (
            "Table", "RecordBatch"):
        return ArrowSource(value)
    if isinstance(value, Iterable) and not isinstance(value, str | bytes):
        return CollectionSource(value)
    msg = f"expected a Source or an iterable of records, got {type(value).__name__}"
    raise TypeError(msg)
