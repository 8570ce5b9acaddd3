"""Errors raised while running a pipeline, naming the operator, window, task and record."""

from __future__ import annotations

import operator as _operator
import pickle
from collections.abc import Iterator

from gyreflow.runtime.user_code import user_frames, user_traceback


class PipelineDefinitionError(Exception):
    """A pipeline is defined in a way gyreflow cannot run; the message says what to change.

    Raised while a script builds its pipelines or before any data moves (``gyreflow run`` exits 2).
    """


class KeyRequiredError(PipelineDefinitionError, AttributeError):
    """A keyed operation (reduce, count, aggregate, window, join) on a stream that is not keyed."""

    OPERATIONS = ("reduce", "count", "aggregate", "window", "join", "join_table")

    @classmethod
    def for_operation(cls, name: str, note: str = "") -> KeyRequiredError:
        """The error for calling ``name`` on a stream that is not keyed: what to call first."""
        return cls(f"{name}() needs a keyed stream: call key_by first, e.g. "
                   f"stream.key_by(lambda record: record[0]).{name}(...) to group by the first "
                   f"field, or key_by(lambda record: 0) to {name} the whole stream as one group{note}")


class ParallelismError(PipelineDefinitionError, ValueError):
    """A parallelism below 1 or above ``state.max_parallelism`` (a task would own no key group)."""


class PlanNotShippableError(PipelineDefinitionError, TypeError):
    """A pipeline holds an object that cannot be sent to Spark executors."""


class DataError(RuntimeError):
    """Input the job cannot read or output it cannot write; the message names the file and, for
    input, the byte offset. Completed windows stay completed: fix the data, then ``--resume``."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


class OutputError(DataError):
    """Output the job cannot write: a folder made read-only while it runs, a full disk. Completed
    windows stay completed: fix the output, then ``--resume``."""


class RecordError(Exception):
    """Internal: a user function raised on ``record`` inside operator ``operator``."""

    def __init__(self, operator: str, record: object, cause: BaseException, located: bool = True):
        super().__init__(operator, record)
        self.operator = operator
        self.record = record
        self.cause = cause
        self.located = located


class UserFunctionError(RuntimeError):
    """A user function raised: the job stopped; completed windows stay completed.

    Attributes name the operator, window, task and record; ``original_traceback`` is the user's
    traceback as text.
    """

    def __init__(self, operator: str, window: int, task: str, record: object, cause: BaseException,
                 located: bool = True) -> None:
        self.operator = operator
        self.window = window
        self.task = task
        self.record = record
        self.located = located
        self.cause = cause = key_error_for(cause)
        self.original_traceback = user_traceback(cause)
        where = f"record {_shown(record)}" if located else "a record it could not single out"
        msg = (f"operator {operator!r} failed in window {window} on task {task!r} while processing "
               f"{where}: {type(cause).__name__}: {cause}")
        if self.original_traceback.startswith("Traceback"):  # else no frame of the user's to show
            msg += f"\n\nOriginal traceback:\n{self.original_traceback}"
        super().__init__(msg)

    def __reduce__(self):
        # Crosses process boundaries (Spark tasks): keep the user's exception and record when they
        # pickle, else their text.
        cause: object = self.cause
        record: object = self.record
        try:
            pickle.dumps(cause)
        except Exception:  # noqa: BLE001 - any pickling failure
            cause = f"{type(self.cause).__name__}: {self.cause}"
        try:
            pickle.dumps(record)
        except Exception:  # noqa: BLE001
            record = repr(record)
        return (_rebuild_user_error, (self.operator, self.window, self.task, record,
                                      self.original_traceback, cause, self.located))


class RemoteError(Exception):
    """The text of an exception raised in another process."""


def _rebuild_user_error(operator, window, task, record, tb, cause, located):
    if isinstance(cause, str):
        cause = RemoteError(cause)
    error = UserFunctionError(operator, window, task, record, cause, located)
    error.original_traceback = tb
    head = error.args[0].split("\n\nOriginal traceback:")[0]
    error.args = (head + "\n\nOriginal traceback:\n" + tb if tb.startswith("Traceback") else head,)
    return error


class SnapshotNotRetainedError(ValueError):
    """``--from-window N`` names a version the store no longer (or never) retained."""


class SnapshotWriteError(RuntimeError):
    """The snapshot store failed while the job ran: no window after ``last_completed`` completed.

    ``backend`` describes the store, ``window`` is the window whose snapshot or commit failed.
    """

    def __init__(self, backend: str, window: int, last_completed: int, cause: BaseException,
                 committing: bool = False) -> None:
        self.backend = backend
        self.window = window
        self.last_completed = last_completed
        self.cause = cause
        what = "committing" if committing else "writing the snapshot of"
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]  # not the SQL dump
        # A writer in another process says which of its operations failed: removing old versions
        # (after a commit) or opening the store comes before the oldest write not yet durable.
        operation = reason.split(" failed in ", 1)[0] if " failed in " in reason else ""
        doing = {"prune": "removing snapshots older than the retained ones",
                 "open": "opening the store"}.get(operation, f"{what} window {window}")
        if backend.startswith("memory"):
            then = ("the memory backend keeps nothing once the process ends: run again with "
                    "--fresh, or choose a persistent backend (state.backend)")
        else:
            then = (f"once the store works again, run with --resume to continue from window "
                    f"{last_completed + 1}")
        # Windows after the last completed one may be in flight: the failed one can lie past it.
        flying = (f" (windows {last_completed + 1} to {window} were in flight)"
                  if operation not in ("prune", "open") and window > last_completed + 1 else "")
        msg = (f"the snapshot store failed while {doing} ({backend}): {reason}. The last completed "
               f"window is {last_completed}{flying}; {then}")
        super().__init__(msg)


def parallelism_error(parallelism: object, max_parallelism: int) -> str | None:
    """Why ``parallelism`` cannot run an operator's tasks, or None if it can: one check for a plan
    that is built and for ``gyreflow control rescale``. A task beyond ``max_parallelism`` (the
    number of key groups) would own no key group.

    >>> parallelism_error(1000, 128)
    'parallelism must be an integer from 1 to state.max_parallelism (128), got 1000'
    >>> parallelism_error(4, 128) is None
    True
    """
    if isinstance(parallelism, int) and not isinstance(parallelism, bool) and (
            1 <= parallelism <= max_parallelism):
        return None
    return (f"parallelism must be an integer from 1 to state.max_parallelism ({max_parallelism}), "
            f"got {parallelism!r}")


def locate_failure(operator: str, batch: list, remaining: Iterator,
                   cause: BaseException) -> RecordError:
    """The record of ``batch`` a user function raised on, found without calling it again.

    Operators run whole batches through comprehensions for speed, iterating ``remaining``
    (``iter(batch)``): the list iterator still knows how many records it had not handed out, so
    the failing record is the one it handed out last. A function with side effects runs once per
    record, failure or not.

    >>> batch = [1, 2, 0, 4]
    >>> remaining = iter(batch)
    >>> try:
    ...     [1 / x for x in remaining]
    ... except ZeroDivisionError as exc:
    ...     error = locate_failure("invert", batch, remaining, exc)
    >>> error.record, error.located
    (0, True)
    """
    position = len(batch) - _operator.length_hint(remaining) - 1
    if 0 <= position < len(batch):
        return RecordError(operator, batch[position], cause)
    return RecordError(operator, None, cause, located=False)


def key_error_for(cause: BaseException) -> BaseException:
    """``cause`` as the error that names a bad key, when it is Python refusing to hash a key inside
    gyreflow (``unhashable type: 'list'``); else ``cause`` as it is. Every host and every keyed
    operator reports a bad key with this one message."""
    text = str(cause)
    if not (isinstance(cause, TypeError) and text.startswith("unhashable type: ")):
        return cause
    if user_frames(cause.__traceback__):
        return cause  # the user's own code hashed something: its own error
    from gyreflow.state.keys.keygroups import KEY_ADVICE, KEY_TYPES

    kind = text.removeprefix("unhashable type: ").strip("'")
    msg = (f"cannot partition by a key of type {kind} (or a tuple holding one): keys must be "
           f"{KEY_TYPES}; {KEY_ADVICE}")
    return TypeError(msg)


def _shown(record: object) -> str:
    shown = repr(record)
    return shown if len(shown) <= 200 else shown[:200] + "..."
