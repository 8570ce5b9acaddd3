"""The cycle scheduler: a state machine per cycle that turns Done events into the next events.

It does no I/O: ``handle(event)`` returns instructions, the runtime carries them out and feeds the
results back as new events.
"""

from __future__ import annotations

from collections import deque

from transitions import Machine

from gyreflow.plan.execution import ExecutionCycle
from gyreflow.scheduler.checkpoints import AbortReason, CheckpointTracker, PendingCheckpoint
from gyreflow.scheduler.context import WindowContext
from gyreflow.scheduler.events import (
    CleanCycle,
    CommitDurable,
    CommitWindow,
    CreateTask,
    CycleFinished,
    DestroyTask,
    Done,
    EventKind,
    InitCycle,
    JobFailed,
    LaunchSource,
    PublishWindow,
    Rollback,
    SendEvents,
    TaskFailed,
    WindowCompleted,
    WindowFinished,
)
from gyreflow.scheduler.states import HISTORY, CycleState, SchedulingError

S = CycleState

# Conditional transitions are tried in the order listed; the first whose conditions hold wins. The
# iteration states belong to the iteration groups nested in a cycle (scheduler/iteration.py): the
# cycle itself stays in EXECUTE_COMPUTE while windows, and their supersteps, run.
TRANSITIONS = [
    {"trigger": "begin", "source": S.START, "dest": S.ROLLBACK, "conditions": "is_recovering"},
    {"trigger": "begin", "source": S.START, "dest": S.INIT},
    {"trigger": "rolled_back", "source": S.ROLLBACK, "dest": S.INIT},
    {"trigger": "initialized", "source": S.INIT, "dest": S.EXECUTE_COMPUTE},
    {"trigger": "round_done", "source": S.EXECUTE_COMPUTE, "dest": S.CLEAN_CYCLE,
     "conditions": "all_windows_completed"},
    {"trigger": "round_done", "source": S.EXECUTE_COMPUTE, "dest": S.EXECUTE_COMPUTE},
    {"trigger": "cleaned", "source": S.CLEAN_CYCLE, "dest": S.END},
]


class CycleScheduler:
    """Drives one cycle: sends events to its heads and collects Done events from its tails.

    A window ends when its tails report it; it is handed on (``WindowFinished``, with the metrics
    of every task) once the other tasks' reports of it are in too.

    >>> from gyreflow.plan.execution import ExecutionCycle, ExecutionVertexGroup, GroupKind
    >>> group = ExecutionVertexGroup(1, GroupKind.WINDOW, (0,))
    >>> sched = CycleScheduler(ExecutionCycle(1, group, (), heads=(0,), tails=(0,)))
    >>> sched.state
    <CycleState.START: 'START'>
    """

    def __init__(
        self,
        cycle: ExecutionCycle,
        max_flying_windows: int = 1,
        resume_from: int = 0,
        snapshot_every: int = 1,
        iteration_every: int = 0,
    ) -> None:
        self.cycle = cycle
        self.context = WindowContext(max_flying_windows=max_flying_windows)
        self.resume_from = resume_from
        self.task_ids = tuple(t.id for t in cycle.tasks)
        self.checkpoints = CheckpointTracker(self.task_ids, snapshot_every, resume_from)
        self.history: deque[tuple[str, object]] = deque(maxlen=HISTORY)  # for error messages
        self._out: list = []
        self._awaiting: set[int] = set()
        self._head_exhausted: dict[int, int] = {}
        self._ended: dict[int, int] = {}
        self._reported: dict[int, set[int]] = {}
        self._dones: dict[int, list[Done]] = {}
        self.loops = []
        if cycle.loops:  # the iteration scheduler is imported by a cycle with iterations only
            from gyreflow.scheduler.iteration import IterationScheduler

            self.loops = [IterationScheduler(cycle.id, loop, resume_from, iteration_every)
                          for loop in cycle.loops]
        self.machine = Machine(
            model=self,
            states=CycleState,
            transitions=TRANSITIONS,
            initial=CycleState.START,
            auto_transitions=False,
            queued=True,
            ignore_invalid_triggers=False,
        )

    # Conditions ---------------------------------------------------------------------------

    @property
    def last_completed(self) -> int:
        """The last window whose checkpoint completed (finished and durable on every task)."""
        return self.checkpoints.last_completed

    def is_recovering(self) -> bool:
        """Whether the cycle resumes from a completed window."""
        return self.resume_from > 0

    def all_windows_completed(self) -> bool:
        """Whether every source is exhausted and every window up to the last one is completed
        (finished and durable)."""
        ctx = self.context
        return ctx.all_finished() and self.last_completed >= ctx.terminate

    # State entry actions ------------------------------------------------------------------

    def _send(self, events) -> None:
        events = tuple(events)
        if events:
            self._out.append(SendEvents(events))

    def on_enter_ROLLBACK(self) -> None:  # noqa: N802 - transitions' naming convention
        self._awaiting = set(self.task_ids)
        self._send(Rollback(self.cycle.id, t, self.resume_from) for t in self.task_ids)

    def on_enter_INIT(self) -> None:  # noqa: N802
        self.context.resume_after(self.resume_from)
        self._awaiting = set(self.task_ids)
        self._send(InitCycle(self.cycle.id, t, self.resume_from) for t in self.task_ids)

    def on_enter_EXECUTE_COMPUTE(self) -> None:  # noqa: N802
        # The one place that decides which windows are snapshotted: the request rides on the launch
        # and, from the heads, on the window's barriers to every task.
        events = []
        for window in self.context.windows_to_launch():
            checkpoint = self.checkpoints.requests(window)
            if checkpoint:
                self.checkpoints.open(window)
            events.extend(LaunchSource(self.cycle.id, h, window, checkpoint) for h in self.cycle.heads)
        self._send(events)

    def on_enter_CLEAN_CYCLE(self) -> None:  # noqa: N802
        self._awaiting = set(self.task_ids)
        self._send(CleanCycle(self.cycle.id, t, self.context.last_finished) for t in self.task_ids)

    def on_enter_END(self) -> None:  # noqa: N802
        self._send(DestroyTask(self.cycle.id, t, self.context.last_finished) for t in self.task_ids)
        self._out.append(CycleFinished(self.cycle.id, self.context.last_finished))

    # The core -----------------------------------------------------------------------------

    def start(self) -> list:
        """Create the tasks and begin the cycle; returns the first instructions."""
        self._send(CreateTask(self.cycle.id, t) for t in self.task_ids)
        self.begin()
        return self._drain()

    def handle(self, event: Done | TaskFailed) -> list:
        """Apply one event from a task and return the instructions that follow from it."""
        self.history.append((self.state.name, event))
        if isinstance(event, TaskFailed):
            return [JobFailed(event.error)]
        for loop in self.loops:
            if loop.owns(event):
                if self.state is not S.EXECUTE_COMPUTE:
                    self._invalid(event)
                self._out.extend(loop.handle(event))
                return self._drain()
        phase = event.phase
        if phase is EventKind.EXECUTE_COMPUTE:
            self._on_window_done(event)
        elif phase is EventKind.CHECKPOINT:
            self._on_checkpoint(event)
        elif phase is EventKind.LAUNCH_SOURCE:
            self._on_source_done(event)
        elif phase in _ACKED_PHASES and self.state is _ACKED_PHASES[phase]:
            self._awaiting.discard(event.task)
            if not self._awaiting:
                {
                    S.ROLLBACK: self.rolled_back,
                    S.INIT: self.initialized,
                    S.CLEAN_CYCLE: self.cleaned,
                }[self.state]()
        elif phase is EventKind.DESTROY_TASK and self.state is S.END:
            pass
        else:
            self._invalid(event)
        return self._drain()

    def _on_source_done(self, event: Done) -> None:
        terminate = self.context.terminate
        if terminate is not None and (event.window > terminate or self.state in (S.CLEAN_CYCLE, S.END)):
            return  # a cancelled launch, or a late end-of-input report: the end is already known
        if self.state is not S.EXECUTE_COMPUTE:
            self._invalid(event)
        if event.exhausted:
            self._head_exhausted.setdefault(event.task, event.window)
            if len(self._head_exhausted) == len(self.cycle.heads):
                last = max(self._head_exhausted.values())
                self.context.terminate_at(last)
                self.checkpoints.cancel_after(last)
                if last > self.last_completed:
                    self.checkpoints.open(last)  # the last window is always made durable
                self._complete_ready_windows()

    def _on_window_done(self, event: Done) -> None:
        if event.exhausted and self.state in (S.CLEAN_CYCLE, S.END):
            # A task's end-of-input report may trail the completion of the last window: by then
            # every window is accounted for, so it changes nothing.
            return
        if self.state is not S.EXECUTE_COMPUTE:
            self._invalid(event)
        if event.exhausted:
            self._ended.setdefault(event.task, event.window)
            self.checkpoints.task_ended(event.task, event.window)
        else:
            self._dones.setdefault(event.window, []).append(event)
            self._reported.setdefault(event.window, set()).add(event.task)
        self._complete_ready_windows()

    def _on_checkpoint(self, event: Done) -> None:
        if event.window <= self.last_completed:
            return  # already covered by a completed window (e.g. replayed after a rollback)
        if self.state is not S.EXECUTE_COMPUTE:
            self._invalid(event)
        self.checkpoints.acknowledge(event.task, event.window)  # UNKNOWN: a host that persists more
        self._complete_ready_windows()

    def abort_checkpoints(self, reason: AbortReason) -> list[PendingCheckpoint]:
        """The job stops: give up every pending checkpoint."""
        return self.checkpoints.abort_all(reason)

    def _complete_ready_windows(self) -> None:
        progressed = False
        ctx = self.context
        while True:
            window = ctx.last_finished + 1
            if window not in ctx.in_flight:
                break
            # Every task's report, not only the tails': a window's metrics are the sum of all of
            # them, and on hosts with several processes an upstream task's report may arrive after
            # the tails' (a report that came later would be lost, and kept for ever).
            reported = self._reported.get(window, set())
            if not all(t in reported or self._ended.get(t, window) < window
                       for t in self.task_ids):
                break
            ctx.finish(window)
            self._reported.pop(window, None)
            self._out.append(WindowFinished(self.cycle.id, window, tuple(self._dones.pop(window, ()))))
            progressed = True
        for checkpoint in self.checkpoints.complete_ready(ctx.last_finished):
            self._out.append(WindowCompleted(self.cycle.id, checkpoint.window))
            progressed = True
        if progressed or self.all_windows_completed():
            self.round_done()

    def _invalid(self, event) -> None:
        recent = "\n".join(f"  {state}: {ev}" for state, ev in self.history)
        msg = (
            f"cycle {self.cycle.id} in state {self.state.name} cannot handle {event}; "
            f"recent history:\n{recent}"
        )
        raise SchedulingError(msg)

    def _drain(self) -> list:
        out, self._out = self._out, []
        return out


_ACKED_PHASES = {
    EventKind.ROLLBACK: S.ROLLBACK,
    EventKind.INIT_CYCLE: S.INIT,
    EventKind.CLEAN_CYCLE: S.CLEAN_CYCLE,
}


class JobScheduler:
    """Runs every cycle of an execution graph and turns their completed windows into job-level
    commits: window ``w`` is committed once every cycle completed it, and published once its commit
    is durable (commits are applied in order, so several may be outstanding). Finished when every
    cycle reached END and every commit is durable."""

    def __init__(self, cycles: list[ExecutionCycle], max_flying_windows: int, resume_from: int = 0,
                 snapshot_every: int = 1, iteration_every: int = 0):
        self.cycles = {c.id: CycleScheduler(c, max_flying_windows, resume_from, snapshot_every,
                                            iteration_every)
                       for c in cycles}
        self.completed = dict.fromkeys(self.cycles, resume_from)
        self.committing = resume_from  # the last window whose commit was asked for
        self.committed = resume_from  # the last window whose commit is durable
        self.outstanding: list[int] = []  # commits asked for and not yet durable, in order

    def start(self) -> list:
        """Start every cycle."""
        out = []
        for cycle in self.cycles.values():
            out.extend(cycle.start())
        return self._job_level(out)

    def handle(self, event: Done | TaskFailed | CommitDurable) -> list:
        """Route a task's ``event`` to its cycle, or take a commit's durability."""
        if isinstance(event, CommitDurable):
            if not self.outstanding or event.window != self.outstanding[0]:
                msg = (f"the commit of window {event.window} was reported durable; "
                       f"outstanding commits: {self.outstanding}")
                raise SchedulingError(msg)
            self.outstanding.pop(0)
            self.committed = event.window
            return [PublishWindow(event.window)]
        return self._job_level(self.cycles[event.cycle].handle(event))

    def _job_level(self, instructions: list) -> list:
        out = []
        for instruction in instructions:
            if isinstance(instruction, WindowCompleted):
                self.completed[instruction.cycle] = instruction.window
                self._commit_completed(out)
            else:
                out.append(instruction)
        self._commit_completed(out)  # a cycle that ended may let the others' windows complete
        return out

    def _commit_completed(self, out: list) -> None:
        """Ask for the commit of the latest window every cycle completed: a cycle whose input ended
        earlier has nothing more to add to later windows (its state stays as it was)."""
        running = [w for c, w in self.completed.items() if self.cycles[c].state is not S.END]
        lowest = min(running) if running else max(self.completed.values())
        if lowest > self.committing:
            self.committing = lowest
            self.outstanding.append(lowest)
            out.append(CommitWindow(lowest))

    def abort_checkpoints(self, reason: AbortReason) -> list[PendingCheckpoint]:
        """The job stops: every cycle gives up its pending checkpoints."""
        return [c for cycle in self.cycles.values() for c in cycle.abort_checkpoints(reason)]

    @property
    def finished(self) -> bool:
        """Whether every cycle ended and every commit is durable."""
        return all(c.state is S.END for c in self.cycles.values()) and not self.outstanding
