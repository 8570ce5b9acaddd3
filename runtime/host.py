"""The host protocol: what the job driver needs from an engine that runs a job's tasks.

A host carries the scheduler's events to the tasks (launch a window, a superstep, the lifecycle
commands, rollback) and hands back what the tasks report (Done events with their checkpoint
acknowledgements, TaskFailed) through the ``report`` callback it was opened with. It also owns the
job's snapshot writer, publishes completed windows and closes. Everything else (which window is
complete, when to snapshot, commit -> publish -> prune, crash points) is the driver's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.scheduler.events import TaskEvent
from gyreflow.state.records import frozen


@frozen(eq=False)
class HostLink:
    """How a host talks back to the driver.

    ``report`` queues a task's report (thread-safe: snapshot writers call it from their own thread);
    ``settle`` makes the driver handle every queued report now, in the driver's thread, so that a host
    whose rounds are synchronous (Spark) gets the scheduler's answers (the next superstep's events,
    through ``send``) before its round goes on; ``writer_failed`` reports that the snapshot writer
    failed (any thread).
    """

    report: Callable[[object], None]
    settle: Callable[[], None]
    writer_failed: Callable[[BaseException], None]


class Host(Protocol):
    """An engine that runs the tasks of one job for the driver."""

    name: str
    # The state backend the job's snapshots go to on this host. A run that builds several hosts (a
    # rescale) gives each the same one: the run's state location, not a new one per host.
    backend: object

    def open(self, job: str, graph: ExecutionGraph, store, link: HostLink, resume_from: int,
             rescaled: frozenset[str], horizon: int) -> None:
        """Prepare the job's tasks (nothing runs yet); ``store`` (opened by the driver to resume) is
        the host's from now on."""

    @property
    def writer(self):
        """The job's ``SnapshotWriter``: task snapshots, the driver's commits and prunes, in order."""

    def send(self, events: Sequence[TaskEvent]) -> None:
        """Deliver the scheduler's events to their tasks, in order."""

    def control(self, window: int, controls: Sequence) -> None:
        """Hand control messages to every task: each applies them as it starts ``window`` (which
        has not been launched yet), before its first record of it (``runtime.control``)."""

    def step(self) -> bool:
        """Make progress on what was sent (one task step, or one round); False when idle."""

    def drain_step(self, before: int | None) -> bool:
        """Like ``step`` while the job is failing: finish what is in flight, start no window from
        ``before`` on (none when None); False when idle."""

    def has_work(self) -> bool:
        """Whether ``step`` would do something."""

    def publishers(self) -> Sequence[Callable[[int], None]]:
        """One function per sink task that makes a window's staged output visible, called once the
        window's commit is durable."""

    def describe_write_failure(self, error: BaseException, durable: int, committed: int) -> BaseException:
        """The error to stop the job with after the snapshot writer failed."""

    def close(self, failed: bool) -> None:
        """Release everything the job opened (also after a failure)."""
