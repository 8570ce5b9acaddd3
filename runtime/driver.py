"""The job driver: the one job loop, whatever engine runs the tasks.

It owns the scheduler core (which decides when a window is snapshotted and when it is complete), the
checkpoint coordinator (resume, commit, prune), the order commit -> publish -> prune, the crash
points, failure draining and per-window metrics. An engine is a ``Host`` (runtime/host.py): the
in-process host (runtime/local), the worker host (runtime/workers) or the Spark host (runtime/spark).
A ``JobRun`` (runtime/job_run.py) is one run of a job from its start to its end: a rescale or a
restart after a failure (failover, as the restart strategy allows) builds a new host and driver
inside it, the run's job lock and state location stay.
"""

from __future__ import annotations

import enum
import queue
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from gyreflow.plan.execution import ExecutionGraph
from gyreflow.runtime.balance import LoadTracker, describe
from gyreflow.runtime.checkpoint import CheckpointCoordinator, RecoveryOptions
from gyreflow.runtime.control import ControlDesk, ControlInbox, RescaleRequested
from gyreflow.runtime.faults import crash_point
from gyreflow.runtime.host import Host, HostLink
from gyreflow.runtime.job_listener import (
    CheckpointMetrics,
    JobListener,
    Listeners,
    tell_restart,
    tell_resumed,
)
from gyreflow.runtime.metrics import TaskResult, WindowMetrics
from gyreflow.runtime.stop import JobInterrupted, JobStopped, StopRequest
from gyreflow.scheduler.checkpoints import AbortReason
from gyreflow.scheduler.cycle import JobScheduler
from gyreflow.scheduler.events import (
    CommitDurable,
    CommitWindow,
    Done,
    EventKind,
    JobFailed,
    PublishWindow,
    SendEvents,
    WindowFinished,
)
from gyreflow.state.records import frozen

if TYPE_CHECKING:
    from gyreflow.runtime.job_run import JobRun

STALL_SECONDS = 300  # no task has work and nothing was reported for this long: the job is stuck

# The listener protocol (job_listener.py) is named here too, where jobs have imported it from.
__all__ = ["STALL_SECONDS", "CheckpointMetrics", "JobDriver", "JobListener", "Listeners",
           "tell_restart"]


@frozen
class _WriterFailed:
    error: BaseException


@frozen
class _Flushed:
    """Every snapshot write handed to the writer before this marker is durable (``wake``: not a
    flush, a control request waits)."""

    wake: bool = False


class _Flush(enum.Enum):
    NOT_SENT = "not sent"
    SENT = "sent"
    DONE = "done"


class JobDriver:
    """Runs one job's execution graph on a host, from its last completed window to the end of its input.

    >>> from gyreflow.runtime.local.host import LocalHost  # doctest: +SKIP
    >>> JobDriver(config, LocalHost(config, backend)).run("job", graph)  # doctest: +SKIP
    """

    def __init__(self, config, host: Host, listener: JobListener | None = None,
                 clock: Callable[[], float] = time.monotonic, stop: StopRequest | None = None,
                 control: ControlInbox | None = None, result: TaskResult | None = None,
                 run: JobRun | None = None) -> None:
        self.config = config
        self.seed = result  # what the run produced before a restart (a rescale)
        self.job_run = run  # the run this driver is part of; None: the driver is the whole run
        self.control = control
        self.desk: ControlDesk | None = None
        self.stop = stop
        self.host = host
        self.listener = listener or JobListener()
        self.clock = clock
        self._reports: queue.SimpleQueue = queue.SimpleQueue()

    def run(self, name: str, graph: ExecutionGraph,
            recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run ``graph`` to the end of its input and return its result."""
        host = self.host
        backend = host.backend
        store = backend.open_store()  # an unreachable backend fails here, before any data moves
        failed = True
        lock = None
        try:
            if self.job_run is None:  # else the run holds the lock from its start to its end
                lock = store.lock_job(name)  # one writer per job: a second run stops here
            iterations = any(cycle.loops for cycle in graph.cycles())
            coordinator = CheckpointCoordinator(
                name, graph, store, backend,
                iterations and self.config["state.iteration_checkpoint_interval"] > 0)
            resume_from = coordinator.prepare(recovery or RecoveryOptions())
            horizon = coordinator.retained[0] if coordinator.retained else 0
            link = HostLink(self._reports.put, self._settle, self._writer_failed)
            host.open(name, graph, store, link, resume_from, frozenset(coordinator.rescaled), horizon,
                      coordinator.cycle_ends)
            store = None  # the host owns it now
            try:
                result = self._drive(name, graph, coordinator, resume_from)
            except (JobInterrupted, JobStopped) as exc:
                exc.last_completed = self.scheduler.committed
                raise
            except RescaleRequested:
                failed = False  # a clean stop at a window boundary
                raise
            failed = False
            return result
        finally:
            try:
                if store is not None:
                    store.close()
                host.close(failed)
            finally:
                if lock is not None:
                    lock.release()

    def _announce(self, name: str, graph: ExecutionGraph, resume_from: int) -> None:
        """``on_start`` once per run, when its first host has started its tasks; then
        ``on_restart`` for every restart not told yet (a host that failed to start its tasks, a
        worker killed while they start, is a failover like any other: the next host tells it)."""
        run = self.job_run
        if run is None or not run.announced:
            if run is not None:
                run.announced = True
                run.started = self.started
            self.listener.on_start(name, graph)
            if resume_from > 0:
                tell_resumed(self.listener, resume_from)
        while run is not None and run.untold:
            tell_restart(self.listener, name, graph, resume_from, run.untold.pop(0))

    def _elapsed(self) -> float:
        """The run's wall time so far: from the run's start, across its restarts and their waits."""
        if self.job_run is not None and self.job_run.started is not None:
            return self.clock() - self.job_run.started
        return self.seconds_before + self.clock() - self.started

    # The loop -------------------------------------------------------------------------------

    def _drive(self, name: str, graph: ExecutionGraph, coordinator: CheckpointCoordinator,
               resume_from: int) -> TaskResult:
        host = self.host
        self.scheduler = scheduler = JobScheduler(
            graph.cycles(), self.config["scheduler.max_flying_windows"], resume_from,
            host.backend.snapshot_every, self.config["state.iteration_checkpoint_interval"])
        self.name = name
        self.coordinator = coordinator
        # A restart goes on after the last completed window in the store (a commit may have become
        # durable after the failed driver last looked): what came after it is computed again.
        self.result = (self.seed.keep_until(resume_from) if self.seed is not None
                       else TaskResult(name, self.config["metrics.kept_windows"]))
        self.seconds_before = self.result.seconds
        self.sources = tuple(v.name for v in graph.pipeline.sources())
        self.launched: dict[tuple[int, int], float] = {}
        self.window_ends: dict[int, float] = {}  # window -> when its last cycle finished it
        self.checkpoint_bytes: dict[int, int] = {}  # window -> bytes its snapshots wrote
        self.restored_windows: dict[int, int] = {}  # window -> superstep it went on from
        self.finished = {cycle: resume_from for cycle in scheduler.cycles}
        self.failure: BaseException | None = None
        self.writer_failure: BaseException | None = None
        self.durable = resume_from
        self.started = self.clock()
        self.pending: deque = deque()
        self._announce(name, graph, resume_from)
        self.pending.extend(scheduler.start())
        if self.control is not None:
            self.desk = ControlDesk(self.control, host, graph, host.backend.max_parallelism)
            self.desk.balance = LoadTracker(graph.pipeline, host.backend.max_parallelism,
                                            self.config.get("control.rebalance_skew", 1.3),
                                            self.config.get("control.rebalance_min_records", 1000))
            self.desk.start(resume_from)
            self.control.job = name
            self.control.wake = lambda: self._reports.put(_Flushed(wake=True))
        try:
            return self._loop(name)
        except RescaleRequested:
            if self.desk is not None:
                self.desk.hand_over()
            raise
        except Exception:
            if self.desk is not None:
                self.desk.hand_back()
            raise
        finally:
            if self.desk is not None:
                self.control.wake = None
                self.desk.close(f"job {name!r} ended before the command took effect")

    def _loop(self, name: str) -> TaskResult:
        host, scheduler, desk = self.host, self.scheduler, self.desk
        flush = _Flush.NOT_SENT
        while True:
            if desk is not None and self.failure is None:
                self._take_controls(desk)
            if (self.stop is not None and self.stop.requested and self.failure is None
                    and not scheduler.finished):
                # Asked to stop: launch nothing new; the windows in flight complete or are dropped.
                self.failure = JobStopped(self.stop.signum)
            self._carry_out()
            report = _poll(self._reports)
            if report is None:
                if self.failure is None:
                    if scheduler.finished and not host.has_work():
                        break
                    if host.step():
                        continue
                    if desk is not None and desk.holding:  # paused: wait for a command or a stop
                        try:
                            report = self._reports.get(timeout=0.1)
                        except queue.Empty:
                            continue
                        self._handle_report(report)
                        continue
                else:
                    if host.drain_step(getattr(self.failure, "window", None)):
                        flush = _Flush.NOT_SENT
                        continue
                    if flush is _Flush.NOT_SENT and min(self.finished.values()) > scheduler.committing:
                        # The writer applies operations in order: once this no-op is durable, every
                        # snapshot handed to it before has been acknowledged.
                        flush = _Flush.SENT
                        host.writer.write(None, lambda: self._reports.put(_Flushed()))
                    elif flush is not _Flush.SENT and not scheduler.outstanding:
                        self._carry_out()
                        stopped = isinstance(self.failure, JobStopped)
                        scheduler.abort_checkpoints(
                            AbortReason.JOB_STOPPED if stopped else AbortReason.JOB_FAILED)
                        if stopped:
                            self.failure.last_completed = scheduler.committed
                        raise self.failure
                try:  # only snapshot writes are outstanding: wait for the writer to report
                    report = self._reports.get(timeout=STALL_SECONDS)
                except queue.Empty:
                    if self.failure is not None:
                        raise self.failure from None
                    msg = (f"job {name!r} stalled: no task has work and no snapshot completed in "
                           f"{STALL_SECONDS} s")
                    raise RuntimeError(msg) from None
            if isinstance(report, _Flushed):
                if not report.wake:
                    flush = _Flush.DONE
            else:
                self._take(report)
        self.result.seconds = self._elapsed()
        self.result.last_completed = scheduler.committed
        self.listener.on_finish(self.result)
        return self.result

    def completed_result(self, before: TaskResult | None) -> TaskResult | None:
        """What the run produced so far (the next driver keeps it up to its resume point)."""
        result = getattr(self, "result", None)
        if result is None:
            return before
        result.seconds = self._elapsed()
        return result

    def _handle_report(self, report) -> None:
        if not isinstance(report, _Flushed):
            self._take(report)

    def _iteration_restored(self, report: Done) -> None:
        """Say once per window that it goes on from an iteration snapshot."""
        if self.restored_windows.get(report.window) == report.iteration:
            return
        self.restored_windows[report.window] = report.iteration
        self.listener.on_iteration_restored(report.window, report.iteration)

    def _take_controls(self, desk: ControlDesk) -> None:
        """Commands from the control endpoint, between steps; a rescale stops the run once the
        windows in flight have completed."""
        released = desk.take(self.pending, self.scheduler.committed)
        if released:
            self._send(released)
        scheduler = self.scheduler
        # A finished window whose snapshots are not all durable, or whose commit is not, is in
        # flight too: the restart resumes after the last committed window, and would compute it
        # again with the new parallelism beside the output its old tasks staged. (Windows held
        # back have pending checkpoints too, opened with their launch: they never started.)
        in_flight = bool(self.launched or self.pending or scheduler.outstanding
                         or self.host.has_work()
                         or any(window <= desk.launched for cycle in scheduler.cycles.values()
                                for window in cycle.checkpoints.pending))
        due = desk.rescale_due(in_flight, self.scheduler.committed)
        if due is not None:
            self.result.seconds = self._elapsed()
            self.result.last_completed = self.scheduler.committed
            due.result = self.result.keep_until(self.scheduler.committed)
            raise due

    def _send(self, events) -> None:
        now = self.clock()
        for event in events:
            if event.kind is EventKind.LAUNCH_SOURCE:
                self.launched.setdefault((event.cycle, event.window), now)
            elif event.kind is EventKind.EXECUTE_COMPUTE and event.iteration:
                crash_point("superstep", (event.window, event.iteration))
        self.host.send(events)

    def _settle(self) -> None:
        """Handle every queued report now (a host's synchronous round asks for the answers)."""
        while True:
            report = _poll(self._reports)
            if report is None:
                break
            if isinstance(report, _Flushed):
                continue
            self._take(report)
        self._carry_out()

    def _take(self, report) -> None:
        """Hand one report to the scheduler (or stop on a writer failure)."""
        if isinstance(report, _WriterFailed):
            if self.failure is not None:
                raise self.failure  # the first failure is the one to report
            raise self.host.describe_write_failure(report.error, self.durable,
                                                   self.scheduler.committing)
        if type(report) is Done and report.phase is EventKind.CHECKPOINT and report.size:
            sizes = self.checkpoint_bytes
            sizes[report.window] = sizes.get(report.window, 0) + report.size
        elif type(report) is Done and report.phase is EventKind.RESTORE_ITERATION:
            self._iteration_restored(report)
        if self.failure is None:
            self.pending.extend(self.scheduler.handle(report))
            return
        try:
            self.pending.extend(self.scheduler.handle(report))
        except Exception:  # noqa: BLE001 - already failing: report the first failure
            raise self.failure from None

    def _carry_out(self) -> None:
        """Carry out the scheduler's instructions, in order."""
        pending = self.pending
        while pending:
            instruction = pending.popleft()
            if isinstance(instruction, SendEvents):
                if self.failure is not None:
                    continue  # failing: launch nothing new, clean nothing up
                events = instruction.events
                if self.desk is not None:
                    events = self.desk.launches(events)  # held back while paused
                self._send(events)
            elif isinstance(instruction, WindowFinished):
                self._window_finished(instruction)
            elif isinstance(instruction, CommitWindow):
                self._commit(instruction.window)
            elif isinstance(instruction, PublishWindow):
                self._publish(instruction.window)
            elif isinstance(instruction, JobFailed) and self.failure is None:
                # Stop, but first let every window that was finishing complete: its snapshots may be
                # durable already, and completed windows stay completed.
                self.failure = instruction.error

    def _window_finished(self, instruction: WindowFinished) -> None:
        crash_point("window-finished", instruction.window)
        self.finished[instruction.cycle] = instruction.window
        key = (instruction.cycle, instruction.window)
        now = self.clock()
        self.window_ends[instruction.window] = now
        seconds = now - self.launched.pop(key, self.started)
        metrics = WindowMetrics.from_dones(self.name, instruction.cycle, instruction.window, seconds,
                                           instruction.dones, self.sources)
        self.result.add_window(metrics)
        self.result.add_collected(instruction.window, instruction.dones)
        self.listener.on_window(metrics)
        if self.desk is not None:
            self.desk.window_finished(instruction.cycle, instruction.window, instruction.dones)
            self._measure_load(instruction.dones)

    def _measure_load(self, dones) -> None:
        """Weigh key groups by the records sent to them; with ``control.auto_rebalance``, start a
        rebalance when an operator's load is skewed and moving key groups evens it out."""
        tracker = self.desk.balance
        if not tracker.vertices:
            return
        tracker.observe(dones)
        if not tracker.skewed or self.desk.rescale is not None or self.scheduler.finished:
            return
        if not self.config.get("control.auto_rebalance", False):
            return
        due = tracker.due()
        if due:
            lines = []
            for name in due:
                _, before, after = tracker.propose(name)
                lines.append(describe(name, before, after))
            self.desk.rebalance_by_itself(due, lines)

    def _commit(self, window: int) -> None:
        """Record ``window`` as completed (one atomic write); its durability comes back as an event,
        and pruning what retention no longer needs follows the commit through the ordered writer."""
        crash_point("before-commit", window)
        reports = self._reports
        self.coordinator.commit(window, self.host.writer,
                                lambda: reports.put(CommitDurable(window)))

    def _publish(self, window: int) -> None:
        """The commit of ``window`` is durable: its output may be seen."""
        self.durable = window
        self.result.settle(window)
        if self.stop is not None:
            self.stop.last_completed = window
        self._checkpoint_completed(window)
        crash_point("after-commit", window)
        for index, publish in enumerate(self.host.publishers()):
            publish(window)
            if index == 0:
                crash_point("mid-publish", window)

    def _checkpoint_completed(self, window: int) -> None:
        """Tell the listener of the checkpoint that made ``window`` durable (it covers the windows
        finished since the last one)."""
        now = self.clock()
        ended = self.window_ends.get(window, now)
        written = 0
        for covered in [w for w in self.checkpoint_bytes if w <= window]:
            written += self.checkpoint_bytes.pop(covered)
        for covered in [w for w in self.window_ends if w <= window]:
            del self.window_ends[covered]
        self.listener.on_checkpoint(CheckpointMetrics(window, max(0.0, now - ended), written))

    def _writer_failed(self, error: BaseException) -> None:
        """The snapshot writer's error callback (any thread)."""
        self._reports.put(_WriterFailed(error))


def _poll(reports: queue.SimpleQueue):
    try:
        return reports.get_nowait()
    except queue.Empty:
        return None
