"""The iteration scheduler: drives the supersteps of one iteration group inside each window.

A graph computation is an iteration group nested in its window cycle (Naiad's nested timestamps:
``(window, iteration)``). Its tasks report INPUT_READY when a window's input has arrived; windows then
iterate one at a time, in order: InitIteration, ExecuteFirstIteration, ExecuteCompute for superstep 2,
3, ... until no work is left (no messages in flight and no vertex that stays active) or the iteration
limit is reached, then FinishIteration, after which the tasks finish the window as any task does.
Aggregates travel with the events: every task's partials of superstep i arrive with superstep i + 1,
and every task combines them the same way. Like the cycle scheduler, it does no I/O.
"""

from __future__ import annotations

from collections import deque

from transitions import Machine

from gyreflow.plan.execution import IterationLoop
from gyreflow.scheduler.events import (
    Done,
    EventKind,
    ExecuteCompute,
    ExecuteFirstIteration,
    FinishIteration,
    InitIteration,
    SendEvents,
)
from gyreflow.scheduler.states import HISTORY, CycleState, SchedulingError

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
              EventKind.EXECUTE_COMPUTE)

    def __init__(self, cycle: int, loop: IterationLoop, resume_from: int = 0) -> None:
        self.cycle = cycle
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
        payload = self._partials()
        self.iteration += 1
        if self.iteration == 1:
            self._send(ExecuteFirstIteration(self.cycle, t, self.window, payload) for t in self.tasks)
        else:
            self._send(ExecuteCompute(self.cycle, t, self.window, self.iteration, payload)
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
                phase is EventKind.INIT_ITERATION and self.state is not S.ITERATION_INIT) or (
                phase is not EventKind.INIT_ITERATION and (
                    self.state is not S.EXECUTE_COMPUTE or event.iteration != self.iteration)):
            self._invalid(event)
        else:
            self._reports[event.task] = event
            if len(self._reports) == len(self.tasks):
                if phase is EventKind.INIT_ITERATION:
                    self.initialized()
                else:
                    self.superstep_done()
        out, self._out = self._out, []
        return out

    def _invalid(self, event: Done) -> None:
        recent = "\n".join(f"  {state}: {ev}" for state, ev in self.history)
        msg = (f"iteration group {self.loop.group} of cycle {self.cycle} in state {self.state.name} "
               f"(window {self.window}, iteration {self.iteration}) cannot handle {event}; "
               f"recent history:\n{recent}")
        raise SchedulingError(msg)
