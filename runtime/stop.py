"""Stopping a running job from outside: at the next window boundary, or at once when asked twice.

The command line turns the first SIGINT (Ctrl-C) or SIGTERM into a graceful stop: the job launches no
new window, lets the windows in flight complete (or abandons them cleanly: their output is never
published), and ends with ``JobStopped`` naming the last completed window. A second signal stops at
once with ``JobInterrupted``; the state is left as a crash leaves it, so ``--resume`` continues,
with a backend whose state outlives the process (``resume_advice`` says what is true for the one in
use: the memory backend keeps nothing).
"""

from __future__ import annotations

import signal
from collections.abc import Callable


class JobStopped(Exception):  # noqa: N818 - an outcome, not an error
    """The job stopped at a window boundary because it was asked to."""

    def __init__(self, signum: int, last_completed: int = 0) -> None:
        super().__init__(signum, last_completed)
        self.signum = signum
        self.last_completed = last_completed
        self.window = None  # stop launching at once (a failure's window would let earlier ones run)

    def __str__(self) -> str:
        return f"stopped after window {self.last_completed}"


class JobInterrupted(Exception):  # noqa: N818 - an outcome, not an error
    """A second stop request: the job stopped at once, as after a crash."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.last_completed = 0


class StopRequest:
    """Set by signal handlers, read by the job driver between steps.

    ``immediate``, when set, is called on the second request instead of raising ``JobInterrupted``
    in whatever code the signal interrupted (a process that must end at once, whatever it was
    waiting for, exits there). The driver keeps ``last_completed`` up to date for its message.
    """

    def __init__(self, immediate: Callable[[int, int], None] | None = None) -> None:
        self.signum: int | None = None
        self.count = 0
        self.last_completed = 0
        self.immediate = immediate
        self.backend: str | None = None  # the running job's state backend (set by its run)

    def request(self, signum: int) -> None:
        """Ask for a stop; the second request stops at once."""
        self.count += 1
        if self.signum is None:
            self.signum = signum
        if self.count > 1:
            if self.immediate is not None:
                self.immediate(signum, self.last_completed)
            raise JobInterrupted(signum)

    @property
    def requested(self) -> bool:
        return self.signum is not None


def resume_advice(backend: str | None, what: str = "run again with --resume to continue") -> str:
    """What to do next after a stop or a failure, true for the state ``backend`` in use: ``what``
    (a resume) for a backend whose state outlives the process; for the memory backend, which keeps
    nothing once the process ends, to start over or choose a persistent backend.

    >>> resume_advice("rocksdb")
    'run again with --resume to continue'
    >>> resume_advice("memory")  # doctest: +ELLIPSIS
    'the memory state backend keeps nothing once the process ends: run again with --fresh ...'
    """
    if backend != "memory":
        return what
    return ("the memory state backend keeps nothing once the process ends: run again with "
            '--fresh to start over, or choose a persistent backend (state.backend = "rocksdb" or '
            '"jdbc") to be able to resume')


def exit_status(signum: int) -> int:
    """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + int(signum)


def install_handlers(stop: StopRequest) -> dict:
    """Route SIGINT and SIGTERM to ``stop``; returns the previous handlers (``restore_handlers``)."""
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, lambda number, _frame: stop.request(number))
    return previous


def restore_handlers(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
