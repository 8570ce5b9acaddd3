"""A job's run from its start to its end: the job lock and state location it holds, and the new host
and driver it builds for each rescale or failover (restart) inside it (runtime/driver.py runs one)."""

from __future__ import annotations

import time
from collections.abc import Callable

from gyreflow.plan.execution import build_execution_graph
from gyreflow.plan.graph import PipelineGraph
from gyreflow.runtime.checkpoint import RecoveryOptions
from gyreflow.runtime.control import ControlInbox, RescaleRequested
from gyreflow.runtime.driver import JobDriver, JobListener
from gyreflow.runtime.host import Host
from gyreflow.runtime.metrics import Restart, TaskResult, restart_kind
from gyreflow.runtime.stop import JobInterrupted, JobStopped, StopRequest


class JobRun:
    """One run of a job from its start to its end, across the restarts inside it.

    A rescale stops the job's tasks at a window boundary and starts them again with another
    parallelism: a new host and a new driver, the same run. A failure the restart strategy
    (``restart.*``, runtime/workers/restart.py) takes on, such as a worker process that died, starts
    every task again from the last completed window the same way (failover). With
    ``environment.workers`` above 1, a local run's hosts are worker hosts.

    What belongs to the run is taken once and kept until it ends: the job lock (no other run may
    take the job in between), the state location every host of the run opens (``backend``; whoever
    made a scratch location for the run removes it after ``execute``), the control inbox and the
    result so far.

    >>> JobRun(config, backend, lambda b: LocalHost(config, b)).execute("job", graph)  # doctest: +SKIP
    """

    def __init__(self, config, backend, make_host: Callable[[object], Host],
                 listener: JobListener | None = None, stop: StopRequest | None = None,
                 control: ControlInbox | None = None) -> None:
        self.config = config
        self.backend = backend
        if config.get("environment.type") == "local" and config.get("environment.workers", 1) > 1:
            from gyreflow.runtime.workers.host import WorkerHost

            make_host = lambda backend: WorkerHost(config, backend)  # noqa: E731
        self.make_host = make_host  # a host whose tasks keep their state in the backend given
        self.workers: int | None = None  # worker processes a rescale asked for (worker hosts)
        self.graph: PipelineGraph | None = None  # the graph as the last rescale left it
        self.rescales = 0  # parallelism or worker processes changed (``control rescale``)
        self.rebalances = 0  # key groups moved between an operator's tasks (``control rebalance``)
        self.listener = listener
        self.stop = stop
        self.control = control
        self.restarts = 0  # every restart of the tasks: rescales, rebalances and failovers
        self.clock: Callable[[], float] = time.monotonic
        self.started: float | None = None  # when its tasks first ran: the wall time counts from it
        self.announced = False  # listeners heard ``on_start``
        self.untold: list[Restart] = []  # restarts the listeners have not heard of yet

    def execute(self, name: str, graph: PipelineGraph,
                recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run ``graph`` to the end of its input (restarting it as rescales ask) and return its
        result."""
        store = self.backend.open_store()  # an unreachable backend fails here, before any data moves
        try:
            lock = store.lock_job(name)  # one writer per job: a second run stops here
        finally:
            store.close()
        from gyreflow.runtime.workers.restart import RestartStrategy, store_away  # not at import
        from gyreflow.state.shared.job_lock import lock_outputs

        result = None
        self.graph = graph
        strategy = RestartStrategy.from_config(self.config)
        relock = False  # a store that was away lost the connection a database's lock lives on
        try:
            outputs = lock_outputs(name, graph)  # one run per output folder, whatever the backend
        except BaseException:
            lock.release()
            raise
        if self.stop is not None:
            self.stop.backend = self.backend.name  # what a stop may advise
        try:
            while True:
                host = self.make_host(self.backend)
                if self.workers is not None:
                    host.count = self.workers
                driver = JobDriver(self.config, host, self.listener, clock=self.clock,
                                   stop=self.stop, control=self.control, result=result, run=self)
                try:
                    if relock:
                        lock.release()
                        lock = _lock_again(self.backend, name)
                        relock = False
                    return driver.run(name, build_execution_graph(graph), recovery)
                except RescaleRequested as request:
                    before = graph
                    if request.assignments is not None:
                        for operator, assignment in request.assignments.items():
                            graph = graph.with_assignment(operator, assignment)
                        self.rebalances += 1
                    elif request.operator is None:
                        self.workers = request.parallelism
                        self.rescales += 1
                    else:
                        graph = graph.with_parallelism(request.operator, request.parallelism)
                        self.rescales += 1
                    self.untold.append(_rescale(before, graph, host, request))
                    self.graph = graph
                    recovery = RecoveryOptions(resume=True)
                    result = request.result
                    self.restarts += 1
                    if self.control is not None:
                        self.control.restarting(request.last_completed)
                    request.request.reply(ok=True, window=request.last_completed + 1,
                                          message=_rescaled(graph, request))
                except (JobStopped, JobInterrupted):
                    raise
                except Exception as error:
                    wait = strategy.delay_for(error)
                    if wait is None:
                        # Failover restarts only (not rescales), of an error the strategy restarts
                        stopping = _gave_up(error, strategy.restarts
                                            if strategy.restartable(error) else 0)
                        if stopping is error:
                            raise
                        raise stopping from error
                    # Failover: every task starts again from the last completed window.
                    result = driver.completed_result(result)
                    recovery = RecoveryOptions(resume=True)
                    self.restarts += 1
                    self.untold.append(Restart("restart", cause=str(error).strip(),
                                               attempt=strategy.restarts,
                                               attempts=strategy.attempts))
                    relock = relock or store_away(error)
                    if self.control is not None:  # status answers at once while the run waits
                        committed = getattr(getattr(driver, "scheduler", None), "committed", None)
                        self.control.restarting(
                            committed if committed is not None else self.control.restarted_after or 0,
                            strategy.restarts, strategy.attempts, time.monotonic() + wait)
                    if not self._wait(wait):
                        raise
        finally:
            for output in outputs:
                output.release()
            lock.release()

    def _wait(self, seconds: float) -> bool:
        """Wait before a restart; False if the job was asked to stop meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stop is not None and self.stop.requested:
                return False
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
        return self.stop is None or not self.stop.requested


def _gave_up(error: BaseException, restarts: int) -> BaseException:
    """The error a run stops with once its restart strategy gives up: the last one, saying how
    many restarts came before it when there were any."""
    from gyreflow.runtime.workers.wire import WorkerLostError

    if restarts and isinstance(error, WorkerLostError):
        plural = "s" if restarts > 1 else ""
        return WorkerLostError(f"{error} (the job stopped after {restarts} restart{plural}; "
                               "see restart.attempts)")
    if restarts and len(error.args) == 1 and isinstance(error.args[0], str):
        # The same note on the first line of any other error (a user function's traceback follows)
        plural = "s" if restarts > 1 else ""
        head, sep, tail = error.args[0].partition("\n\nOriginal traceback:\n")
        error.args = (f"{head} (the job stopped after {restarts} restart{plural}; see "
                      f"restart.attempts){sep}{tail}",)
    return error


def _lock_again(backend, name: str):
    """The job's lock, taken again once its store is back (a database's lock ended with the
    connection it lived on)."""
    store = backend.open_store()
    try:
        return store.lock_job(name)
    finally:
        store.close()


def _rescale(before: PipelineGraph, after: PipelineGraph, host: Host,
             request: RescaleRequested) -> Restart:
    """What a rescale or a rebalance changed, for the listeners."""
    if request.assignments is None and request.operator is None:
        was = getattr(host, "count", None)
        return Restart("rescale", f"worker processes {was} \u2192 {request.parallelism}")
    _, detail = restart_kind(before, after)
    return Restart("rebalance" if request.assignments is not None else "rescale", detail)


def _rescaled(graph: PipelineGraph, request: RescaleRequested) -> str:
    """What a rescale answers: which operators run with how many tasks from which window (or in
    how many worker processes)."""
    if request.assignments is not None:
        lines = "; ".join(request.request.command.get("detail", ()))
        return f"key groups move from window {request.last_completed + 1}: {lines}"
    if request.operator is None:
        plural = "es" if request.parallelism > 1 else ""
        return (f"the job's tasks run in {request.parallelism} worker process{plural} from window "
                f"{request.last_completed + 1}")
    group = [v.name for v in graph.forward_group(request.operator)]
    names = " and ".join([", ".join(group[:-1]), group[-1]] if len(group) > 1 else group)
    tasks = f"{request.parallelism} task{'s' if request.parallelism > 1 else ''}"
    return (f"{names} {'run' if len(group) > 1 else 'runs'} with {tasks} "
            f"{'each ' if len(group) > 1 else ''}from window {request.last_completed + 1}")

