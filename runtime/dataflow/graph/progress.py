"""A graph operator's window in progress as a value: the iteration snapshot taken between
supersteps and read back on a resume, and the whole task state exported to and imported from
another process (Spark runs each superstep as a job of its own)."""

from __future__ import annotations

import pickle

from gyreflow.plan.operators import GraphMode


class Progress:
    """Iteration snapshots and moves between processes of ``GraphOperator`` (a part of it: the
    state it reads and writes is the operator's)."""

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
