"""An array graph operator's superstep loop: one array operation per task and superstep, message
pieces sent to their target tasks, the window's results, and the window in progress as a value
(iteration snapshots, moves between processes)."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import numpy as np

from gyreflow.plan.operators import GraphMode
from gyreflow.plan.words import plural
from gyreflow.runtime.dataflow.columns.zipped import zipped_rows
from gyreflow.runtime.dataflow.graph.array_context import ArrayContext, receive, split_outgoing
from gyreflow.runtime.dataflow.graph.array_input import NO_EDGES, concat_values, differs
from gyreflow.runtime.dataflow.graph.arrays import assign, copied, rows_at, set_rows, union
from gyreflow.runtime.dataflow.graph.changelog import set_change
from gyreflow.runtime.dataflow.graph.chunks import chunk_key
from gyreflow.runtime.dataflow.graph.supersteps import REMOVAL_SCOPE, REMOVALS, VERTEX_COUNT
from gyreflow.runtime.errors import DataError, RecordError

NO_HALVES = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8))


class ArraySupersteps:
    """The superstep loop, results and progress of ``ArrayGraphOperator`` (a part of it: the state
    it reads and writes is the operator's)."""

    def superstep(self, iteration: int, payload: tuple,
                  save: Callable[[bytes], None] | None = None) -> tuple[int, tuple]:
        """Run superstep ``iteration`` as one call of the program's ``compute``."""
        combined = self._combine_partials(payload)
        if iteration == 1:
            self.known_ids.forget()
            self.num_vertices = combined.pop(VERTEX_COUNT, 0)
            scope = combined.pop(REMOVAL_SCOPE, frozenset())
            start = self.values
            if combined.pop(REMOVALS, 0) and self.mode is GraphMode.INCREMENTAL:
                self._restart(scope)
            self._journal(start)
            combined = {name: agg.zero for name, agg in self.aggregators.items()}
        elif self._terminates(iteration - 1, combined):
            self.loop.discard(self.index)
            return 0, ()
        pieces = self.loop.take(self.index, iteration) or []
        if save is not None:
            save(self.progress(iteration - 1, payload, pieces))
        part = self.part
        inbox = receive(pieces, part, self.combine, self.known_ids)
        ctx = ArrayContext(part, self.combine, self.aggregators)
        ctx.values = self.values
        ctx.touched = self.touched
        ctx.added = self.added if self.mode is GraphMode.INCREMENTAL else None
        ctx.removal_scope = self.scope
        if self.mode is GraphMode.INCREMENTAL:
            ctx.removed = NO_HALVES if not self.removals else self.removed_halves
        ctx.iteration = iteration
        ctx.window = self.window
        ctx.num_vertices = self.num_vertices
        ctx._previous = combined
        ctx.reported = None if self.reported is None else []
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
        if self.reported is not None:
            self.reported.extend(ctx.reported)
            if new is not self.values:  # not changed in place: compared whole from now on
                self._materialize_before()
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
        self.added = NO_EDGES
        self.removed_halves = None
        part = self.part
        values = self.values
        compared = None  # incremental: the positions that had a value, and that value
        if self.mode is GraphMode.INCREMENTAL:
            positions, compared = self._changed()
            self.fresh = np.zeros(0, np.int64)
            self.reported = self.before = None
            self._store_values(positions)
        else:
            positions = None
        ids = part.ids if positions is None else part.ids[positions]
        chosen = values if positions is None else rows_at(values, positions)
        if not self.plain_result:
            try:
                chosen = self.program.result(ids, chosen)
                if compared is not None:  # a change of bookkeeping only (a parent) is not emitted
                    ids, chosen = self._shown(ids, chosen, *compared)
            except Exception as exc:
                raise RecordError(self.name, ("result", len(ids), "vertices"), exc) from exc
        results = chosen.tolist() if isinstance(chosen, np.ndarray) else list(chosen)
        records = zipped_rows(ids.tolist(), results)
        if self.mode is GraphMode.INCREMENTAL and self.removed:
            records.extend((vid, None) for vid in self.removed)  # an upsert stream's delete
        self.removed = []
        self._emit(records)

    def _journal(self, start) -> None:
        """The window's first superstep: a program that says where it is about to change its
        values in place (``reports_changes``, ``part.changing``) has the values it changes
        kept as they were, instead of a copy of every vertex's (``before``); restarted vertices
        were not said, so a restart that changed values compares them all."""
        self.reported = None
        if self.mode is not GraphMode.INCREMENTAL:
            return
        if self.values is not start:  # ``_restart`` started vertices again (on a copy)
            if self.before is None:
                self.before = start
        elif self.before is None and getattr(self.program, "reports_changes", False):
            self.reported = []

    def _materialize_before(self) -> None:
        """The values as the window's supersteps found them, from the values kept (``_journal``):
        the window is compared whole from now on."""
        if self.reported is None or self.before is not None:
            self.reported = None
            return
        before = copied(self.values)
        for positions, old in reversed(self.reported):  # the first value kept wins
            set_rows(before, positions, old)
        self.before, self.reported = before, None

    def _changed(self) -> tuple[np.ndarray, tuple | None]:
        """``(positions, compared)``: the positions (sorted) whose values changed in the window,
        and ``(at, values)``: which of them (indexes into positions) had a value before the
        window (not new vertices) and that value (None: every vertex is new)."""
        values, before, fresh = self.values, self.before, self.fresh
        if self.reported is not None:  # where the program said it changed values
            said = [p for p, _ in self.reported]
            at = np.concatenate(said) if said else np.zeros(0, np.int64)
            at, first = np.unique(at, return_index=True)
            old = concat_values([o for _, o in self.reported])[first] if said else values[:0]
            moved = differs(values[at], old)
            at, old = at[moved], old[moved]
            positions = union(at, fresh)
            kept = ~_marked(fresh, len(values))[at]
            return positions, (np.searchsorted(positions, at[kept]), old[kept])
        if before is None or len(before) != len(values):
            return np.arange(len(values)), None
        changed = differs(values, before)
        changed[fresh] = True
        positions = np.flatnonzero(changed)
        at = np.flatnonzero(~_marked(fresh, len(values))[positions])
        return positions, (at, rows_at(before, positions[at]))

    def _shown(self, ids, results, at, before) -> tuple:
        """Of the vertices whose value changed, those whose result changed too (new ones always):
        ``at`` are the ones that had a value before, ``before``."""
        if not len(at):
            return ids, results
        before = self.program.result(ids[at], before)
        results = np.asarray(results)
        same = np.zeros(len(ids), dtype=bool)
        same[at] = np.asarray(results[at] == np.asarray(before), dtype=bool)
        return ids[~same], results[~same]

    def _store_values(self, positions: np.ndarray) -> None:
        """Incremental: write the value chunks of the groups whose values changed."""
        part = self.part
        mp = self.max_parallelism
        table = self.value_chunks
        groups = np.searchsorted(part.offsets, positions, side="right") - 1
        bounds = np.searchsorted(groups, np.arange(len(part.groups) + 1)).tolist()
        offsets = part.offsets.tolist()
        stored = table.data
        for i, group in enumerate(part.groups):
            key = chunk_key(group, mp)
            start, end = offsets[i], offsets[i + 1]
            old = stored.get(key)
            if bounds[i] == bounds[i + 1] and old is not None and len(old) == end - start:
                continue  # nothing changed in the group: a lookup, no arrays
            here = positions[bounds[i]:bounds[i + 1]] - start
            values = self.values[start:end]
            if (old is not None and len(old) == len(values) and old.dtype == values.dtype
                    and old.flags.writeable):  # the chunk is this task's own: set in place
                if 2 * len(here) >= len(values):
                    # Most of the group changed (PageRank's every window): written whole, it
                    # weighs less than its change (positions and values) and brings no fold.
                    assign(old, values)
                    table.pending.pop(key, None)
                    table.changed.add(key)
                    table.removed.discard(key)
                    continue
                changed = rows_at(values, here)
                set_rows(old, here, changed)
                table.record(key, set_change(here, changed, values[:0]))
                continue
            new = copied(values)
            stored[key] = new
            if old is None or len(old) > len(new) or old.dtype != new.dtype:
                table.changed.add(key)  # written whole
                continue
            here = here[here < len(old)]
            table.record(key, set_change(here, rows_at(new, here), new[len(old):]))

    def progress(self, done: int, payload: tuple, inbox) -> bytes:
        """Where the window stands after superstep ``done`` (an iteration snapshot)."""
        self._materialize_before()
        return pickle.dumps((self.window, done, self.parallelism, payload, self.values, inbox,
                             (self.touched, self.added), (self.before, self.fresh),
                             self.num_vertices, [], {}, self.removed, self._removal_state()),
                            pickle.HIGHEST_PROTOCOL)

    def restore_progress(self, record: tuple) -> tuple:
        """Go on from ``progress``'s record; returns the payload superstep ``done + 1`` takes."""
        (_, done, _, payload, self.values, inbox, (self.touched, self.added),
         (self.before, self.fresh), self.num_vertices, _, _) = record[:11]
        self.removed = record[11] if len(record) > 11 else []
        self.reported = None  # where the supersteps before changed values is not recorded
        # (a record written before the removal state was kept: none, as then)
        self._take_removal_state(record[12] if len(record) > 12 else (frozenset(), None))
        self.known_ids.forget()
        if inbox:
            self.loop.put(self.index, done + 1, inbox, self.merge)
        return payload

    def export_state(self) -> tuple:
        """Everything this task holds, to rebuild it in another process (Spark)."""
        self._materialize_before()
        tables = {}
        for table in self.ctx.state.tables.values():
            if table.name.startswith(f"{self.name}:"):
                tables[table.name] = table.export()
        # Not the CSR partition: it is rebuilt from the chunks where needed, and leaving it out
        # keeps the bytes a Spark step persists per task to the graph itself.
        return (tables, self.values, self.collecting, self.pending, (self.touched, self.added),
                self.before, self.fresh, self.num_vertices, self.window,
                (self.removed, self.removals), self._removal_state())

    def import_state(self, state: tuple) -> None:
        """Take over what ``export_state`` gave."""
        (tables, self.values, self.collecting, self.pending, (self.touched, self.added),
         self.before, self.fresh, self.num_vertices, self.window,
         (self.removed, self.removals), removal) = state
        self.reported = None  # ``_materialize_before`` turned it into ``before``
        self._take_removal_state(removal)
        self._tables()
        self.known_ids.forget()
        for name, exported in tables.items():
            self.ctx.state.table(name).take_over(exported)
        self.part = self._build(self.graph.data) if self.graph.data else None

    def _removal_state(self) -> tuple:
        """What every superstep of a window that removed something reads besides the values:
        the joined removal scope (``ctx.removal_scope``, set by the first superstep) and the
        removal halves (``ctx.removed``, from the window's input). A task rebuilt between
        supersteps (Spark, an iteration snapshot) must have them: a repairing program that finds
        no scope stops trimming and repairs while the other tasks still trim."""
        return self.scope, self.removed_halves

    def _take_removal_state(self, state: tuple) -> None:
        self.scope, self.removed_halves = state


def _marked(positions: np.ndarray, size: int) -> np.ndarray:
    """A mask of ``size`` with ``positions`` set: which of many positions are among a few is one
    lookup each (``np.isin`` sorted both, about 8 ms a window for 200,000 changed values)."""
    mask = np.zeros(size, dtype=bool)
    mask[positions] = True
    return mask
