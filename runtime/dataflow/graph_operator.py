"""The running graph operator: one task's share of a graph view and the supersteps of its program.

The task keeps its vertices (by key group) in keyed state tables, so the graph is snapshotted and
restored with every window like any keyed state: ``NAME:graph`` maps a vertex id to ``[value the
vertex stream gave, out-neighbours, out-edge values, in-neighbours, in-edge values]`` (lists of ids;
a values list is None while every value is None, and in an undirected graph the in-lists are None:
every incident edge is an out-edge), and, for incremental computations, ``NAME:values`` maps it to the
computed value. Lists of plain ids keep snapshots cheap (they pickle several times faster than lists of
pairs). Input of a window is held until the scheduler's
InitIteration for that window; supersteps then exchange messages with the other tasks of the operator
through a loop exchange, combined per target vertex when the program has a combiner.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

from gyreflow.plan.graph_changes import REMOVE_VERTEX, RemoveVertex, VertexStillConnectedError
from gyreflow.plan.operators import EVERY_VERTEX, GraphComputeSpec, GraphMode
from gyreflow.runtime.dataflow.graph_context import EMPTY, Slots, context_class
from gyreflow.runtime.dataflow.graph_removals import refused_removal
from gyreflow.runtime.dataflow.operators import Operator
from gyreflow.runtime.errors import DataError, RecordError
from gyreflow.state.keys.keygroups import key_group_of

VERTEX_COUNT = "__vertices__"
REMOVALS = "__removals__"  # partial of an InitIteration report: the elements the window removed
REMOVAL_SCOPE = "__removal_scope__"  # and what picks the vertices that start again (None: all)
_MISSING = object()
_COUNTS = (VERTEX_COUNT, REMOVALS)



def _base_method(program, name: str) -> bool:
    """Whether ``program`` keeps the default ``name`` method, which returns the value it is given."""
    return getattr(getattr(type(program), name, None), "identity_default", False)


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


def _remove_half(entry: list, side: int, other) -> int:
    """Remove every ``other`` from the ``side`` list of a vertex's graph entry (and its values);
    returns how many were removed."""
    return _remove_halves_to(entry, side, {other}) if other in entry[side] else 0


def _remove_halves_to(entry: list, side: int, others: set | None) -> int:
    """Remove from the ``side`` list of a vertex's graph entry every edge to one of ``others``
    (None: every edge); returns how many were removed."""
    targets = entry[side]
    if others is None:
        entry[side], entry[side + 1] = [], None
        return len(targets)
    keep = [i for i, target in enumerate(targets) if target not in others]
    if len(keep) == len(targets):
        return 0
    values = entry[side + 1]
    entry[side] = [targets[i] for i in keep]
    if values is not None:
        entry[side + 1] = [values[i] for i in keep]
    return len(targets) - len(keep)


def _append_valued(entry: list, side: int, other, value) -> None:
    targets = entry[side]
    values = entry[side + 1]
    if values is None:
        values = entry[side + 1] = [None] * len(targets)
    targets.append(other)
    values.append(value)


class GraphOperator(Operator):
    """Runs a ``GraphComputeSpec`` in one task: holds window input, runs supersteps, emits results."""

    def __init__(self, name: str, spec: GraphComputeSpec) -> None:
        super().__init__(name)
        self.spec = spec
        self.program = spec.program
        self.mode = spec.mode
        roles = ((["vertex"] if spec.has_vertices else []) + ["edge"]
                 + (["start"] if spec.has_starts else []) + (["detach"] if spec.detaches else []))
        self.roles = roles
        combine = type(self.program).combine
        self.combine = combine
        self.merge = merger(combine)
        self.collecting: list[tuple[str, list]] = []
        self.pending: dict[int, list[tuple[str, list]]] = {}
        self.loop = None
        self.touched: set = set()
        self.changed: set = set()
        self.values: dict = {}
        self.num_vertices = 0
        self.window = 0
        self.owner_cache: dict = {}
        self.plain_result = _base_method(self.program, "result")
        self.plain_init = _base_method(self.program, "init")
        self.removed: list = []  # the vertices the window removed
        self.removals = 0  # the edge halves and vertices the window removed in this task
        self.before: dict | None = None  # incremental, restarted window: the values before it

    def open(self, ctx) -> None:
        super().open(ctx)
        state = ctx.state
        self._tables()
        self.index = ctx.task_index
        self.parallelism = ctx.parallelism
        self.max_parallelism = state.max_parallelism
        aggregators = dict(type(self.program).aggregators)
        self.slots = Slots()
        self.context = context_class(self.combine)(self.spec.directed, aggregators, self.slots)
        self.aggregators = aggregators

    # Window input ---------------------------------------------------------------------------

    def process(self, batch: list) -> None:
        self.process_input(0, batch)

    def process_input(self, ordinal: int, batch: list) -> None:
        self.records_in += len(batch)
        self.collecting.append((self.roles[ordinal], batch))

    def _tables(self) -> None:
        # Looked up again for every window: a rollback may have replaced the tables' contents.
        self.graph = self.ctx.state.table(f"{self.name}:graph")
        self.view = self.graph.data  # what the supersteps read (a versioned operator: a version)
        if self.mode is GraphMode.INCREMENTAL:
            self.values = self.values_table().data

    def input_complete(self, window: int) -> None:
        """All input of ``window`` arrived: hold it until the window's InitIteration."""
        self.pending[window] = self.collecting
        self.collecting = []

    def init_iteration(self, window: int) -> int:
        """Add window ``window``'s vertices and edges to the graph; returns the task's vertex count."""
        self.window = window
        self._tables()
        self.touched = touched = set()
        self.changed = set()
        self.context.emitted = []
        self.context.notifications = {}
        starts: dict = {}
        graph = self.graph.data
        get = graph.get
        directed = self.spec.directed
        new_vertices = []
        updated = set()
        removed_vertices: list = []
        everywhere: list = []  # start messages for every vertex: the graph is complete after the loop
        detached: set = set()  # vertices removed with their edges, wherever they live
        removals = 0
        for role, batch in self.pending.pop(window, ()):
            if role == "vertex":
                for vid, value in batch:
                    if type(value) is RemoveVertex:
                        removed_vertices.append((vid, value))
                        continue
                    entry = get(vid)
                    if entry is None:
                        graph[vid] = [value, [], None, [] if directed else None, None]
                        new_vertices.append(vid)
                    else:
                        entry[0] = value
                ends = {vertex[0] for vertex in batch}
            elif role == "edge":
                for vid, other, value, side in batch:
                    if side <= 0:  # a removal
                        if side == REMOVE_VERTEX:
                            removed_vertices.append((vid, RemoveVertex(vid)))
                        elif (entry := get(vid)) is not None:
                            removals += _remove_half(entry, -side, other)
                        continue
                    entry = get(vid)
                    if entry is None:
                        entry = graph[vid] = [None, [], None, [] if directed else None, None]
                        new_vertices.append(vid)
                    if value is None and entry[side + 1] is None:
                        entry[side].append(other)
                    else:
                        _append_valued(entry, side, other, value)
                ends = {half[0] for half in batch}
                self.slots.forget(ends)
            elif role == "detach":
                detached.update(batch)
                continue
            else:
                if self.spec.broadcast_starts:
                    batch = self._own_starts(batch, everywhere)
                self._deposit(starts, batch)
                continue
            touched |= ends
            updated |= ends
        if detached:
            removals += self._detach(detached, touched, updated)
        self.removed = self._remove_vertices(removed_vertices, touched, updated)
        self.removals = removals + len(self.removed)
        self.before = None
        if self.removed:
            new_vertices = [vid for vid in new_vertices if vid in graph]
        self.graph.mark_changed(updated)
        slot = self.slots.slot  # the graph's own vertices first: neighbour slots then hit directly
        for vid in new_vertices:
            slot(vid)
        if self.mode is GraphMode.STATIC:
            if self.plain_init:
                self.values = {vid: entry[0] for vid, entry in graph.items()}
            else:
                self.values = {vid: self._init(vid, entry[0]) for vid, entry in graph.items()}
        elif self.mode is GraphMode.INCREMENTAL:
            values = self.values
            for vid in new_vertices:
                values[vid] = self._init(vid, graph[vid][0])
            self.changed.update(new_vertices)
        else:
            self.values = {}
        if everywhere:
            self._deposit(starts, self._everywhere(everywhere))
        if starts:
            self.loop.put(self.index, 1, starts, self.merge)
        return len(graph)

    def _own_starts(self, batch: list, everywhere: list) -> list:
        """Broadcast start messages: those for every vertex are put aside in ``everywhere``; of the
        others, those for this task's vertices are kept."""
        groups, most = self.ctx.state.key_groups, self.max_parallelism
        own = []
        for start in batch:
            if start[0] is EVERY_VERTEX:
                everywhere.append(start)
            elif key_group_of(start[0], most) in groups:
                own.append(start)
        return own

    def _everywhere(self, starts: list) -> list:
        """``(vertex, message)`` for each of this task's vertices and each message of ``starts``."""
        vertices = list(self.graph.data)
        return [(vid, message) for _, message in starts for vid in vertices]

    def _detach(self, detached: set, touched: set, updated: set) -> int:
        """Remove this task's halves of every edge of the ``detached`` vertices (the window's
        vertex removals with ``detach``), after the window's other changes; returns how many."""
        graph = self.graph.data
        hit = [vid for vid, entry in graph.items()
               if vid in detached or not detached.isdisjoint(entry[1])
               or (entry[3] and not detached.isdisjoint(entry[3]))]
        if not hit:
            return 0
        self._changing(hit)
        count = 0
        for vid in hit:
            entry = graph[vid]
            for side in (1, 3):
                if entry[side]:
                    count += _remove_halves_to(entry, side, None if vid in detached else detached)
        touched.update(hit)
        updated.update(hit)
        self.slots.forget(hit)
        return count

    def _changing(self, vertices: list) -> None:
        """Called with vertices whose graph entries the window is about to change beyond what its
        records name (a detached vertex's neighbours); a versioned operator records them."""

    def _remove_vertices(self, removed: list, touched: set, updated: set) -> list:
        """Apply the window's vertex removals, after its other changes; returns the removed ids."""
        table = self.graph
        graph = table.data
        gone = []
        for vid, _record in removed:
            entry = graph.get(vid)
            if entry is None:
                continue
            edges = entry[1] + (entry[3] or [])
            if edges:
                shown = ", ".join(repr(other) for other in list(dict.fromkeys(edges))[:5])
                msg = (f"vertex {vid!r} still has {len(edges)} edge(s) at the end of the window "
                       f"(to or from {shown}): remove them with RemoveEdge first, or the vertex with "
                       "RemoveVertex(id, detach=True)")
                raise refused_removal(vid, VertexStillConnectedError(msg))
            table.delete(vid)
            touched.discard(vid)
            updated.discard(vid)
            gone.append(vid)
        if gone:
            self.slots.forget(gone)
            if self.mode is GraphMode.INCREMENTAL:
                values = self.values_table()
                for vid in gone:
                    values.delete(vid)
                self.changed.difference_update(gone)
        return gone

    def _restart(self) -> None:
        """Incremental, a window that removed something from the graph: every vertex starts again
        from ``init`` (this window recomputes all, whatever the program remembers)."""
        values = self.values
        self.before = before = dict(values)
        for vid in self.changed:  # the window's new vertices: emitted whatever their value
            before.pop(vid, None)
        for vid, entry in self.graph.data.items():
            values[vid] = self._init(vid, entry[0])

    def _init(self, vid, value):
        try:
            return self.program.init(vid, value)
        except Exception as exc:
            raise RecordError(self.name, (vid, value), exc) from exc

    def _deposit(self, box: dict, batch: list) -> None:
        if self.combine is None:
            for vid, message in batch:
                if vid in box:
                    box[vid].append(message)
                else:
                    box[vid] = [message]
        else:
            combine = self.combine
            for vid, message in batch:
                box[vid] = combine(box[vid], message) if vid in box else message

    # Supersteps ------------------------------------------------------------------------------

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

    def progress(self, done: int, payload: tuple, inbox: dict) -> bytes:
        """Where the window stands after superstep ``done``: what superstep ``done + 1`` needs
        (vertex values, the messages in flight to this task, every task's partial aggregates)."""
        values = dict(self.values) if self.mode is GraphMode.INCREMENTAL else self.values
        return pickle.dumps((self.window, done, self.parallelism, payload, values, inbox,
                             self.touched, self.changed, self.num_vertices, self.context.emitted,
                             self.context.notifications, (self.before, self.removed)),
                            pickle.HIGHEST_PROTOCOL)

    def restore_progress(self, record: tuple) -> tuple:
        """Go on from ``progress``'s record; returns the payload superstep ``done + 1`` takes."""
        (_, done, _, payload, values, inbox, self.touched, self.changed, self.num_vertices,
         self.context.emitted, self.context.notifications) = record[:11]
        self.before, self.removed = record[11] if len(record) > 11 else (None, [])
        if self.mode is GraphMode.INCREMENTAL:
            self.values.clear()
            self.values.update(values)
        else:
            self.values = values
        if inbox:
            self.loop.put(self.index, done + 1, inbox, self.merge)
        return payload

    def values_table(self):
        """The state table of computed values (incremental computations)."""
        return self.ctx.state.table(f"{self.name}:values")

    # Moving between processes ------------------------------------------------------------

    def export_state(self) -> tuple:
        """Everything this task holds of the graph and the window in progress, to rebuild it in
        another process (Spark runs each superstep as a job of its own)."""
        tables = {}
        for table in self.ctx.state.tables.values():
            if table.name.startswith(f"{self.name}:"):
                tables[table.name] = (table.data, table.changed, table.removed)
        values = None if self.mode is GraphMode.INCREMENTAL else self.values
        return (tables, values, self.collecting, self.pending, self.touched, self.changed,
                self.num_vertices, self.window, self.context.emitted, self.slots,
                self.context.notifications, (self.before, self.removed, self.removals))

    def import_state(self, state: tuple) -> None:
        """Take over what ``export_state`` gave."""
        (tables, values, self.collecting, self.pending, self.touched, self.changed,
         self.num_vertices, self.window, emitted, slots, self.context.notifications,
         (self.before, self.removed, self.removals)) = state
        for name, (data, changed, removed) in tables.items():
            table = self.ctx.state.table(name)
            table.data, table.changed, table.removed = data, changed, removed
        self._tables()
        if values is not None:
            self.values = values
        self.context.emitted = emitted
        self.slots.__dict__.update(slots.__dict__)
