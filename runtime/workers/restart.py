"""The restart strategy: which failures a run starts again from its last completed window, and when.

Exponential delay as in Flink's ``exponential-delay`` strategy: the first restart waits
``restart.delay`` seconds, each further one ``restart.backoff`` times longer up to
``restart.max_delay``; after ``restart.attempts`` restarts the job stops with the last error; a run
that went ``restart.reset_seconds`` without a failure counts (and delays) from the start again.
A failure that would happen again the same way (a user function that raised, input that cannot be
read) is not restarted unless ``restart.user_errors`` says so; stops, bad configuration and damaged
state never are. A state store that is away for a while (a database that restarts: connection
refused, timeouts) is restarted like a lost worker; a store that refuses the job (authentication,
permissions) or holds damaged state is not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gyreflow.runtime.dataflow.task_runner import TaskError
from gyreflow.runtime.errors import DataError, UserFunctionError

_STORE_FAILURES = ("SnapshotWriteError", "BackendUnavailableError", "OperationalError",
                   "InterfaceError", "DisconnectionError")


def store_away(error: BaseException) -> bool:
    """Whether ``error`` is a state store that could not be reached or dropped the connection (a
    database restarting), not one that refused the job or holds damaged state.

    >>> store_away(ConnectionRefusedError(111, "Connection refused"))
    True
    >>> from gyreflow.state.shared.snapshot import SnapshotCorruptedError
    >>> store_away(SnapshotCorruptedError("checksum mismatch (connection refused)"))
    False
    """
    from gyreflow.state.shared.private import UnsafeLocationError

    if isinstance(error, UnsafeLocationError):
        return False
    if not (isinstance(error, ConnectionError | TimeoutError)
            or type(error).__name__ in _STORE_FAILURES):
        return False
    from gyreflow.state.stores.jdbc_sql import transient_failure

    return transient_failure(error)


class RestartStrategy:
    """Decides, failure by failure, whether the run starts again and after how long.

    >>> strategy = RestartStrategy(attempts=2, delay=1.0, backoff=2.0, max_delay=1.5,
    ...                            reset_seconds=60, clock=lambda: 0.0)
    >>> from gyreflow.runtime.workers.wire import WorkerLostError
    >>> lost = WorkerLostError("worker 0 killed by SIGKILL")
    >>> strategy.delay_for(lost), strategy.delay_for(lost), strategy.delay_for(lost)
    (1.0, 1.5, None)
    """

    def __init__(self, attempts: int, delay: float, backoff: float, max_delay: float,
                 reset_seconds: float, user_errors: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.attempts = attempts
        self.delay = delay
        self.backoff = backoff
        self.max_delay = max_delay
        self.reset_seconds = reset_seconds
        self.user_errors = user_errors
        self.clock = clock
        self.restarts = 0  # since the last reset
        self.last_failure: float | None = None

    @classmethod
    def from_config(cls, config, clock: Callable[[], float] = time.monotonic) -> RestartStrategy:
        """The strategy the ``restart.*`` keys describe."""
        return cls(config["restart.attempts"], config["restart.delay"], config["restart.backoff"],
                   config["restart.max_delay"], config["restart.reset_seconds"],
                   config["restart.user_errors"], clock)

    def restartable(self, error: BaseException) -> bool:
        """Whether ``error`` may not happen again on a new start."""
        # The workers' wire (multiprocessing, sockets): not imported by a job run in this process.
        from gyreflow.runtime.workers.wire import WorkerLostError

        if isinstance(error, WorkerLostError) or store_away(error):
            return True
        return self.user_errors and isinstance(error, UserFunctionError | DataError | TaskError)

    def delay_for(self, error: BaseException) -> float | None:
        """Seconds to wait before restarting after ``error``; None: give up (stop the job)."""
        now = self.clock()
        if self.last_failure is not None and now - self.last_failure >= self.reset_seconds:
            self.restarts = 0  # a healthy period: count from the start again
        self.last_failure = now
        if not self.restartable(error) or self.restarts >= self.attempts:
            return None
        wait = min(self.delay * self.backoff ** self.restarts, self.max_delay)
        self.restarts += 1
        return wait
