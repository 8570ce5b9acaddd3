"""Records that cannot be pickled from a worker process: named as the user's error, the way a
user function that raised is, instead of stopping the worker."""

from __future__ import annotations

import pickle

from gyreflow.runtime.errors import RecordError, UserFunctionError
from gyreflow.scheduler.events import TaskFailed


def collected_or_failed(item: tuple, runners: dict) -> tuple:
    """``item`` (an item for the driver); for a report whose collected records do not all pickle,
    the failure of its task naming the collect and the first such record (exit status 1, as a
    user function). ``runners``: the worker's task runners by task id."""
    done = item[1] if item[0] == "report" else None
    for name, records in getattr(done, "collected", ()):
        for record in records:
            try:
                pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - the record to name
                task = runners[done.task].task
                operator = next((op.name for op in task.collectors if op.result_name == name),
                                f"collect {name!r}")
                cause = TypeError(f"a record collected as {name!r} goes to the driver process "
                                  f"and must pickle: {type(exc).__name__}: {exc}")
                error = UserFunctionError(operator, done.window, task.name, record, cause)
                return "report", TaskFailed(done.cycle, done.task, done.window, error)
    return item


def not_picklable(label: str, batch, exc: Exception) -> RecordError:
    """The error of a batch for another worker process that does not pickle: it names the edge's
    operator and the first record that does not (a whole batch of combined counts when the key
    itself is the cause: the record is then the batch's first)."""
    records = batch if type(batch) is list else []
    record = records[0] if records else batch
    for item in records:
        try:
            pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - the one to name
            record = item
            break
    cause = TypeError(f"a record going to another worker process (edge {label}) must pickle: "
                      f"{type(exc).__name__}: {exc}")
    return RecordError(label.split("->")[0], record, cause)
