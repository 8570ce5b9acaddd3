"""The states of cycle and iteration schedulers, and the error for an event a state does not allow."""

from __future__ import annotations

import enum

HISTORY = 10  # events a scheduler remembers for its error messages (a bounded window, not a log)


class CycleState(enum.Enum):
    """GeaFlow's cycle states."""

    START = "START"
    ROLLBACK = "ROLLBACK"
    INIT = "INIT"
    ITERATION_INIT = "ITERATION_INIT"
    EXECUTE_COMPUTE = "EXECUTE_COMPUTE"
    ITERATION_FINISH = "ITERATION_FINISH"
    CLEAN_CYCLE = "CLEAN_CYCLE"
    END = "END"


class SchedulingError(RuntimeError):
    """An event arrived that the scheduler's state does not allow; carries the recent history."""
