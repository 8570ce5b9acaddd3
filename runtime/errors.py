"""Errors raised while running a pipeline, naming the operator, window, task and record."""

from __future__ import annotations

import contextlib
import io
import operator as _operator
import os
import pickle
import sys
import sysconfig
import traceback
from collections.abc import Iterator


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
    if _user_frames(cause.__traceback__):
        return cause  # the user's own code hashed something: its own error
    from gyreflow.state.keys.keygroups import KEY_ADVICE, KEY_TYPES

    kind = text.removeprefix("unhashable type: ").strip("'")
    msg = (f"cannot partition by a key of type {kind} (or a tuple holding one): keys must be "
           f"{KEY_TYPES}; {KEY_ADVICE}")
    return TypeError(msg)


def _shown(record: object) -> str:
    shown = repr(record)
    return shown if len(shown) <= 200 else shown[:200] + "..."


# --- the user's own frames -----------------------------------------------------------------------

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL_DIRS = tuple(os.path.join(_ROOT, part) + os.sep
                       for part in ("api", "plan", "scheduler", "runtime", "state", "gyreflow"))
_INTERNAL_FILES = ("<frozen runpy>", "<fused chain>")
_LIBRARY_PACKAGES = ("click", "pyspark", "py4j", "cloudpickle")
_LIBRARY_DIRS = tuple({os.path.abspath(path) + os.sep for name in ("stdlib", "platstdlib",
                                                                    "purelib", "platlib")
                       if (path := sysconfig.get_paths().get(name))})


def machinery_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` belongs to what runs a script or a task (click, runpy,
    PySpark's worker), neither gyreflow's nor the user's."""
    if filename in _INTERNAL_FILES or filename.startswith("<attrs generated"):
        return True
    for base in _LIBRARY_DIRS:
        if filename.startswith(base):
            top = filename[len(base):].split(os.sep, 1)[0]
            return top in _LIBRARY_PACKAGES or top == "runpy.py"
    return False


def internal_frame(filename: str) -> bool:
    """Whether a frame of ``filename`` is gyreflow's own or its machinery's, not the user's."""
    return filename.startswith(_INTERNAL_DIRS) or machinery_frame(filename)


def _library_frame(filename: str) -> bool:
    return filename.startswith(_LIBRARY_DIRS) or filename.startswith("<frozen ")


def _user_frames(tb) -> list[traceback.FrameSummary]:
    """The frames of ``tb`` that are not gyreflow's, from the first frame of the user's own code
    (the standard library frames gyreflow called before it are left out too)."""
    frames = [frame for frame in traceback.extract_tb(tb) if not internal_frame(frame.filename)]
    for index, frame in enumerate(frames):
        if not _library_frame(frame.filename):
            return frames[index:]
    return []


def user_traceback(error: BaseException) -> str:
    """``error``'s traceback as text with the user's frames only; an exception gyreflow raised
    while handling another (its own bookkeeping) is left out of the chain.

    Empty frames leave just the exception's line (a flat_map that returned None, say).
    """
    shown = traceback.TracebackException.from_exception(error)
    links = [(shown, error)]
    while links:
        link, exc = links.pop()
        link.stack = traceback.StackSummary.from_list(_user_frames(exc.__traceback__))
        for attribute in ("__cause__", "__context__"):
            chained = getattr(link, attribute)
            original = getattr(exc, attribute)
            if chained is None or original is None:
                continue
            if _user_frames(original.__traceback__):
                links.append((chained, original))
            else:
                setattr(link, attribute, None)
    return "".join(shown.format())


def user_frames_text(error: BaseException) -> str:
    """The user's own frames of ``error``'s traceback as text (``File ..., line N, in f`` and the
    line's source), without a heading or the exception's line."""
    return "".join(traceback.StackSummary.from_list(_user_frames(error.__traceback__)).format())


def fault_traceback(error: BaseException) -> str:
    """``error``'s whole traceback as text for a report of a fault of gyreflow, without the frames
    of what ran the script (click, runpy, gyreflow's command line)."""
    cli = os.path.join(_ROOT, "api", "cli") + os.sep
    shown = traceback.TracebackException.from_exception(error)
    links = [shown]
    while links:
        link = links.pop()
        link.stack = traceback.StackSummary.from_list(
            [frame for frame in link.stack
             if not machinery_frame(frame.filename) and not frame.filename.startswith(cli)])
        links.extend(chained for chained in (link.__cause__, link.__context__) if chained)
    return "".join(shown.format())


def user_location(error: BaseException) -> tuple[str, int] | None:
    """The file and line of the innermost frame of the user's own code in ``error``'s traceback
    (for a SyntaxError, the line that does not parse), or None."""
    if isinstance(error, SyntaxError) and error.filename and error.lineno:
        return error.filename, error.lineno
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not internal_frame(f.filename) and not _library_frame(f.filename)]
    if not frames:
        return None
    return frames[-1].filename, frames[-1].lineno or 0


def raised_inside_gyreflow(error: BaseException) -> str | None:
    """Where ``error`` was raised if gyreflow's own code raised it: ``"api"`` when every frame after
    the user's last one is in gyreflow's public layer (an argument or a name the user's call got
    wrong), ``"core"`` when it came from deeper; None when the user's code (or a library it called
    itself) raised it."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not frames[-1].filename.startswith(_INTERNAL_DIRS):
        return None
    trailing = []
    for frame in reversed(frames):
        if not internal_frame(frame.filename) and not _library_frame(frame.filename):
            break
        trailing.append(frame.filename)
    api = os.path.join(_ROOT, "api") + os.sep
    if all(name.startswith(api) or not name.startswith(_INTERNAL_DIRS) for name in trailing):
        return "api"
    return "core"


def exception_line(error: BaseException) -> str:
    """``Type: message`` as Python prints it last when the exception ends a program, hints
    included (``Did you mean: 'map'?``, which the traceback module of Python 3.11 leaves out)."""
    shown = io.StringIO()
    with contextlib.redirect_stderr(shown):
        sys.__excepthook__(type(error), error, None)
    lines = [line for line in shown.getvalue().splitlines() if line.strip()]
    return lines[-1].strip() if lines else traceback.format_exception_only(error)[-1].strip()
