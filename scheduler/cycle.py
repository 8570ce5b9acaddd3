"""The cycle scheduler: a state machine per cycle that turns Done events into the next events.

It does no I/O: ``handle(event)`` returns instructions, the runtime carries them out and feeds the
results back as new events.
"""

from __future__ import annotations

from transitions import Machine

from gyreflow.plan.execution import ExecutionCycle
from gyreflow.scheduler.context import WindowContext
from gyreflow.scheduler.events import (
    CleanCycle,
    CreateTask,
    CycleFinished,
    DestroyTask,
    Done,
    EventKind,
    InitCycle,
    JobFailed,
    LaunchSource,
    Rollback,
    SendEvents,
    TaskFailed,
    WindowCompleted,
    WindowFinished,
)
from gyreflow.scheduler.iteration import IterationScheduler
from gyreflow.scheduler.states import CycleState, SchedulingError

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
    ) -> None:
        self.cycle = cycle
        self.context = WindowContext(max_flying_windows=max_flying_windows)
        self.resume_from = resume_from
        self.snapshot_every = snapshot_every
        self.last_completed = resume_from
        self.task_ids = tuple(t.id for t in cycle.tasks)
        self.history: list[tuple[str, object]] = []
        self._out: list = []
        self._awaiting: set[int] = set()
        self._head_exhausted: dict[int, int] = {}
        self._ended: dict[int, int] = {}
        self._reported: dict[int, set[int]] = {}
        self._acks: dict[int, set[int]] = {}
        self._dones: dict[int, list[Done]] = {}
        self.loops = [IterationScheduler(cycle.id, loop, resume_from) for loop in cycle.loops]
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
        launch = self.context.windows_to_launch()
        self._send(LaunchSource(self.cycle.id, h, w) for w in launch for h in self.cycle.heads)

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
                self.context.terminate_at(max(self._head_exhausted.values()))
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
        else:
            self._dones.setdefault(event.window, []).append(event)
            if event.task in self.cycle.tails:
                self._reported.setdefault(event.window, set()).add(event.task)
        self._complete_ready_windows()

    def _on_checkpoint(self, event: Done) -> None:
        if event.window <= self.last_completed:
            return  # already covered by a completed window (e.g. replayed after a rollback)
        if self.state is not S.EXECUTE_COMPUTE:
            self._invalid(event)
        self._acks.setdefault(event.window, set()).add(event.task)
        self._complete_ready_windows()

    def is_commit_point(self, window: int) -> bool:
        """Whether tasks snapshot ``window``: every ``snapshot_every``-th window, and the last one."""
        return window % self.snapshot_every == 0 or window == self.context.terminate

    def _durable(self, window: int) -> bool:
        acks = self._acks.get(window, set())
        ended = self._ended
        return all(t in acks or ended.get(t, window + 1) <= window for t in self.task_ids)

    def _complete_ready_windows(self) -> None:
        progressed = False
        ctx = self.context
        while True:
            window = ctx.last_finished + 1
            if window not in ctx.in_flight:
                break
            reported = self._reported.get(window, set())
            if not all(t in reported or self._ended.get(t, window) < window
                       for t in self.cycle.tails):
                break
            ctx.finish(window)
            self._reported.pop(window, None)
            self._out.append(WindowFinished(self.cycle.id, window, tuple(self._dones.pop(window, ()))))
            progressed = True
        for window in range(self.last_completed + 1, ctx.last_finished + 1):
            if not self.is_commit_point(window):
                continue
            if not self._durable(window):
                break
            self.last_completed = window
            for done in [w for w in self._acks if w <= window]:
                del self._acks[done]
            self._out.append(WindowCompleted(self.cycle.id, window))
            progressed = True
        if progressed or self.all_windows_completed():
            self.round_done()

    def _invalid(self, event) -> None:
        recent = "\n".join(f"  {state}: {ev}" for state, ev in self.history[-10:])
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
    """Runs every cycle of an execution graph; finished when every cycle reached END."""

    def __init__(self, cycles: list[ExecutionCycle], max_flying_windows: int, resume_from: int = 0,
                 snapshot_every: int = 1):
        self.cycles = {c.id: CycleScheduler(c, max_flying_windows, resume_from, snapshot_every)
                       for c in cycles}

    def start(self) -> list:
        """Start every cycle."""
        out = []
        for cycle in self.cycles.values():
            out.extend(cycle.start())
        return out

    def handle(self, event: Done | TaskFailed) -> list:
        """Route ``event`` to its cycle."""
        return self.cycles[event.cycle].handle(event)

    @property
    def finished(self) -> bool:
        """Whether every cycle ended."""
        return all(c.state is S.END for c in self.cycles.values())
