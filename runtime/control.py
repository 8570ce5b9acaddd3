"""Control messages: commands to a running job that take effect at one window boundary on every task.

Chi sends control messages through the data plane, so that a change lands at the same logical time
everywhere. Here a command arriving while the job runs is given the first window not yet launched,
``W``; the host hands it to every task with that window (in-process tasks keep it until they start
``W``; on Spark it rides in the round of ``W``), and each task applies it before its first record
of ``W``. Parameters and monitoring samples work that way. Pausing holds back the launch of new
windows; a rescale pauses, lets the windows in flight complete, and restarts the job's tasks from
the last completed window with the new parallelism (key groups move through the snapshot).

The driver's side is the ``ControlDesk``: the endpoint thread queues ``ControlRequest``s, the driver
loop takes them between steps and answers each through its ``reply``. The ``ControlInbox`` lives as
long as the run: while a rescale or a restart after a failure rebuilds the tasks (a restart
waits out its back-off first), ``status`` is answered at once ("restarting", with the attempt and
the seconds left to wait) and the other commands wait in the inbox for the new tasks' desk, as do
samples that were waiting for a window the old tasks never started.
"""

from __future__ import annotations

import json
import queue
import threading
import time

import attrs

from gyreflow.runtime.errors import parallelism_error
from gyreflow.state.records import frozen


@frozen
class Control:
    """What a task applies when it starts window ``window``: ``set`` a parameter of ``operator``,
    or take a monitoring ``sample``."""

    id: int
    window: int
    kind: str  # "set" | "sample"
    operator: str = ""
    name: str = ""
    value: object = None


@frozen
class TaskSample:
    """One task's monitoring sample, taken as it started a window."""

    task: str
    index: int
    records_in: int  # into the task's chain (read, for a source) since the task started
    records_out: int  # out of the chain's last operator
    state_keys: int
    queued: int  # messages waiting in the task's input queue


class ControlRequest:
    """A command from the endpoint, answered once by the driver (or the environment)."""

    def __init__(self, command: dict) -> None:
        self.command = command
        self._answered = threading.Event()
        self.answer: dict = {}

    def reply(self, **answer) -> None:
        if not self._answered.is_set():
            self.answer = answer
            self._answered.set()

    def wait(self, timeout: float) -> dict:
        if not self._answered.wait(timeout):
            return {"ok": False, "error": f"no answer within {timeout:g} s (is the job paused, or "
                                          "waiting for input?)"}
        return self.answer


class RescaleRequested(Exception):  # noqa: N818 - a request, not an error
    """The job stopped its tasks at a window boundary to run again with another parallelism."""

    def __init__(self, operator: str | None, parallelism: int, last_completed: int,
                 request: ControlRequest,
                 assignments: dict[str, tuple[int, ...]] | None = None) -> None:
        what = operator if operator is not None else "the workers"
        super().__init__(f"rescale {what} to {parallelism} after window {last_completed}"
                         if assignments is None else
                         f"rebalance {', '.join(assignments)} after window {last_completed}")
        self.operator = operator  # None: ``parallelism`` is the number of worker processes
        self.parallelism = parallelism
        self.last_completed = last_completed
        self.request = request
        self.assignments = assignments  # a rebalance: the new owner of each key group, by operator


def parse_value(text: str):
    """A parameter value as typed: JSON when it parses (numbers, booleans, lists), else the text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


class ControlInbox:
    """Requests from the endpoint thread to the job, and what stays in force across restarts."""

    def __init__(self, parameters: dict[str, dict] | None = None) -> None:
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        self.parameters: dict[str, dict] = {op: dict(p) for op, p in (parameters or {}).items()}
        self.paused = False
        self.job = ""
        self.state = "starting"
        self.wake = None  # set by the running driver: called after a request is queued
        self.closed = False  # the job ended: requests are answered at once
        self.restarted_after: int | None = None  # while the tasks are built again: the boundary
        self.restart: tuple = (None, None, None)  # after a failure: attempt, attempts, until
        self._lock = threading.Lock()  # submit against restarting and close

    def submit(self, command: dict, timeout: float) -> dict:
        """Queue ``command`` and wait for its answer (called from the endpoint's threads)."""
        with self._lock:
            if self.closed:
                return {"ok": False, "error": f"job {self.job!r} has ended"}
            if command.get("command") == "status" and self.restarted_after is not None:
                return self._restarting_status()
            request = ControlRequest(command)
            self.requests.put(request)
            wake = self.wake
        if wake is not None:
            wake()
        return request.wait(timeout)

    def restarting(self, last_completed: int, attempt: int | None = None,
                   attempts: int | None = None, until: float | None = None) -> None:
        """The job's tasks stopped after ``last_completed`` and are being built again (a rescale,
        or restart ``attempt`` of ``attempts`` after a failure, which waits until the monotonic
        time ``until``): status is answered here at once, other commands wait for the new tasks."""
        with self._lock:
            self.restarted_after = last_completed
            self.restart = (attempt, attempts, until)
            self.state = "restarting"
            waiting = []
            while True:  # a status that came while the failed tasks were stopping
                try:
                    request = self.requests.get_nowait()
                except queue.Empty:
                    break
                if request.command.get("command") == "status":
                    request.reply(**self._restarting_status())
                else:
                    waiting.append(request)
            for request in waiting:
                self.requests.put(request)

    def _restarting_status(self) -> dict:
        window = self.restarted_after
        answer = {"ok": True, "job": self.job, "state": "restarting", "paused": self.paused,
                  "last_completed": window, "launched": window, "parameters": self.parameters,
                  "pids": []}
        attempt, attempts, until = self.restart
        if attempt is not None:
            answer.update(attempt=attempt, attempts=attempts,
                          seconds_left=round(max(0.0, until - time.monotonic()), 1))
        return answer

    def attached(self) -> None:
        """A run's tasks are up and its desk takes the requests."""
        with self._lock:
            self.restarted_after = None
            self.state = "paused" if self.paused else "running"

    def requeue(self, requests) -> None:
        """Hand requests a run could not answer to the next run of the job (a restart)."""
        with self._lock:
            for request in requests:
                self.requests.put(request)

    def close(self, why: str) -> None:
        """The job ended: answer what waits, and every later request, with ``why``."""
        with self._lock:
            self.closed = True
            while True:
                try:
                    self.requests.get_nowait().reply(ok=False, error=why)
                except queue.Empty:
                    break


class ControlDesk:
    """The driver's side of control messages for one run of a job (see the module docstring)."""

    def __init__(self, inbox: ControlInbox, host, graph, max_parallelism: int) -> None:
        self.inbox = inbox
        self.host = host
        self.operators = {v.name: v for ev in graph.vertices for v in ev.chain}
        self.pipeline = graph.pipeline
        self.sources = {v.name for v in graph.pipeline.sources()}
        self.max_parallelism = max_parallelism
        self.ids = iter(range(1, 1 << 62))
        self.launched = 0  # the highest window launched so far
        self.snapshotted = 0  # the highest window launched with a snapshot (or resumed from)
        self.held: list = []  # launches held back while paused or rescaling
        self.samples: dict[int, tuple[ControlRequest, set, list]] = {}  # window -> pending samples
        self.cycles = {c.id for c in graph.cycles()}
        self.rescale: ControlRequest | None = None
        self.balance = None  # the driver's LoadTracker (runtime/balance.py)

    @property
    def holding(self) -> bool:
        """Whether new windows are held back (paused, or a rescale waits for the boundary)."""
        return self.inbox.paused or self.rescale is not None

    def start(self, resume_from: int) -> None:
        """The parameters in force apply from the first window this run launches."""
        controls = tuple(Control(next(self.ids), resume_from + 1, "set", op, name, value)
                         for op, params in self.inbox.parameters.items()
                         for name, value in params.items())
        if controls:
            self.host.control(resume_from + 1, controls)
        self.launched = self.snapshotted = resume_from
        self.inbox.attached()

    def next_window(self, pending) -> int:
        """The first window not launched yet (nor about to be: ``pending`` instructions)."""
        highest = self.launched
        for instruction in pending:
            for event in getattr(instruction, "events", ()):
                if event.kind.name == "LAUNCH_SOURCE":
                    highest = max(highest, event.window)
        return highest + 1

    def launches(self, events) -> list:
        """The events to send now; launches are held back while paused, and while a rescale waits
        once the last window launched is one that is snapshotted. The restart goes on from a
        snapshotted window, so a rescale first runs the windows after the last one on to the next
        (``state.snapshot_every``; also while paused) rather than have them computed twice."""
        now = []
        for event in events:
            if event.kind.name != "LAUNCH_SOURCE":
                now.append(event)
            elif (self.snapshotted == self.launched < event.window if self.rescale is not None
                  else self.inbox.paused):
                self.held.append(event)
            else:
                now.append(event)
                self.launched = max(self.launched, event.window)
                if event.checkpoint:
                    self.snapshotted = max(self.snapshotted, event.window)
        return now

    def release(self) -> list:
        """The launches held back that nothing holds any more (after a resume)."""
        if not self.held:
            return []
        held, self.held = self.held, []
        return self.launches(held)

    def take(self, pending, committed: int) -> list:
        """Handle the queued requests; returns launches released by a ``resume``."""
        released = []
        while True:
            try:
                request = self.inbox.requests.get_nowait()
            except queue.Empty:
                return released
            released.extend(self._handle(request, pending, committed))

    def _handle(self, request: ControlRequest, pending, committed: int) -> list:
        command = request.command
        kind = command.get("command")
        if kind == "status":
            request.reply(ok=True, job=self.inbox.job, state=self.inbox.state,
                          paused=self.inbox.paused, last_completed=committed,
                          launched=self.launched, parameters=self.inbox.parameters,
                          workers=getattr(self.host, "count", None),
                          pids=list(getattr(self.host, "pids", ())))
        elif kind == "set":
            operator, name = command.get("operator", ""), command.get("name", "")
            if operator not in self.operators:
                request.reply(ok=False, error=self._unknown(operator))
                return []
            window = self.next_window(pending)
            value = command.get("value")
            self.host.control(window, (Control(next(self.ids), window, "set", operator, name,
                                               value),))
            self.inbox.parameters.setdefault(operator, {})[name] = value
            request.reply(ok=True, window=window, message=(
                f"{operator}.{name} = {json.dumps(value)} from window {window} on every task"))
        elif kind == "sample":
            window = self.next_window(pending)
            self.host.control(window, (Control(next(self.ids), window, "sample"),))
            self.samples[window] = (request, set(self.cycles), [])
        elif kind == "pause":
            self.inbox.paused = True
            self.inbox.state = "paused"
            window = self.next_window(pending)
            request.reply(ok=True, window=window, message=(
                f"sources paused: no window after {window - 1} starts (the windows in flight "
                "complete)"))
        elif kind == "resume":
            self.inbox.paused = False
            self.inbox.state = "running"
            request.reply(ok=True, message="sources resumed")
            return self.release()
        elif kind == "rescale":
            self._ask_rescale(request)
            return self.release()  # windows up to the next snapshotted one, if paused before it
        elif kind == "rebalance":
            self._ask_rebalance(request)
            return self.release()
        else:
            request.reply(ok=False, error=f"unknown command {kind!r}; valid: status, set, sample, "
                                          "pause, resume, rescale, rebalance")
        return []

    def _ask_rebalance(self, request: ControlRequest) -> None:
        """``rebalance [OPERATOR]``: key groups move to the least loaded tasks by measured load, at
        the next window boundary (Chi's skew handling, runtime/balance.py)."""
        from gyreflow.runtime.balance import describe, rebalanceable

        operator = request.command.get("operator")
        tracker = self.balance
        if operator is not None and operator not in self.operators:
            request.reply(ok=False, error=self._unknown(operator))
            return
        if operator is not None and (why := rebalanceable(self.pipeline, operator)) is not None:
            request.reply(ok=False, error=f"cannot rebalance: {why}")
            return
        if self.rescale is not None:
            request.reply(ok=False, error="a rescale or rebalance is already under way")
            return
        names = ([tracker.operator_of(operator)] if operator is not None
                 else sorted(tracker.vertices)) if tracker is not None else []
        if not names:
            request.reply(ok=False, error=(f"job {self.inbox.job!r} has no keyed operator with "
                                           "more than one task: there is nothing to balance"))
            return
        assignments, lines = {}, []
        for name in names:
            proposal = tracker.propose(name)
            if proposal is not None:
                assignments[name] = proposal[0]
                lines.append(describe(name, proposal[1], proposal[2]))
        if not assignments:
            request.reply(ok=True, message=(
                "the load is as even as moving key groups can make it (or nothing was measured "
                "yet); nothing moves"))
            return
        request.command = {**request.command, "assignments": assignments, "detail": lines}
        self.rescale = request
        self.inbox.state = "rebalancing"

    def rebalance_by_itself(self, assignments: dict[str, tuple[int, ...]], lines: list[str]) -> None:
        """Start an automatic rebalance (``control.auto_rebalance``): its answer goes nowhere."""
        if self.rescale is None:
            self.rescale = ControlRequest({"command": "rebalance", "operator": None,
                                           "assignments": assignments, "detail": lines,
                                           "auto": True})
            self.inbox.state = "rebalancing"

    def _unknown(self, operator: str) -> str:
        return (f"no operator {operator!r} in job {self.inbox.job!r}; operators: "
                f"{', '.join(sorted(self.operators))}")

    def _ask_rescale(self, request: ControlRequest) -> None:
        operator, parallelism = request.command.get("operator", ""), request.command.get("parallelism")
        if operator is None:
            self._ask_worker_rescale(request, parallelism)
        elif operator not in self.operators:
            request.reply(ok=False, error=self._unknown(operator))
        elif self.sources & {v.name for v in self.pipeline.forward_group(operator)}:
            request.reply(ok=False, error=(f"{operator!r} runs in one chain with a source, whose "
                                           "parallelism is fixed (each source task cuts its own "
                                           "windows)"))
        elif parallelism_error(parallelism, self.max_parallelism) is not None:
            request.reply(ok=False, error=parallelism_error(parallelism, self.max_parallelism))
        elif self.operators[operator].parallelism == parallelism:
            # A restart would compute the windows since the last snapshot again for nothing.
            request.reply(ok=True, message=(f"{operator} already runs with {parallelism} "
                                            f"task{'s' if parallelism != 1 else ''}; nothing "
                                            "changes"))
        elif self.rescale is not None:
            request.reply(ok=False, error="a rescale or rebalance is already under way")
        else:
            self.rescale = request
            self.inbox.state = "rescaling"

    def _ask_worker_rescale(self, request: ControlRequest, workers) -> None:
        """``rescale N``: the job's tasks in N worker processes from the next window boundary."""
        limit = getattr(self.host, "max_workers", None)
        if limit is None:
            request.reply(ok=False, error=(
                "this job's tasks do not run in worker processes (environment.workers = 1, or "
                "spark.mode = rounds): rescale an operator instead (rescale OPERATOR N)"))
        elif not isinstance(workers, int) or not 1 <= workers <= limit:
            request.reply(ok=False, error=(f"workers must be an integer from 1 to {limit} (on "
                                           f"Spark: the master's task slots), got {workers!r}"))
        elif self.rescale is not None:
            request.reply(ok=False, error="a rescale or rebalance is already under way")
        else:
            self.rescale = request
            self.inbox.state = "rescaling"

    def rescale_due(self, in_flight: bool, committed: int):
        """The ``RescaleRequested`` to raise once nothing is in flight any more, else None."""
        if self.rescale is None or in_flight:
            return None
        request = self.rescale
        return RescaleRequested(request.command["operator"], request.command.get("parallelism", 0),
                                committed, request, request.command.get("assignments"))

    def window_finished(self, cycle: int, window: int, dones) -> None:
        """Collect the samples a cycle's tasks took in ``window``; answer once every cycle has."""
        found = self.samples.get(window)
        if found is None:
            return
        request, waiting, samples = found
        for done in dones:
            samples.extend(getattr(done, "samples", ()))
        waiting.discard(cycle)
        if not waiting:
            del self.samples[window]
            request.reply(ok=True, window=window, tasks=[attrs.asdict(s) for s in samples])

    def hand_over(self) -> None:
        """The tasks stop for a restart (a rescale): samples waiting for a window they never
        started go back to the inbox, for the restarted tasks to take (set parameters are in the
        inbox already)."""
        waiting = [request for request, _, _ in self.samples.values()]
        self.samples.clear()
        self.held.clear()
        self.rescale = None  # the run answers it once the tasks are down
        self.inbox.requeue(waiting)

    def hand_back(self) -> None:
        """The tasks failed, and the run may start them again (a failover): samples and a rescale
        or rebalance not carried out yet go back to the inbox, for the restarted tasks to take;
        if the run ends instead, its end answers them. An automatic rebalance is dropped: the
        restarted tasks measure their load again."""
        waiting = [request for request, _, _ in self.samples.values()]
        if self.rescale is not None and not self.rescale.command.get("auto"):
            waiting.append(self.rescale)
        self.samples.clear()
        self.held.clear()
        self.rescale = None
        self.inbox.requeue(waiting)

    def close(self, why: str) -> None:
        """The run ends: answer what can no longer be answered."""
        for request, _, _ in self.samples.values():
            request.reply(ok=False, error=why)
        self.samples.clear()
        if self.rescale is not None:  # the input ended (or the job failed) before the boundary
            self.rescale.reply(ok=False, error=why)
            self.rescale = None
        self.held.clear()
