"""The graph operator that reads past versions: static compute on a snapshot, and traversals whose
requests name the version they ask about.

It applies every window to its graph like ``GraphOperator`` and keeps the history of the retained
versions (``versions``). A traversal's start messages carry a version; the messages of each
version travel keyed ``(version, vertex)``, and each version runs with a context and values of its
own over its ``VersionView``, so requests about different versions share the window's supersteps
(``version_supersteps``).
"""

from __future__ import annotations

import pickle

from gyreflow.plan.operators import COMPLETED, GraphMode
from gyreflow.runtime.dataflow.graph.operator import GraphOperator
from gyreflow.runtime.dataflow.graph.version_supersteps import Version, VersionSupersteps
from gyreflow.runtime.dataflow.graph.versions import History, VersionView


class VersionedGraphOperator(VersionSupersteps, GraphOperator):
    """A ``GraphOperator`` whose graph keeps its retained versions readable."""

    def __init__(self, name: str, spec) -> None:
        super().__init__(name, spec)
        self.history = History(spec.retained_versions)
        self.versions: dict[int, Version] = {}
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

    # Moving between processes and iteration snapshots ---------------------------------------------

    def _versions_state(self) -> dict:
        return {v: (s.values, s.context.emitted) for v, s in self.versions.items()}

    def _take_versions(self, saved: dict) -> None:
        self.versions = {}
        for version, (values, emitted) in saved.items():
            state = self.versions[version] = Version(self, version)
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
