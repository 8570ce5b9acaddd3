"""Errors raised while running a pipeline, naming the operator, window, task and record."""

from __future__ import annotations

import pickle
import traceback


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


class PlanNotShippableError(PipelineDefinitionError, TypeError):
    """A pipeline holds an object that cannot be sent to Spark executors."""


class DataError(RuntimeError):
    """Input the job cannot read or output it cannot write; the message names the file and, for
    input, the byte offset. Completed windows stay completed: fix the data, then ``--resume``."""

    def __init__(self, message: str, window: int | None = None) -> None:
        super().__init__(message)
        self.window = window


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
        self.cause = cause
        self.located = located
        self.original_traceback = "".join(traceback.format_exception(cause))
        shown = repr(record)
        if len(shown) > 200:
            shown = shown[:200] + "..."
        where = f"record {shown}" if located else "a record it could not single out"
        msg = (
            f"operator {operator!r} failed in window {window} on task {task!r} while processing "
            f"{where}: {type(cause).__name__}: {cause}\n\nOriginal traceback:\n"
            f"{self.original_traceback}"
        )
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
    error.args = (error.args[0].split("\n\nOriginal traceback:")[0]
                  + "\n\nOriginal traceback:\n" + tb,)
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
        msg = (
            f"the snapshot store failed while {what} window {window} ({backend}): {reason}. "
            f"The last completed window is {last_completed}; once the store works again, run with "
            f"--resume to continue from window {last_completed + 1}"
        )
        super().__init__(msg)


def locate_failure(operator: str, batch: list, probe, cause: BaseException) -> RecordError:
    """Find the first record of ``batch`` on which ``probe`` raises.

    Operators run whole batches through comprehensions for speed; only on failure do they replay the
    batch one record at a time to name the culprit (pure functions are assumed, as everywhere).
    """
    for record in batch:
        try:
            probe(record)
        except Exception as exc:  # noqa: BLE001 - any user exception is reported
            return RecordError(operator, record, exc)
    return RecordError(operator, None, cause, located=False)
