"""Process functions with progress notifications: a callback once a window's input is complete.

Naiad's operators ask to be *notified* at a timestamp and are called back once no record of that
timestamp can arrive any more. In gyreflow the timestamps are windows: ``ctx.notify_at(w)`` from
``process`` (or from a callback) asks for ``on_notify(w, ctx)`` for the current key, and it runs when
every record of window ``w`` has reached this task, before the window's barrier goes on. The pending
requests are keyed state: they are snapshotted with the window, move with their key group when the
job is rescaled, and a request fires exactly once, also after a resume (its window's output and the
removal of the request are one atomic step). A request for a window after the input's last one never
runs: the windows are processing windows, and no such window comes.
"""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.runtime.dataflow.operators import Operator, frozen
from gyreflow.runtime.errors import RecordError

_NO_VALUE = object()


class ProcessContext:
    """What a process function sees: the window, the current key and its state, ``emit``,
    ``notify_at`` and the operator's parameters (set by ``gyreflow control``)."""

    __slots__ = ("_operator", "key", "window")

    def __init__(self, operator: ProcessOperator) -> None:
        self._operator = operator
        self.key = None
        self.window = 0

    @property
    def task_index(self) -> int:
        """This task's index among the operator's parallel tasks."""
        return self._operator.ctx.task_index

    @property
    def parallelism(self) -> int:
        """How many parallel tasks the operator has."""
        return self._operator.ctx.parallelism

    def emit(self, value) -> None:
        """Send ``value`` downstream, in the current window."""
        self._operator.pending_out.append(value)

    def notify_at(self, window: int) -> None:
        """Call ``on_notify(window, ctx)`` for the current key once window ``window``'s input is
        complete (the current window or a later one)."""
        self._operator.request(self.key, window, self.window)

    def get_state(self, default=None):
        """The current key's state value (``default`` when it has none)."""
        entry = self._operator.table.data.get(self.key)
        return default if entry is None or entry[0] is _NO_VALUE else entry[0]

    def set_state(self, value) -> None:
        """Set the current key's state value (kept across windows and snapshotted)."""
        self._operator.set_value(self.key, value)

    def clear_state(self) -> None:
        """Forget the current key's state value (its pending notifications stay)."""
        self._operator.set_value(self.key, _NO_VALUE)

    def changelog(self, apply: Callable, size: Callable):
        """The operator's changelog table (``state.keys.logged.LoggedTable``, made on first use,
        from ``open`` on): a value per key group whose snapshots write the changes ``record``ed for
        it, not the value; ``apply(value, change)`` repeats a change on a restore."""
        from gyreflow.state.keys.logged import logged_table

        operator = self._operator
        return logged_table(operator.ctx.state, f"{operator.name}:changes", apply, size)

    def parameter(self, name: str, default=None):
        """The operator's parameter ``name`` as last set by ``gyreflow control``, else ``default``."""
        return self._operator.ctx.parameters.get(self._operator.name, {}).get(name, default)


class ProcessOperator(Operator):
    """Runs a ``ProcessFunction`` on a keyed stream; state per key is ``(value, pending windows)``."""

    def __init__(self, name: str, key_fn: Callable, function) -> None:
        super().__init__(name)
        self.key_fn = key_fn
        self.function = function
        self.pending_out: list = []
        self.due: dict[int, dict] = {}  # window -> keys asking for it (insertion ordered)
        self.context = ProcessContext(self)
        self.notifying = False

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = ctx.state.table(self.name)
        self.restored()
        opener = getattr(self.function, "open", None)
        if callable(opener):
            opener(self.context)

    def restored(self) -> None:
        """Rebuild the index of pending notifications from the (restored) state."""
        self.due = {}
        for key, (_, windows) in self.table.data.items():
            for window in windows:
                self.due.setdefault(window, {})[key] = None

    def set_value(self, key, value) -> None:
        entry = self.table.data.get(key)
        windows = () if entry is None else entry[1]
        self._store(key, value, windows)

    def _store(self, key, value, windows: tuple) -> None:
        if value is _NO_VALUE and not windows:
            self.table.delete(key)
        else:
            self.table.put(key, (value, windows))

    def request(self, key, window: int, current: int) -> None:
        earliest = current + 1 if self.notifying else current
        if not isinstance(window, int) or window < earliest:
            which = "a later window" if self.notifying else "the current window or a later one"
            msg = f"notify_at({window!r}) in window {current}: a notification is for {which}"
            raise ValueError(msg)
        entry = self.table.data.get(key)
        value, windows = (_NO_VALUE, ()) if entry is None else entry
        if window not in windows:
            self._store(key, value, (*windows, window))
            self.due.setdefault(window, {})[key] = None

    def process(self, batch: list) -> None:
        self.records_in += len(batch)
        context, key_fn, handle = self.context, self.key_fn, self.function.process
        context.window = self.ctx.window
        record = None
        try:
            for record in batch:
                context.key = key_fn(record)
                handle(record, context)
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc
        self._flush()

    def finish(self, window: int) -> None:
        """Every record of ``window`` is in: call back each key that asked for it, in the order
        the requests were made (a callback may ask again, for a later window). Requests for
        windows after the input's last one never run: no such window comes."""
        context, notify = self.context, self.function.on_notify
        context.window = window
        keys = self.due.pop(window, {})
        key = None
        self.notifying = True
        try:
            for key in keys:
                entry = self.table.data.get(key)
                if entry is None or window not in entry[1]:
                    continue
                self._store(key, entry[0], tuple(w for w in entry[1] if w != window))
                context.key = key
                notify(window, context)
        except RecordError:
            raise  # a function that names its own record (a query's row)
        except Exception as exc:
            raise RecordError(self.name, (key, f"notification of window {window}"), exc) from exc
        finally:
            self.notifying = False
        self._flush()

    def _flush(self) -> None:
        out, self.pending_out = self.pending_out, []
        self._emit([frozen(value) for value in out])
