"""The running graph operator of array programs: one array operation per task and superstep.

The task keeps its share of the graph in the keyed state table ``NAME:chunks``, one chunk per key
group (see ``graph_partition``), and, for incremental computations, the computed values per chunk
in ``NAME:values``. When a window adds vertices or edges (or the state was restored) the task builds
its CSR partition again from the chunks; then each superstep hands the program the vertex values,
the partition and the combined incoming messages as arrays. Messages travel between the tasks of the
operator through the same loop exchange as per-vertex programs, as array pieces per target task:
``(positions, None, values, counts)`` for the task's own vertices, ``(None, ids, values, counts)``
for another task's.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np

from gyreflow.plan.graph_changes import VertexStillConnectedError
from gyreflow.plan.operators import GraphComputeSpec, GraphMode
from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.array_context import ArrayContext, receive, split_outgoing
from gyreflow.runtime.dataflow.graph_arrays import COMBINES, concat_ids, id_array
from gyreflow.runtime.dataflow.graph_context import Slots
from gyreflow.runtime.dataflow.graph_operator import GraphOperator
from gyreflow.runtime.dataflow.graph_partition import Partition, add_window_input, chunk_key
from gyreflow.runtime.dataflow.graph_removals import (
    apply_changes,
    has_removals,
    refused_removal,
    vertex_record_ids,
)
from gyreflow.runtime.dataflow.graph_supersteps import REMOVAL_SCOPE, REMOVALS, VERTEX_COUNT
from gyreflow.runtime.errors import DataError, RecordError


def merge_pieces(box: list, more: list) -> None:
    """Merge one box of array message pieces into another."""
    box.extend(more)


class _Holder:
    """What ``export_state`` carries besides the tables: the emitted list of the context."""

    emitted: list
    notifications: dict


class ArrayGraphOperator(GraphOperator):
    """Runs a ``GraphComputeSpec`` whose program is an array program (``spec.arrays``)."""

    def __init__(self, name: str, spec: GraphComputeSpec) -> None:
        super().__init__(name, spec)
        combine = type(self.program).combine
        if combine not in COMBINES:
            msg = f"combine must be one of {COMBINES}, got {combine!r}"
            raise ValueError(msg)
        self.combine = combine
        self.merge = merge_pieces
        self.part: Partition | None = None
        self.values = None
        self.before = None  # incremental: the values when the window's supersteps started
        self.fresh = np.zeros(0, np.int64)
        self.scope = self.local_scope = frozenset()  # removals: see ``_restart``
        self.lost = None
        self.gone_values: list = []  # removals: the stored values of the removed vertices
        self.touched = np.zeros(0, dtype=bool)
        self.added = _NO_EDGES
        self.plain_result = getattr(getattr(type(self.program), "result", None), "identity_default",
                                    False)

    def open(self, ctx) -> None:
        self.ctx = ctx
        state = ctx.state
        self._tables()
        self.index = ctx.task_index
        self.parallelism = ctx.parallelism
        self.max_parallelism = state.max_parallelism
        self.aggregators = dict(type(self.program).aggregators)
        self.slots = Slots()  # unused; a restore clears it
        self.context = _Holder()
        self.context.emitted = []
        self.context.notifications = {}
        self.ctx_arrays = None

    def _tables(self) -> None:
        self.graph = self.ctx.state.table(f"{self.name}:chunks")
        if self.mode is GraphMode.INCREMENTAL:
            self.value_chunks = self.ctx.state.table(f"{self.name}:values")

    def restored(self) -> None:
        self.part = None  # the chunks were replaced: the partition describes the old ones

    # Window input ---------------------------------------------------------------------------

    def init_iteration(self, window: int) -> int:
        """Add window ``window``'s input to the chunks, build the partition, start the values."""
        self.window = window
        self._tables()
        touched = self._apply_window(window)
        part = self.part
        rebuilt = part is None
        if rebuilt:
            part = self.part = self._build(self.graph.data)
            if self.combine == "sum":  # sums travel by sparse products with the transposed edges
                part.transposed(0)
        n = part.n
        if touched is None:
            self.touched = np.zeros(n, dtype=bool)
        else:
            positions, found = part.index.lookup(touched)
            self.touched = np.zeros(n, dtype=bool)
            self.touched[positions[found]] = True
        if self.mode is GraphMode.STATIC:
            self.values = self._init(np.arange(n))
        elif self.mode is GraphMode.INCREMENTAL:
            fresh = np.zeros(0, np.int64)
            if rebuilt or self.values is None:
                self.values, fresh = self._continue_values(part, dict(self.value_chunks.data))
            self.before = self.values.copy()
            self.fresh = fresh
            if self.removals:
                self.local_scope = self._removal_scope()
        return n

    def _apply_window(self, window: int):
        """Apply window ``window``'s input to the chunks, extending the partition in place when
        it can and dropping it otherwise; returns the ids the input touched (None: nothing)."""
        # The window stays pending, empty, until its results are out: a task told that its input
        # ended defers the end while a window is pending.
        records = self.pending.get(window, ())
        self.pending[window] = []
        chunks = self.graph.data
        touched = None
        self.added = _NO_EDGES
        self.removals, self.removed, self.scope, self.lost = 0, [], frozenset(), None
        if has_removals(records):
            self._apply_removals(chunks, records)
            touched = self.touched_ids
        elif any(batch for _, batch in records):
            changed, touched, self.added = add_window_input(
                chunks, records, self.max_parallelism, self.spec.directed,
                self.ctx.state.key_groups)
            self.graph.mark_changed(changed)
            # The partition follows in place: new vertices and columns, the values the vertex
            # records gave. Vertex blocks (arrays of many) build it again.
            given, blocks = vertex_record_ids(records)
            ensured = concat_ids([id_array(batch) for role, batch in records
                                  if role == "ensure" and batch])
            if self.part is not None and (blocks or not self._extend(self.added, chunks, ensured,
                                                                      given)):
                self.part = None
            if self.mode is not GraphMode.INCREMENTAL:  # every edge is new: keep no copy
                self.added = _NO_EDGES
        return touched

    def _removal_scope(self):
        """What this task's vertices that lost an edge say of the vertices to start again."""
        positions, found = self.part.index.lookup(self.lost)
        # The removed vertices' last values count too: a vertex's value may rest on a removed
        # vertex (the source of a search) whose neighbours' values say nothing of it.
        values = [self.values[np.unique(positions[found])], *self.gone_values]
        count = sum(len(v) for v in values)
        if not count:
            return frozenset()
        try:
            scope = self.program.removal_scope(_concat(values))
        except Exception as exc:
            raise RecordError(self.name, ("removal_scope", count, "vertices"), exc) from exc
        return None if scope is None else frozenset(scope)

    def removal_partials(self) -> tuple:
        """The window's removals and, incremental, this task's part of the removal scope."""
        if not self.removals:
            return ()
        if self.mode is not GraphMode.INCREMENTAL:
            return ((REMOVALS, self.removals),)
        return ((REMOVALS, self.removals), (REMOVAL_SCOPE, self.local_scope))

    def _restart(self, scope) -> None:
        """Incremental, a window that removed something: the vertices ``restarts`` picks start
        again from ``init`` and count as touched; every edge counts as new."""
        n = self.part.n
        if scope is None:
            mask = np.ones(n, dtype=bool)
        else:
            try:
                mask = np.asarray(self.program.restarts(self.values, scope), dtype=bool)
            except Exception as exc:
                raise RecordError(self.name, ("restarts", n, "vertices"), exc) from exc
            if mask.shape != (n,):
                msg = (f"{type(self.program).__name__}.restarts gave shape {mask.shape} for "
                       f"{plural(n, 'vertex', 'vertices')}")
                raise RecordError(self.name, ("restarts", n, "vertices"), ValueError(msg))
        if mask.any():
            positions = np.flatnonzero(mask)
            values = self.values.copy()
            values[positions] = self._init(positions)
            self.values = values
            self.touched = self.touched | mask
        self.added = None
        self.scope = scope

    def _apply_removals(self, chunks: dict, records: list) -> None:
        """A window that removes edges or vertices: apply it in order and drop the removed
        vertices' stored values. The partition follows in place when only edges changed between
        vertices it has; otherwise it is built again."""
        try:
            applied = apply_changes(chunks, records, self.max_parallelism, self.spec.directed,
                                    self.ctx.state.key_groups)
        except VertexStillConnectedError as exc:
            raise refused_removal(exc.vertex, exc) from exc
        self.touched_ids, self.lost, self.removals = applied.touched, applied.lost, applied.removed
        self.removed = applied.gone
        self.graph.mark_changed(applied.changed)
        self.gone_values = []
        if self.mode is GraphMode.INCREMENTAL:
            stored = self.value_chunks.data
            for key, mask in applied.kept.items():
                values = stored.get(key)
                if values is not None:
                    self.gone_values.append(values[~mask[:len(values)]])
                    stored[key] = values[mask[:len(values)]]
                    self.value_chunks.changed.add(key)
        self.added = None  # every edge counts as new
        part = self.part
        if part is None or applied.reshaped:
            self.part = None
        else:
            part.remove(*applied.removals)
            added = _NO_EDGES if applied.added is None else applied.added
            if not self._extend(added, chunks, applied.ensured, applied.given):
                self.part = None
        if self.part is None:
            self.values = None

    def _extend(self, added: tuple, chunks: dict, ensured: np.ndarray,
                given: np.ndarray) -> bool:
        """Extend the partition in place (``Partition.extend``, then the vertex-stream values of
        ``given``); new vertices start from their stored values or ``init`` (the values are taken
        again). False: it is to be built again."""
        part = self.part
        n = part.n
        if not part.extend(added, chunks, concat_ids([ensured, given])):
            return False
        if len(given) and not part.update_given(chunks, given):
            return False
        if part.n != n:
            self.values = None
        return True

    def _build(self, chunks: dict) -> Partition:
        mp = self.max_parallelism
        groups = [g for g in self.ctx.state.key_groups if chunk_key(g, mp) in chunks]
        return Partition([(g, chunks[chunk_key(g, mp)]) for g in groups], self.spec.directed,
                         self.parallelism, mp)

    def _continue_values(self, part: Partition, old: dict) -> tuple[np.ndarray, np.ndarray]:
        """Incremental: every vertex's stored value, ``init`` for the vertices without one; returns
        the values and the positions of the vertices that got a start value."""
        mp = self.max_parallelism
        segments, fresh = [], []
        for i, group in enumerate(part.groups):
            start, end = int(part.offsets[i]), int(part.offsets[i + 1])
            stored = old.get(chunk_key(group, mp))
            have = 0 if stored is None else min(len(stored), end - start)
            segments.append((stored[:have] if have else None, start + have, end))
            if end > start + have:
                fresh.append(np.arange(start + have, end))
        positions = np.concatenate(fresh) if fresh else np.zeros(0, np.int64)
        started = self._init(positions)
        out, cursor = [], 0
        for stored, lo, hi in segments:
            if stored is not None:
                out.append(stored)
            if hi > lo:
                out.append(started[cursor:cursor + hi - lo])
                cursor += hi - lo
        return (_concat(out) if out else started), positions

    def _init(self, positions: np.ndarray) -> np.ndarray:
        part = self.part
        ids, given = part.ids[positions], part.given[positions]
        try:
            values = np.asarray(self.program.init(ids, given))
            if values.shape != (len(ids),):
                msg = (f"{type(self.program).__name__}.init returned values of shape "
                       f"{values.shape} for {plural(len(ids), 'vertex', 'vertices')}")
                raise ValueError(msg)
        except Exception as exc:
            raise RecordError(self.name, ("init", len(ids), "vertices"), exc) from exc
        return values

    # Supersteps ------------------------------------------------------------------------------

    def superstep(self, iteration: int, payload: tuple,
                  save: Callable[[bytes], None] | None = None) -> tuple[int, tuple]:
        """Run superstep ``iteration`` as one call of the program's ``compute``."""
        combined = self._combine_partials(payload)
        if iteration == 1:
            self.num_vertices = combined.pop(VERTEX_COUNT, 0)
            scope = combined.pop(REMOVAL_SCOPE, frozenset())
            if combined.pop(REMOVALS, 0) and self.mode is GraphMode.INCREMENTAL:
                self._restart(scope)
            combined = {name: agg.zero for name, agg in self.aggregators.items()}
        elif self._terminates(iteration - 1, combined):
            self.loop.discard(self.index)
            return 0, ()
        pieces = self.loop.take(self.index, iteration) or []
        if save is not None:
            save(self.progress(iteration - 1, payload, pieces))
        part = self.part
        inbox = receive(pieces, part, self.combine)
        ctx = ArrayContext(part, self.combine, self.aggregators)
        ctx.values = self.values
        ctx.touched = self.touched
        ctx.added = self.added if self.mode is GraphMode.INCREMENTAL else None
        ctx.removal_scope = self.scope
        ctx.iteration = iteration
        ctx.window = self.window
        ctx.num_vertices = self.num_vertices
        ctx._previous = combined
        try:
            new = self.program.compute(ctx, inbox)
            new = np.asarray(ctx.values if new is None else new)
            if new.shape != (part.n,):
                msg = (f"{type(self.program).__name__}.compute returned values of shape "
                       f"{new.shape} for {plural(part.n, 'vertex', 'vertices')}")
                raise ValueError(msg)
        except DataError:  # the graph's data cannot serve the program (an edge weight missing)
            raise
        except Exception as exc:
            raise RecordError(self.name, ("superstep", iteration, plural(len(inbox), "message")),
                              exc) from exc
        self.values = new
        work = self._send_pieces(iteration + 1, *ctx.outbox.finish())
        if self.program.always_active:
            work += part.n
        return work, tuple(ctx.aggregates.items())

    def _send_pieces(self, iteration: int, columns, values, counts) -> int:
        if len(columns) == 0:
            return 0
        if self.combine is None:  # every message kept: bring them in column order
            order = np.argsort(columns, kind="stable")
            columns, values = columns[order], values[order]
        local, remote = split_outgoing(self.part, columns, values, counts)
        if len(local[0]):
            self.loop.put(self.index, iteration, [local], self.merge)
        for owner, piece in remote.items():
            self.loop.put(owner, iteration, [piece], self.merge)
        return len(columns)

    def finish_iteration(self, window: int) -> None:
        """The window's supersteps ended: emit the results (incremental: the changed ones)."""
        self.loop.discard(self.index)
        self.pending.pop(window, None)
        self.added = _NO_EDGES
        part = self.part
        values = self.values
        if self.mode is GraphMode.INCREMENTAL:
            changed = _differs(values, self.before)
            if len(self.fresh):
                changed[self.fresh] = True
            self.fresh = np.zeros(0, np.int64)
            positions = np.flatnonzero(changed)
            self._store_values(positions)
        else:
            positions = None
        ids = part.ids if positions is None else part.ids[positions]
        chosen = values if positions is None else values[positions]
        if not self.plain_result:
            try:
                chosen = self.program.result(ids, chosen)
            except Exception as exc:
                raise RecordError(self.name, ("result", len(ids), "vertices"), exc) from exc
        results = chosen.tolist() if isinstance(chosen, np.ndarray) else list(chosen)
        records = list(zip(ids.tolist(), results, strict=True))
        if self.mode is GraphMode.INCREMENTAL and self.removed:
            records.extend((vid, None) for vid in self.removed)  # an upsert stream's delete
        self.removed = []
        self._emit(records)

    def _store_values(self, positions: np.ndarray) -> None:
        """Incremental: write the value chunks of the groups whose values changed."""
        part = self.part
        mp = self.max_parallelism
        table = self.value_chunks
        groups = np.searchsorted(part.offsets, positions, side="right") - 1
        stored = table.data
        for i, group in enumerate(part.groups):
            key = chunk_key(group, mp)
            start, end = part.offsets[i], part.offsets[i + 1]
            if key not in stored or len(stored[key]) != end - start or (groups == i).any():
                stored[key] = self.values[start:end].copy()
                table.changed.add(key)

    def progress(self, done: int, payload: tuple, inbox) -> bytes:
        """Where the window stands after superstep ``done`` (an iteration snapshot)."""
        return pickle.dumps((self.window, done, self.parallelism, payload, self.values, inbox,
                             (self.touched, self.added), (self.before, self.fresh),
                             self.num_vertices, [], {}, self.removed),
                            pickle.HIGHEST_PROTOCOL)

    def restore_progress(self, record: tuple) -> tuple:
        """Go on from ``progress``'s record; returns the payload superstep ``done + 1`` takes."""
        (_, done, _, payload, self.values, inbox, (self.touched, self.added),
         (self.before, self.fresh), self.num_vertices, _, _) = record[:11]
        self.removed = record[11] if len(record) > 11 else []
        if inbox:
            self.loop.put(self.index, done + 1, inbox, self.merge)
        return payload

    # Moving between processes ------------------------------------------------------------

    def export_state(self) -> tuple:
        """Everything this task holds, to rebuild it in another process (Spark)."""
        tables = {}
        for table in self.ctx.state.tables.values():
            if table.name.startswith(f"{self.name}:"):
                tables[table.name] = (table.data, table.changed, table.removed)
        # Not the CSR partition: it is rebuilt from the chunks where needed, and leaving it out
        # keeps the bytes a Spark step persists per task to the graph itself.
        return (tables, self.values, self.collecting, self.pending, (self.touched, self.added),
                self.before, self.fresh, self.num_vertices, self.window,
                (self.removed, self.removals))

    def import_state(self, state: tuple) -> None:
        """Take over what ``export_state`` gave."""
        (tables, self.values, self.collecting, self.pending, (self.touched, self.added),
         self.before, self.fresh, self.num_vertices, self.window,
         (self.removed, self.removals)) = state
        for name, (data, changed, removed) in tables.items():
            table = self.ctx.state.table(name)
            table.data, table.changed, table.removed = data, changed, removed
        self._tables()
        self.part = self._build(self.graph.data) if self.graph.data else None


_NO_EDGES = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8), None)


def _concat(parts: list) -> np.ndarray:
    if all(p.dtype != object for p in parts):
        return np.concatenate(parts)
    return np.concatenate([p.astype(object) for p in parts])


def _differs(values: np.ndarray, before: np.ndarray | None) -> np.ndarray:
    if before is None or len(before) != len(values):
        return np.ones(len(values), dtype=bool)
    return np.asarray(values != before, dtype=bool)
