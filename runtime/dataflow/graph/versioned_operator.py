"""The graph operator that reads past versions: static compute on a snapshot, and traversals whose
requests name the version they ask about.

It applies every window to its graph like ``GraphOperator`` and keeps the history of the retained
versions (``versions``). A traversal's start messages carry a version; the messages of each
version travel keyed ``(version, vertex)``, and each version runs with a context and values of its
own over its ``VersionView``, so requests about different versions share the window's supersteps.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

from gyreflow.plan.operators import COMPLETED, GraphMode
from gyreflow.runtime.dataflow.graph.context import EMPTY, Slots, context_class
from gyreflow.runtime.dataflow.graph.operator import GraphOperator
from gyreflow.runtime.dataflow.graph.versions import History, VersionView
from gyreflow.runtime.errors import DataError, RecordError
from gyreflow.state.keys.keygroups import key_group_of

_MISSING = object()


class _Version:
    """One version's share of a window's traversal: its view, context and vertex values."""

    def __init__(self, operator: VersionedGraphOperator, version: int) -> None:
        self.version = version
        self.view = operator.view_of(version)
        self.context = context_class(operator.combine)(operator.spec.directed, operator.aggregators,
                                                       Slots())
        self.values: dict = {}


class VersionedGraphOperator(GraphOperator):
    """A ``GraphOperator`` whose graph keeps its retained versions readable."""

    def __init__(self, name: str, spec) -> None:
        super().__init__(name, spec)
        self.history = History(spec.retained_versions)
        self.versions: dict[int, _Version] = {}
        self.view_version: int | None = None  # static compute: the version this window reads

    def _tables(self) -> None:
        super()._tables()
        self.history_table = self.ctx.state.table(f"{self.name}:history")
        if self.view_version is not None:
            self.view = self.view_of(self.view_version)

    def restored(self) -> None:
        super().restored()
        self.history.reset()

    def view_of(self, version: int) -> VersionView:
        """Version ``version`` of this task's share of the graph."""
        return VersionView(self.graph.data, self.history_table.data, version)

    def _resolve(self, spec, window: int, record) -> int:
        """The version a start message or a snapshot names, checked against the retained ones."""
        return self.history.resolve(self.name, spec, window, record)

    # Window input ---------------------------------------------------------------------------

    def init_iteration(self, window: int) -> int:
        """Record what the window changes, apply it; a snapshot's static compute starts its
        version's vertices (in the windows it runs in)."""
        self._tables()
        self.history.trim(self.history_table, window)
        touched = {record[0] for role, batch in self.pending.get(window, ())
                   if role == "vertex" or role == "edge" for record in batch}
        if touched:
            self.history.remember(self.history_table, self.graph.data, window, touched)
        self.view_version = None
        count = super().init_iteration(window)
        if self.mode is not GraphMode.STATIC:
            return count
        target = self.spec.version
        if target is None:
            return count
        if target != COMPLETED and target != window:
            self.values = {}  # a fixed version runs in its own window only
            return 0
        self.view_version = self._resolve(target, window, ("snapshot", target))
        self.view = view = self.view_of(self.view_version)
        self.slots.clear()  # cached neighbour slots describe the version read before
        init = self._init
        self.values = {vid: init(vid, entry[0]) for vid, entry in view.items()}
        return len(self.values)

    def _changing(self, vertices: list) -> None:
        """A detached vertex's neighbours: their entries as the versions before this window read them."""
        self.history.remember(self.history_table, self.graph.data, self.window, vertices)

    def _everywhere(self, starts: list) -> list:
        """Each message of ``starts`` for every vertex of the version it names."""
        window = self.window
        found = []
        for start in starts:
            spec, message = start[1]
            vertices = list(self.view_of(self._resolve(spec, window, start)).keys())
            found.extend((vid, (spec, message)) for vid in vertices)
        return found

    def _deposit(self, box: dict, batch: list) -> None:
        """Start messages ``(vertex, (version, message))``, keyed ``(version, vertex)``."""
        window = self.window
        keyed = []
        for vid, (spec, message) in batch:
            keyed.append(((self._resolve(spec, window, (vid, message)), vid), message))
        super()._deposit(box, keyed)

    # Supersteps (traversal) -------------------------------------------------------------------

    def superstep(self, iteration: int, payload: tuple,
                  save: Callable[[bytes], None] | None = None) -> tuple[int, tuple]:
        if self.mode is not GraphMode.TRAVERSAL:
            return super().superstep(iteration, payload, save)
        opened = self._open_superstep(iteration, payload, save)
        if opened is None:
            return 0, ()
        combined, inbox = opened
        boxes: dict[int, dict] = {}
        for (version, vid), messages in inbox.items():
            boxes.setdefault(version, {})[vid] = messages
        if self.program.always_active:
            for version in self.versions:
                boxes.setdefault(version, {})
        outgoing: dict = {}
        aggregates: dict = {}
        for version, box in boxes.items():
            state = self.versions.get(version)
            if state is None:
                state = self.versions[version] = _Version(self, version)
            self._run(state, box, iteration, combined, outgoing, aggregates)
        work = self._send(iteration + 1, outgoing)
        if self.program.always_active:
            work += sum(len(state.values) for state in self.versions.values())
        return work, tuple(aggregates.items())

    def _run(self, state: _Version, box: dict, iteration: int, combined: dict, outgoing: dict,
             aggregates: dict) -> None:
        """Run the vertices of one version that have messages (or all, always active)."""
        ctx, values, view = state.context, state.values, state.view
        for vid in box:
            if vid not in values:
                entry = view.get(vid)
                if entry is not None:
                    values[vid] = self._init(vid, entry[0])
        ctx.iteration, ctx.window, ctx.num_vertices = iteration, self.window, self.num_vertices
        ctx._previous, ctx._aggregates = combined, {}
        ctx._acc = acc = [EMPTY] * len(ctx._slots.ids)
        wrap = self.combine is not None
        compute = self.program.compute
        active = list(values) if self.program.always_active else list(box)
        vid = messages = None
        try:
            for vid in active:
                old = values.get(vid, _MISSING)
                if old is _MISSING:
                    continue  # a message to a vertex this version does not have
                ctx.id, ctx.value, ctx._entry = vid, old, view[vid]
                messages = box.get(vid, _MISSING)
                messages = [] if messages is _MISSING else [messages] if wrap else messages
                compute(ctx, messages)
                if ctx.value is not old:
                    values[vid] = ctx.value
        except DataError:  # the graph's data cannot serve the program (an edge weight missing)
            raise
        except Exception as exc:
            raise RecordError(self.name, (vid, messages), exc) from exc
        ids = ctx._slots.ids
        version = state.version
        for slot, message in enumerate(acc):
            if message is not EMPTY:
                outgoing[(version, ids[slot])] = message
        ctx._acc = []
        for name, value in ctx._aggregates.items():
            aggregates[name] = (self.aggregators[name].combine(aggregates[name], value)
                                if name in aggregates else value)

    def _send(self, iteration: int, outgoing: dict) -> int:
        """Hand ``(version, vertex)``-keyed messages to the tasks that own the vertices."""
        if self.mode is not GraphMode.TRAVERSAL:
            return super()._send(iteration, outgoing)
        if not outgoing:
            return 0
        parallelism, mp = self.parallelism, self.max_parallelism
        by_task: dict[int, dict] = {}
        for key, message in outgoing.items():
            owner = key_group_of(key[1], mp) * parallelism // mp
            by_task.setdefault(owner, {})[key] = message
        for owner, box in by_task.items():
            self.loop.put(owner, iteration, box, self.merge)
        return len(outgoing)

    def finish_iteration(self, window: int) -> None:
        """Emit what every version's traversal emitted; a snapshot's static compute as usual."""
        if self.mode is GraphMode.TRAVERSAL:
            for state in self.versions.values():
                self.context.emitted.extend(state.context.emitted)
            self.versions = {}
        super().finish_iteration(window)
        self.view_version = None
        self.view = self.graph.data

    # Moving between processes and iteration snapshots ---------------------------------------------

    def _versions_state(self) -> dict:
        return {v: (s.values, s.context.emitted) for v, s in self.versions.items()}

    def _take_versions(self, saved: dict) -> None:
        self.versions = {}
        for version, (values, emitted) in saved.items():
            state = self.versions[version] = _Version(self, version)
            state.values, state.context.emitted = values, emitted

    def progress(self, done: int, payload: tuple, inbox: dict) -> bytes:
        record = pickle.loads(super().progress(done, payload, inbox))
        return pickle.dumps((*record, (self._versions_state(), self.view_version)),
                            pickle.HIGHEST_PROTOCOL)

    def restore_progress(self, record: tuple) -> tuple:
        payload = super().restore_progress(record)
        versions, self.view_version = record[12]
        if self.view_version is not None:
            self.view = self.view_of(self.view_version)
        self._take_versions(versions)
        return payload

    def export_state(self) -> tuple:
        return (*super().export_state(), (self._versions_state(), self.view_version))

    def import_state(self, state: tuple) -> None:
        versions, self.view_version = state[-1]
        super().import_state(state[:-1])
        self._take_versions(versions)
