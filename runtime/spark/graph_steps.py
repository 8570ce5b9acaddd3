"""Graph computations on Spark: each iteration step of a window is a Spark job of its own.

A window round reaches a graph vertex with its input RDD (vertices, edges and start messages,
partitioned by target task). From there the driver runs a short sequence of jobs, each one
``mapPartitionsWithIndex`` over the co-partitioned union of the tasks' *state* (one element per
task: its share of the graph and of the window in progress) and the *loop messages* sent in the
previous step: the input job (the window's input arrives; the task reports INPUT_READY), then, as the
driver-side iteration scheduler answers the collected Done events, InitIteration, ExecuteFirstIteration,
ExecuteCompute per superstep, and FinishIteration, whose job emits the results to the downstream
stages and snapshots the task. Each job's output is local-checkpointed, so the lineage stays one step
long however many supersteps run. The graph's state at the end of a window stays cached for the next
window's round; a task without it (the first window after a start or a resume) restores from the
state backend.

Costs per step, and what keeps them down: a task's state travels as bytes pickled once by the task,
so the passes that only route it (the Done filter, the loop filter) copy bytes instead of unpickling a
graph; a job reads the previous job's persisted output as it is (each task's state sits in its own
partition) plus the shuffled loop messages, brought to the same serializer by one identity pass
(PySpark's public ``union`` needs equal serializers). Within a window a Python
worker keeps each task it ran, live, in ``_LIVE`` under the job's step: the next step's task, when it
lands on the same worker (most steps with reused workers), goes on with it and never unpickles its
state; on any other worker, or after a failure, the pickled state is the fallback.
"""

from __future__ import annotations

import pickle

import attrs

from gyreflow.runtime.dataflow.iteration import IterationTask, task_class_for
from gyreflow.runtime.dataflow.task_runner import Dispatcher, TaskRunner, failed_task
from gyreflow.runtime.spark.partition import DONE, Round, _build_task, _plan
from gyreflow.scheduler.events import EventKind, TaskFailed

STATE = -2  # target vertex of items that carry a task's graph state
LOOP = -3  # target vertex of items that carry loop messages between supersteps
# A reused Python worker keeps the tasks it ran within a window: (run id, vertex, index) ->
# ((window, step), task, holder). Only the job of the next step takes one over.
_LIVE: dict[tuple[str, int, int], tuple[tuple[int, int], object, object]] = {}
_ITERATION_EVENTS = (EventKind.INIT_ITERATION, EventKind.EXECUTE_FIRST_ITERATION,
                     EventKind.EXECUTE_COMPUTE, EventKind.FINISH_ITERATION,
                     EventKind.RESTORE_ITERATION)


class _SparkLoop:
    """The loop exchange of one task in one job: incoming boxes from the job's input, outgoing boxes
    as output items."""

    def __init__(self, incoming: dict[int, dict], merge) -> None:
        self.incoming = incoming
        self.outgoing: list = []

    def put(self, index: int, iteration: int, messages: dict, merge) -> None:
        self.outgoing.append((index, (iteration, messages)))

    def take(self, index: int, iteration: int) -> dict:
        return self.incoming.pop(iteration, {})

    def discard(self, index: int) -> None:
        self.incoming.clear()


def _merge_boxes(items: list, merge) -> dict[int, dict]:
    boxes: dict[int, dict] = {}
    for iteration, messages in items:
        box = boxes.get(iteration)
        if box is None:
            boxes[iteration] = messages
        else:
            merge(box, messages)
    return boxes


def _graph_job(spec: Round, events: dict[int, object] | None, step: int = 0,
               keep_live: bool = True):
    """The function of one graph job, step ``step`` of its window: ``events`` by task index, or None
    for the input job (step 0); ``keep_live`` False rebuilds every task from its pickled state."""

    def run(index: int, iterator):
        state, loops, messages = None, [], []
        for item in iterator:
            if len(item) == 3:  # the previous job's own items: only this task's state is for it
                if item[0] == STATE:
                    state = item[2]
                continue
            kind, body = item[1]
            if kind == STATE:
                state = body
            elif kind == LOOP:
                loops.append(body)
            else:
                messages.append(body)
        return iter(_run_graph_task(spec, index, state, loops, messages,
                                    None if events is None else events.get(index), step,
                                    keep_live))

    return run


def _run_graph_task(spec: Round, index: int, state, loops: list, messages: list, event,
                    step: int = 0, keep_live: bool = True) -> list:
    plan = _plan(spec)
    window = spec.window
    key = (spec.run_id, spec.vertex_id, index)
    for stale in [k for k in _LIVE if k[0] != spec.run_id]:
        _quietly_destroy(_LIVE.pop(stale)[1])
    live = _LIVE.pop(key, None)
    if live is not None and (event is None or live[0] != (window, step - 1) or not keep_live):
        _quietly_destroy(live[1])  # another window's or step's task: the pickled state is the truth
        live = None
    if live is None:
        task, holder = _build_task(plan, spec, index)
    else:
        _, task, holder = live
    holder.out, holder.dones = [], []
    forwarded = [m[2] for m in messages if m[0] == DONE]
    writer = task.checkpoints.writer
    # Only the input job (restoring) and the finishing job (snapshotting) touch the backend.
    needs_store = event is None or event.kind is EventKind.FINISH_ITERATION or (
        event.kind is EventKind.EXECUTE_COMPUTE and event.checkpoint)  # an iteration snapshot
    store = spec.backend.open_store() if needs_store else None
    writer.store = store
    runner = TaskRunner(task, holder.dones.append)
    dispatcher = Dispatcher({task.spec.id: runner})
    items: list = []
    try:
        checkpoints = attrs.evolve(task.checkpoints, store=store, horizon=spec.horizon,
                                   rescaled=spec.rescaled if state is None else frozenset())
        graph = task.graph
        if live is not None:
            task.checkpoints = checkpoints  # the task of the previous step, as that step left it
        elif state is None:
            task.enter_window(window, checkpoints, restore=True)
        else:
            task.import_progress(pickle.loads(state), checkpoints)
        loop = _SparkLoop(_merge_boxes(loops, graph.merge), graph.merge)
        graph.loop = loop
        if event is None:  # the input job: upstream tasks end their channels again every round
            data = [m for m in messages if m[0] != DONE]
            data.sort(key=lambda m: (m[0], m[1]))
            runner.inbox.extend((channel, message) for channel, _seq, message in data)
        else:
            dispatcher.dispatch(event)
        while runner.step():
            pass
        if not runner.failed:
            exported = pickle.dumps(task.export_progress(), pickle.HIGHEST_PROTOCOL)
            items.append((STATE, index, exported))
            items.extend((LOOP, target, body) for target, body in loop.outgoing)
            if keep_live and (event is None or event.kind is not EventKind.FINISH_ITERATION):
                # a step follows: this worker goes on with the task if it runs that step
                live = _LIVE[key] = ((window, step), task, holder)
            else:
                live = None
    except Exception as exc:  # noqa: BLE001 - reported to the driver
        error = failed_task(f"task {task.name!r} failed in window {window}", exc)
        error.__cause__ = exc
        holder.dones.append(TaskFailed(task.cycle, task.spec.id, window, error))
    finally:
        if store is not None:
            store.close()
        writer.store = None
        if live is None or _LIVE.get(key) is not live:
            _quietly_destroy(task)
    items.extend(holder.out)
    items.extend((DONE, 0, event) for event in forwarded + holder.dones)
    return items


def _quietly_destroy(task) -> None:
    try:
        task.destroy()
    except Exception:  # noqa: BLE001, S110 - the task object is dropped after every job
        pass


def _is(kind: int):
    return lambda item: item[0] == kind


def _loop_item(item):
    return item[1], (LOOP, item[2])


def _payload(item):
    return item[2]


def _downstream(item) -> bool:
    return item[0] >= 0


class SparkGraphRunner:
    """Runs the graph vertices of a plan on Spark for the host: the jobs of each window, the state
    kept between windows. The jobs' Done events go to the driver (``link``); the driver's answers,
    the next step's iteration events, come back through ``deliver``."""

    # False: no Python worker keeps a task between steps, every step rebuilds it from the pickled
    # state of the step before, as on another worker (tests set it, to take that path every time).
    keep_live = True

    def __init__(self, link, graph, partition_by) -> None:
        self.link = link
        self.partition_by = partition_by  # the host's partition function: equal partitioners
        self.task_of = {t.id: (t.vertex_id, t.index) for t in graph.tasks()}
        self.iterating = {v.id for v in graph.vertices if task_class_for(v) is IterationTask}
        self.states: dict[int, tuple[int, object]] = {}  # vertex -> (window, last job's RDD)
        self.spent: dict[int, list] = {}  # vertex -> the earlier jobs' RDDs of its last round
        self.inbox: dict[int, dict[int, object]] = {}  # vertex -> task index -> next event
        self.failed = False

    def takes(self, event) -> bool:
        """Keep ``event`` if it is an iteration event for a graph task; whether it was kept."""
        owner = self.task_of.get(event.task)
        if event.kind not in _ITERATION_EVENTS or owner is None or owner[0] not in self.iterating:
            return False
        self.inbox.setdefault(owner[0], {})[owner[1]] = event
        return True

    def handles(self, vertex) -> bool:
        """Whether ``vertex`` runs a graph computation."""
        return vertex.id in self.iterating

    def run(self, sc, vertex, base, spec: Round):
        """Run window ``spec.window`` of graph vertex ``vertex`` whose input is ``base`` (partitioned
        by target task); returns the RDD of its output items for the downstream stages."""
        parallelism = vertex.parallelism
        for spent in self.spent.pop(vertex.id, ()):  # the downstream stages of that round ran
            _unpersist(spent)
        previous = self.states.pop(vertex.id, None)
        inputs = base.mapValues(_as_data)
        if previous is not None and previous[0] == spec.window - 1:
            inputs = previous[1].union(inputs)  # as it is: each task's state sits in its partition
        rdd = self._job(inputs, parallelism, _graph_job(spec, None))
        jobs = [rdd]
        step = 0
        while not self.failed:
            events = self._answer(rdd, vertex)
            if not events:
                break
            loops = (rdd.filter(_is(LOOP)).map(_loop_item).partitionBy(parallelism, self.partition_by)
                     .map(_same, preservesPartitioning=True))  # in the serializer of ``rdd``
            step += 1
            rdd = self._job(rdd.union(loops), parallelism,
                            _graph_job(spec, events, step, self.keep_live))
            jobs.append(rdd)
        if previous is not None:
            _unpersist(previous[1])
        self.states[vertex.id] = (spec.window, rdd)
        self.spent[vertex.id] = jobs[:-1]
        outputs = [job.filter(_downstream) for job in jobs]
        return outputs[0] if len(outputs) == 1 else sc.union(outputs)

    def _job(self, inputs, parallelism: int, function):
        rdd = inputs.partitionBy(parallelism, self.partition_by).mapPartitionsWithIndex(
            function, preservesPartitioning=True)
        # Persisted, so that reading it again (its Done events, states, loop messages, output) never
        # runs the step again, and local-checkpointed: the lineage stays one step long.
        rdd.persist()
        rdd.localCheckpoint()
        return rdd

    def _answer(self, rdd, vertex) -> dict[int, object]:
        """Report the job's Done events to the driver and return the iteration events it answers
        with for this vertex's tasks (by task index)."""
        dones = rdd.filter(_is(DONE)).map(_payload).collect()
        failures = [d for d in dones if isinstance(d, TaskFailed)]
        if failures:
            self.failed = True
            dones = failures[:1]
        for done in dones:
            self.link.report(done)
        self.link.settle()  # the driver handles them now; its answers arrive through ``takes``
        return self.inbox.pop(vertex.id, {})

    def close(self) -> None:
        """Release the cached graph states and steps."""
        for _, rdd in self.states.values():
            _unpersist(rdd)
        for spent in self.spent.values():
            for rdd in spent:
                _unpersist(rdd)
        self.states.clear()
        self.spent.clear()


def _same(item):
    return item


def _as_data(payload):
    return ("data", payload)


def _unpersist(rdd) -> None:
    try:
        rdd.unpersist(blocking=False)
    except Exception:  # noqa: BLE001, S110 - best effort
        pass
