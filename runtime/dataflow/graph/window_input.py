"""A graph operator's window input: the vertex, edge, start and detach records of a window, held
until the window's InitIteration and then applied to the task's share of the graph (additions,
then removals of edge halves and vertices), and the start messages of the first superstep."""

from __future__ import annotations

from gyreflow.plan.graph_changes import REMOVE_VERTEX, RemoveVertex, VertexStillConnectedError
from gyreflow.plan.operators import EVERY_VERTEX, GraphMode
from gyreflow.state.keys.keygroups import key_group_of


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


class WindowInput:
    """The window input of ``GraphOperator`` (a part of it: the state it reads and writes is the
    operator's)."""

    def process(self, batch: list) -> None:
        self.process_input(0, batch)

    def process_input(self, ordinal: int, batch: list) -> None:
        self.records_in += len(batch)
        self.collecting.append((self.roles[ordinal], batch))

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
        gone, self.removed = self._remove_vertices(removed_vertices, touched, updated)
        self.removals = removals + len(gone)
        self.before = None
        if gone:
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

    def _remove_vertices(self, removed: list, touched: set, updated: set) -> tuple[list, list]:
        """Apply the window's vertex removals, after its other changes; returns the removed ids,
        and those of them an incremental job reports deleted: the ones that had a value (a vertex
        added and removed in one window was in neither version)."""
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
                # removals.py works on arrays: a job without array programs never imports numpy
                from gyreflow.runtime.dataflow.graph.removals import refused_removal

                raise refused_removal(vid, VertexStillConnectedError(msg))
            table.delete(vid)
            touched.discard(vid)
            updated.discard(vid)
            gone.append(vid)
        shown = gone
        if gone:
            self.slots.forget(gone)
            if self.mode is GraphMode.INCREMENTAL:
                values = self.values_table()
                shown = [vid for vid in gone if vid in values.data]
                for vid in gone:
                    values.delete(vid)
                self.changed.difference_update(gone)
        return gone, shown

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
