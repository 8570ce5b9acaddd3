"""An array graph operator's window input: the window's records folded into the chunks of the
task's key groups, removals applied, the CSR partition extended in place or built again, and the
values carried over to the new layout (a restarted window's scope included)."""

from __future__ import annotations

import numpy as np

from gyreflow.plan.graph_changes import VertexStillConnectedError
from gyreflow.plan.operators import GraphMode
from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.graph.arrays import concat_ids, copied, distinct, id_array
from gyreflow.runtime.dataflow.graph.changelog import DROP, pack
from gyreflow.runtime.dataflow.graph.chunks import add_window_input, chunk_key
from gyreflow.runtime.dataflow.graph.lazy_changes import can_log, log_window
from gyreflow.runtime.dataflow.graph.partition import Partition
from gyreflow.runtime.dataflow.graph.positions import inserted
from gyreflow.runtime.dataflow.graph.removals import (
    apply_changes,
    has_removals,
    refused_removal,
    vertex_record_ids,
)
from gyreflow.runtime.dataflow.graph.supersteps import REMOVAL_SCOPE, REMOVALS
from gyreflow.runtime.errors import RecordError

NO_EDGES = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8), None)


def concat_values(parts: list) -> np.ndarray:
    if all(p.dtype != object for p in parts):
        return np.concatenate(parts)
    return np.concatenate([p.astype(object) for p in parts])

def differs(values: np.ndarray, before: np.ndarray | None) -> np.ndarray:
    if before is None or len(before) != len(values):
        return np.ones(len(values), dtype=bool)
    return np.asarray(values != before, dtype=bool)


class ArrayWindowInput:
    """The window input of ``ArrayGraphOperator`` (a part of it: the state it reads and writes is
    the operator's)."""

    carried = None  # the positions of the vertices a window placed, their values started

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
            fresh, self.carried = self.carried, None
            if rebuilt or self.values is None:
                self.values, fresh = self._continue_values(part, dict(self.value_chunks.data))
            elif fresh is None:
                fresh = np.zeros(0, np.int64)
            # a program that says what it changes keeps those values only (``_journal``)
            self.before = (None if getattr(self.program, "reports_changes", False)
                           else copied(self.values))
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
        self.added = NO_EDGES
        self.removals, self.removed, self.scope, self.lost = 0, [], frozenset(), None
        if self.part is not None and any(batch for _, batch in records) and can_log(records):
            touched = self._log_window(chunks, records)
        elif has_removals(records):
            self._apply_removals(chunks, records)
            touched = self.touched_ids
        elif any(batch for _, batch in records):
            changed, touched, self.added = add_window_input(
                chunks, records, self.max_parallelism, self.spec.directed,
                self.ctx.state.key_groups, self.graph.record)
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
                self.added = NO_EDGES
        return touched

    def _log_window(self, chunks: dict, records: list) -> np.ndarray:
        """Record the window on the chunks without reading them (``lazy_changes``) and follow
        it in the partition; returns the ids it touched."""
        window = log_window(chunks, records, self.part, self.max_parallelism, self.graph.record)
        self.graph.mark_changed(window.changed)
        part = self.part
        n = part.n
        removing = window.removals is not None
        if removing:
            self.removals = window.removed
            self.touched_ids, self.lost, self.gone_values = window.touched, window.lost, []
            self.removed_halves = window.removals  # (``finish_iteration`` forgets them)
        if not part.extend(window.added, chunks, None, new=window.new):
            self.part = self.values = None
            return window.touched
        if len(window.given):
            part.set_given(window.given, window.given_values)
        if part.n != n:
            self._carry_values(part, n)
        if self.mode is GraphMode.INCREMENTAL:  # restarts make every edge new (``_restart``)
            self.added = window.added
        return window.touched

    def _carry_values(self, part: Partition, before: int) -> None:
        """New vertices were placed in the partition: the values of the ``before`` ones follow
        them and the new ones start (``init``); without values to move, they are taken from the
        stored value chunks again."""
        points = part.inserted
        values = self.values
        if (values is None or points is None or len(points) != part.n - before
                or len(values) != before):
            self.values = None
            return
        fresh = points + np.arange(len(points))
        self.values = inserted(values, points, self._init(fresh), values.dtype)
        self.carried = fresh

    def _removal_scope(self):
        """What this task's vertices that lost an edge say of the vertices to start again."""
        positions, found = self.part.index.lookup(self.lost)
        # The removed vertices' last values count too: a vertex's value may rest on a removed
        # vertex (the source of a search) whose neighbours' values say nothing of it.
        values = [self.values[distinct(positions[found])], *self.gone_values]
        count = sum(len(v) for v in values)
        if not count:
            return frozenset()
        try:
            scope = self.program.removal_scope(concat_values(values))
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
        again from ``init`` and count as touched; when it picks any, every edge counts as new."""
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
            values = copied(self.values)
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
                                    self.ctx.state.key_groups, self.graph.record)
        except VertexStillConnectedError as exc:
            raise refused_removal(exc.vertex, exc) from exc
        self.touched_ids, self.lost, self.removals = applied.touched, applied.lost, applied.removed
        self.removed = applied.gone
        self.graph.mark_changed(applied.changed)
        self.gone_values = []
        if self.mode is GraphMode.INCREMENTAL:
            stored = self.value_chunks.data
            # Reported deleted: the removed vertices that had a value. ``gone`` lists each chunk's
            # removed ids in chunk order, chunk after chunk as ``kept`` holds them; a chunk's
            # vertices added in this window come after its stored values.
            self.removed, at = [], 0
            for key, mask in applied.kept.items():
                dropped = np.flatnonzero(~mask)
                ids, at = applied.gone[at:at + len(dropped)], at + len(dropped)
                values = stored.get(key)
                had = 0 if values is None else len(values)
                self.removed.extend(v for v, p in zip(ids, dropped.tolist(), strict=True) if p < had)
                if values is not None:
                    kept = mask[:len(values)]
                    self.gone_values.append(values[~kept])
                    stored[key] = values[kept]
                    self.value_chunks.record(key, (DROP, pack(np.flatnonzero(~kept))))
        self.added = None  # every edge counts as new
        part = self.part
        if part is None or applied.reshaped:
            self.part = None
        else:
            part.remove(*applied.removals)  # the chunks said how many went
            added = NO_EDGES if applied.added is None else applied.added
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
            self._carry_values(part, n)
        return True

    def _build(self, chunks: dict) -> Partition:
        mp = self.max_parallelism
        groups = [g for g in self.ctx.state.key_groups if chunk_key(g, mp) in chunks]
        part = Partition([(g, chunks[chunk_key(g, mp)]) for g in groups], self.spec.directed,
                         self.parallelism, mp)
        part.source = lambda: self.graph.data  # edge values are read from the chunks when asked
        return part

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
        return (concat_values(out) if out else started), positions

    def _init(self, positions: np.ndarray) -> np.ndarray:
        part = self.part
        ids, given = part.ids[positions], part.given_at(positions)
        try:
            values = np.asarray(self.program.init(ids, given))
            if values.shape != (len(ids),):
                msg = (f"{type(self.program).__name__}.init returned values of shape "
                       f"{values.shape} for {plural(len(ids), 'vertex', 'vertices')}")
                raise ValueError(msg)
        except Exception as exc:
            raise RecordError(self.name, ("init", len(ids), "vertices"), exc) from exc
        return values
