"""The iteration scheduler: drives the supersteps of one iteration group inside each window.

A graph computation is an iteration group nested in its window cycle (Naiad's nested timestamps:
``(window, iteration)``). Its tasks report INPUT_READY when a window's input has arrived; windows then
iterate one at a time, in order: InitIteration, ExecuteFirstIteration, ExecuteCompute for superstep 2,
3, ... until no work is left (no messages in flight and no vertex that stays active) or the iteration
limit is reached, then FinishIteration, after which the tasks finish the window as any task does.
Aggregates travel with the events: every task's partials of superstep i arrive with superstep i + 1,
and every task combines them the same way. Like the cycle scheduler, it does no I/O.

Iteration snapshots (asynchronous barrier snapshots for cycles): with ``every`` = k, the
ExecuteCompute of superstep i asks each task to snapshot the window's progress first when i - 1 is a
multiple of k: vertex values and the messages in flight on the loop for superstep i. A window
resumed after a crash reports, with its InitIteration, the supersteps its tasks hold snapshots of;
when every task holds one of superstep s, RestoreIteration(s) brings them back and superstep s + 1
follows, instead of superstep 1.
"""

from __future__ import annotations

from collections import deque

import attrs
from transitions import Machine

from gyreflow.plan.execution import IterationLoop
from gyreflow.scheduler.events import (
    Done,
    EventKind,
    ExecuteCompute,
    ExecuteFirstIteration,
    FinishIteration,
    InitIteration,
    RestoreIteration,
    SendEvents,
)
from gyreflow.scheduler.states import HISTORY, CycleState, SchedulingError

_BEFORE_SUPERSTEPS = (EventKind.INIT_ITERATION, EventKind.RESTORE_ITERATION)
SAVED = "__saved__"  # partial of an InitIteration report: supersteps the task holds snapshots of

S = CycleState

# INIT here means idle: waiting for the next window's input.
ITERATION_TRANSITIONS = [
    {"trigger": "window_ready", "source": S.INIT, "dest": S.ITERATION_INIT},
    {"trigger": "initialized", "source": S.ITERATION_INIT, "dest": S.EXECUTE_COMPUTE},
    {"trigger": "superstep_done", "source": S.EXECUTE_COMPUTE, "dest": S.ITERATION_FINISH,
     "conditions": "converged"},
    {"trigger": "superstep_done", "source": S.EXECUTE_COMPUTE, "dest": S.EXECUTE_COMPUTE},
    {"trigger": "iteration_done", "source": S.ITERATION_FINISH, "dest": S.ITERATION_INIT,
     "conditions": "next_window_ready"},
    {"trigger": "iteration_done", "source": S.ITERATION_FINISH, "dest": S.INIT},
]


class IterationScheduler:
    """Drives one iteration group of a cycle through the supersteps of every window.

    >>> from gyreflow.plan.execution import IterationLoop
    >>> sched = IterationScheduler(cycle=1, loop=IterationLoop(2, (5,), max_iterations=3))
    >>> sched.state
    <CycleState.INIT: 'INIT'>
    """

    PHASES = (EventKind.INPUT_READY, EventKind.INIT_ITERATION, EventKind.EXECUTE_FIRST_ITERATION,
              EventKind.EXECUTE_COMPUTE, EventKind.RESTORE_ITERATION)

    def __init__(self, cycle: int, loop: IterationLoop, resume_from: int = 0,
                 every: int = 0) -> None:
        self.cycle = cycle
        self.every = every
        self.restored: tuple | None = None  # the payload a restored superstep goes on with
        self.restoring = 0
        self.loop = loop
        self.tasks = loop.tasks
        self.window = resume_from + 1  # the window iterating now, or the next one to iterate
        self.iteration = 0
        self._ready: dict[int, set[int]] = {}
        self._reports: dict[int, Done] = {}
        self._out: list = []
        self.history: deque[tuple[str, object]] = deque(maxlen=HISTORY)  # for error messages
        self.machine = Machine(
            model=self,
            states=[S.INIT, S.ITERATION_INIT, S.EXECUTE_COMPUTE, S.ITERATION_FINISH],
            transitions=ITERATION_TRANSITIONS,
            initial=S.INIT,
            auto_transitions=False,
            queued=True,
            ignore_invalid_triggers=False,
        )

    def owns(self, event: Done) -> bool:
        """Whether ``event`` is one of this group's iteration reports."""
        if event.task not in self.tasks:
            return False
        phase = event.phase
        if phase is EventKind.EXECUTE_COMPUTE:
            return event.iteration > 0
        return phase in self.PHASES

    # Conditions ---------------------------------------------------------------------------

    def converged(self) -> bool:
        """Whether the superstep just reported was the last one of the window."""
        work = sum(done.active for done in self._reports.values())
        return work == 0 or self.iteration >= self.loop.max_iterations

    def next_window_ready(self) -> bool:
        """Whether every task holds the input of the next window."""
        return self._ready.get(self.window, set()) >= set(self.tasks)

    # State entry actions ------------------------------------------------------------------

    def _send(self, events) -> None:
        self._out.append(SendEvents(tuple(events)))

    def _partials(self) -> tuple:
        reports, self._reports = self._reports, {}
        return tuple(reports[t].partials for t in self.tasks)

    def on_enter_ITERATION_INIT(self) -> None:  # noqa: N802 - transitions' naming convention
        self._ready.pop(self.window, None)
        self.iteration = 0
        self._send(InitIteration(self.cycle, t, self.window) for t in self.tasks)

    def on_enter_EXECUTE_COMPUTE(self) -> None:  # noqa: N802
        again = 0  # the superstep just restored: its snapshot is not taken again
        if self.restored is not None:  # from an iteration snapshot of superstep ``restoring``
            payload, self.restored = self.restored, None
            self.iteration = again = self.restoring
        else:
            payload = self._partials()
        self.iteration += 1
        if self.iteration == 1:
            self._send(ExecuteFirstIteration(self.cycle, t, self.window, payload) for t in self.tasks)
        else:
            save = (self.every > 0 and (self.iteration - 1) % self.every == 0
                    and self.iteration - 1 != again)
            self._send(ExecuteCompute(self.cycle, t, self.window, self.iteration, payload, save)
                       for t in self.tasks)

    def on_enter_ITERATION_FINISH(self) -> None:  # noqa: N802
        self._reports = {}
        self._send(FinishIteration(self.cycle, t, self.window, self.iteration) for t in self.tasks)
        # Task queues are ordered: each task finishes this window before it sees the next event.
        self.window += 1
        self.iteration_done()

    # The core -----------------------------------------------------------------------------

    def handle(self, event: Done) -> list:
        """Apply one iteration report and return the instructions that follow from it."""
        self.history.append((self.state.name, event))
        phase = event.phase
        if phase is EventKind.INPUT_READY:
            self._ready.setdefault(event.window, set()).add(event.task)
            if self.state is S.INIT and self.next_window_ready():
                self.window_ready()
        elif event.window != self.window or (
                phase in _BEFORE_SUPERSTEPS and self.state is not S.ITERATION_INIT) or (
                phase not in _BEFORE_SUPERSTEPS and (
                    self.state is not S.EXECUTE_COMPUTE or event.iteration != self.iteration)):
            self._invalid(event)
        else:
            self._reports[event.task] = event
            if len(self._reports) == len(self.tasks):
                if phase is EventKind.INIT_ITERATION:
                    self._initialized()
                elif phase is EventKind.RESTORE_ITERATION:
                    self.restored = self._reports[self.tasks[0]].partials
                    self._reports = {}
                    self.initialized()
                else:
                    self.superstep_done()
        out, self._out = self._out, []
        return out

    def _initialized(self) -> None:
        """Every task took the window's input: superstep 1 follows, or, when every task holds an
        iteration snapshot of the same superstep, the latest such one is restored."""
        saved = None
        for report in self._reports.values():
            held = set(dict(report.partials).get(SAVED, ()))
            saved = held if saved is None else saved & held
        if saved:
            self.restoring = max(saved)
            self._reports = {}
            self._send(RestoreIteration(self.cycle, t, self.window, self.restoring)
                       for t in self.tasks)
            return
        self._reports = {t: attrs.evolve(r, partials=tuple(p for p in r.partials if p[0] != SAVED))
                         for t, r in self._reports.items()}
        self.initialized()

    def _invalid(self, event: Done) -> None:
        recent = "\n".join(f"  {state}: {ev}" for state, ev in self.history)
        msg = (f"iteration group {self.loop.group} of cycle {self.cycle} in state {self.state.name} "
               f"(window {self.window}, iteration {self.iteration}) cannot handle {event}; "
               f"recent history:\n{recent}")
        raise SchedulingError(msg)
