"""A graph operator's superstep loop: the messages of one superstep computed vertex by vertex and
sent to the tasks that own their targets (through a loop exchange, combined per target), the
partial aggregates combined, termination, notifications, and the window's results."""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.plan.operators import GraphMode
from gyreflow.runtime.dataflow.graph.context import EMPTY
from gyreflow.runtime.errors import DataError, RecordError
from gyreflow.state.keys.keygroups import key_group_of

VERTEX_COUNT = "__vertices__"
REMOVALS = "__removals__"  # partial of an InitIteration report: the elements the window removed
REMOVAL_SCOPE = "__removal_scope__"  # and what picks the vertices that start again (None: all)
_MISSING = object()
_COUNTS = (VERTEX_COUNT, REMOVALS)


def merger(combine: Callable | None) -> Callable[[dict, dict], None]:
    """The function that merges one message box into another, per target vertex."""
    if combine is None:
        def merge_lists(box: dict, more: dict) -> None:
            for key, messages in more.items():
                if key in box:
                    box[key].extend(messages)
                else:
                    box[key] = messages
        return merge_lists

    def merge_combined(box: dict, more: dict) -> None:
        for key, message in more.items():
            box[key] = combine(box[key], message) if key in box else message
    return merge_combined

class LocalLoopExchange:
    """Carries messages between the tasks of one graph operator in this process.

    Messages sent in superstep i are kept under i + 1 until their target task takes them.
    """

    def __init__(self) -> None:
        self.boxes: dict[tuple[int, int], dict] = {}

    def put(self, index: int, iteration: int, messages: dict, merge: Callable[[dict, dict], None]) -> None:
        """Add ``messages`` (vertex -> message or message list) for task ``index``."""
        key = (index, iteration)
        box = self.boxes.get(key)
        if box is None:
            self.boxes[key] = messages
        else:
            merge(box, messages)

    def take(self, index: int, iteration: int) -> dict:
        """Remove and return task ``index``'s messages for ``iteration``."""
        return self.boxes.pop((index, iteration), {})

    def discard(self, index: int) -> None:
        """Drop every message still addressed to task ``index`` (the window's supersteps ended)."""
        for key in [k for k in self.boxes if k[0] == index]:
            del self.boxes[key]


class Supersteps:
    """The superstep loop of ``GraphOperator`` (a part of it: the state it reads and writes is the
    operator's)."""

    def superstep(self, iteration: int, payload: tuple,
                  save: Callable[[bytes], None] | None = None) -> tuple[int, tuple]:
        """Run superstep ``iteration``; returns the work left (messages, active vertices) and the
        task's partial aggregates. ``save``, when given, first receives the window's progress so
        far (``progress``): an iteration snapshot."""
        program = self.program
        ctx = self.context
        opened = self._open_superstep(iteration, payload, save)
        if opened is None:
            return 0, ()
        combined, inbox = opened
        graph = self.view
        values = self.values
        if self.mode is GraphMode.TRAVERSAL:
            for vid in inbox:
                if vid not in values and vid in graph:
                    values[vid] = self._init(vid, graph[vid][0])
        if iteration == 1:
            active = (values.keys() if self.mode is GraphMode.STATIC or self.before is not None
                      else self.touched if self.mode is GraphMode.INCREMENTAL else inbox.keys())
        elif program.always_active:
            active = values.keys()
        else:
            active = inbox.keys()
        ctx.iteration = iteration
        ctx.window = self.window
        ctx.num_vertices = self.num_vertices
        ctx._previous = combined
        ctx._aggregates = {}
        ctx._acc = acc = [EMPTY] * len(self.slots.ids)
        compute = program.compute
        incremental = self.mode is GraphMode.INCREMENTAL
        changed = self.changed
        wrap = self.combine is not None
        vid = messages = None
        if ctx.notifications:
            self._notify(iteration - 1)  # every task has completed the supersteps before this one
        ctx.iteration = iteration
        try:
            for vid in list(active):
                old = values.get(vid, _MISSING)
                if old is _MISSING:
                    continue  # a message to a vertex the graph does not have
                ctx.id = vid
                ctx.value = old
                ctx._entry = graph[vid]
                messages = inbox.get(vid, _MISSING)
                if messages is _MISSING:
                    messages = []
                elif wrap:
                    messages = [messages]
                compute(ctx, messages)
                new = ctx.value
                if new is not old:
                    values[vid] = new
                    if incremental and new != old:
                        changed.add(vid)
        except DataError:  # the graph's data cannot serve the program (an edge weight missing)
            raise
        except Exception as exc:
            raise RecordError(self.name, (vid, messages), exc) from exc
        ids = self.slots.ids
        work = self._send(iteration + 1, {ids[s]: m for s, m in enumerate(acc) if m is not EMPTY})
        ctx._acc = []
        if program.always_active:
            work += len(values)
        return work, tuple(ctx._aggregates.items())

    def _open_superstep(self, iteration: int, payload: tuple, save) -> tuple[dict, dict] | None:
        """The aggregates superstep ``iteration`` reads and this task's messages; None when the
        program terminated after the previous one. The first superstep learns the vertex count and
        the window's removals; ``save`` receives the iteration snapshot."""
        combined = self._combine_partials(payload)
        if iteration == 1:
            self.num_vertices = combined.pop(VERTEX_COUNT, 0)
            if combined.pop(REMOVALS, 0) and self.mode is GraphMode.INCREMENTAL:
                self._restart()
            combined = {name: agg.zero for name, agg in self.aggregators.items()}
        elif self._terminates(iteration - 1, combined):
            self.loop.discard(self.index)
            return None
        inbox = self.loop.take(self.index, iteration)
        if save is not None:
            save(self.progress(iteration - 1, payload, inbox))
        return combined, inbox

    def _notify(self, completed: int | None) -> None:
        """Run ``on_notify`` for the requests of supersteps up to ``completed`` (None: all; the
        window's supersteps ended), in superstep order, each once."""
        ctx, values, graph = self.context, self.values, self.view
        requests = ctx.notifications
        incremental = self.mode is GraphMode.INCREMENTAL
        vid = step = None
        try:
            for step in sorted(s for s in requests if completed is None or s <= completed):
                for vid in requests.pop(step):
                    old = values.get(vid, _MISSING)
                    if old is _MISSING:
                        continue
                    ctx.id, ctx.value, ctx._entry = vid, old, graph[vid]
                    ctx.iteration = step
                    self.program.on_notify(ctx, step)
                    if ctx.value is not old:
                        values[vid] = ctx.value
                        if incremental and ctx.value != old:
                            self.changed.add(vid)
        except Exception as exc:
            raise RecordError(self.name, (vid, f"notification of superstep {step}"), exc) from exc

    def removal_partials(self) -> tuple:
        """What an InitIteration report says of the window's removals (nothing when none)."""
        return ((REMOVALS, self.removals),) if self.removals else ()

    def _combine_partials(self, payload: tuple) -> dict:
        combined: dict = {}
        for partials in payload:
            for name, value in partials:
                if name == REMOVAL_SCOPE:
                    known = combined.get(name, frozenset())
                    combined[name] = None if value is None or known is None else known | value
                elif name in _COUNTS:
                    combined[name] = combined.get(name, 0) + value
                elif name in combined:
                    combined[name] = self.aggregators[name].combine(combined[name], value)
                else:
                    combined[name] = value
        for name, agg in self.aggregators.items():
            combined.setdefault(name, agg.zero)
        return combined

    def _terminates(self, iteration: int, aggregates: dict) -> bool:
        try:
            return bool(self.program.terminate(iteration, aggregates))
        except Exception as exc:
            raise RecordError(self.name, ("terminate", iteration, aggregates), exc) from exc

    def _send(self, iteration: int, outgoing: dict) -> int:
        """Hand messages to their target tasks; returns how many target vertices got messages."""
        if not outgoing:
            return 0
        parallelism = self.parallelism
        if parallelism == 1:
            self.loop.put(0, iteration, outgoing, self.merge)
            return len(outgoing)
        by_task: dict[int, dict] = {}
        owners = self.owner_cache
        mp = self.max_parallelism
        for vid, message in outgoing.items():
            owner = owners.get(vid)
            if owner is None:
                owner = owners[vid] = key_group_of(vid, mp) * parallelism // mp
            box = by_task.get(owner)
            if box is None:
                by_task[owner] = {vid: message}
            else:
                box[vid] = message
        for owner, box in by_task.items():
            self.loop.put(owner, iteration, box, self.merge)
        return len(outgoing)

    def finish_iteration(self, window: int) -> None:
        """The window's supersteps ended: run the notifications still pending, emit the results."""
        if self.context.notifications:
            self.context._acc = [EMPTY] * len(self.slots.ids)  # messages now go nowhere
            self.context._aggregates = {}
            self._notify(None)
            self.context._acc = []
        self.loop.discard(self.index)
        program = self.program
        values = self.values
        if self.mode is GraphMode.TRAVERSAL:
            records = self.context.emitted
            self.context.emitted = []
            self.values = {}
        else:
            if self.mode is GraphMode.STATIC:
                keys = values.keys()
            else:
                if self.before is not None:  # a restarted window: compare with the values before it
                    before = self.before
                    self.changed = {vid for vid, value in values.items()
                                    if before.get(vid, _MISSING) != value}
                    self.before = None
                keys = list(self.changed)
                self.values_table().mark_changed(self.changed)
                self.changed = set()
            if self.plain_result:
                records = [(vid, values[vid]) for vid in keys]
            else:
                result = program.result
                vid = None
                try:
                    records = [(vid, result(vid, values[vid])) for vid in keys]
                except Exception as exc:
                    raise RecordError(self.name, (vid, values.get(vid)), exc) from exc
            if self.mode is GraphMode.INCREMENTAL and self.removed:
                records.extend((vid, None) for vid in self.removed)  # an upsert stream's delete
        self.removed = []
        self._emit(records)

    def _restart(self) -> None:
        """Incremental, a window that removed something from the graph: every vertex starts again
        from ``init`` (this window recomputes all, whatever the program remembers)."""
        values = self.values
        self.before = before = dict(values)
        for vid in self.changed:  # the window's new vertices: emitted whatever their value
            before.pop(vid, None)
        for vid, entry in self.graph.data.items():
            values[vid] = self._init(vid, entry[0])
