"""The array graph operator that computes on a past version: ``GraphView.snapshot(...).compute``
with an array program.

Chunks are never changed in place (a window replaces the chunks it changes), so the history of a
version is the chunk objects themselves: before a window changes a key group's chunk, the chunk it
replaces is kept in the keyed table ``NAME:history`` under the window (``versions.History``),
and trimmed once no retained version reads it. A version's partition is built from those images and
the current chunks of the groups no later window changed.
"""

from __future__ import annotations

import numpy as np

from gyreflow.plan.operators import COMPLETED, GraphComputeSpec
from gyreflow.runtime.dataflow.graph.array_operator import ArrayGraphOperator
from gyreflow.runtime.dataflow.graph.chunks import chunk_key
from gyreflow.runtime.dataflow.graph.partition import Partition
from gyreflow.runtime.dataflow.graph.versions import History, VersionView


def _same(chunk):
    return chunk


class VersionedArrayGraphOperator(ArrayGraphOperator):
    """An ``ArrayGraphOperator`` whose static compute reads one retained version of the graph."""

    def __init__(self, name: str, spec: GraphComputeSpec) -> None:
        super().__init__(name, spec)
        # A snapshot's compute reads the latest completed version (the images the running window
        # records) or a fixed version in its own window (the current chunks): one window of
        # images is all it ever reads, however many versions the view retains.
        self.history = History(min(spec.retained_versions, 1), copy=_same)
        self.view_version: int | None = None  # the version the window's partition holds

    def _tables(self) -> None:
        super()._tables()
        # Not in snapshots: a restored task starts its next window by trimming every image older
        # than that window (one version is kept), so it never reads a stored one.
        self.history_table = self.ctx.state.transient_table(f"{self.name}:history")

    def restored(self) -> None:
        super().restored()
        self.history.reset()

    def init_iteration(self, window: int) -> int:
        """Apply the window and keep the chunks it replaced; start every vertex of the version
        the snapshot reads (a fixed version: in its own window only)."""
        self.window = window
        self._tables()
        self.history.trim(self.history_table, window)
        chunks = self.graph.data
        before = dict(chunks)
        self.part = None  # a version's partition: never extended with the current graph's edges
        self._apply_window(window)
        changed = [key for key, chunk in chunks.items() if before.get(key) is not chunk]
        changed += [key for key in before if key not in chunks]
        if changed:
            self.history.remember(self.history_table, before, window, changed)
        target = self.spec.version
        if target != COMPLETED and target != window:
            self.view_version = None
        else:
            self.view_version = self.history.resolve(self.name, target, window, ("snapshot", target))
        self.part = part = self._version_partition()
        self.touched = np.zeros(part.n, dtype=bool)
        self.values = self._init(np.arange(part.n))
        return part.n

    def _version_partition(self) -> Partition:
        """The partition of ``view_version`` (None: an empty one, nothing to compute here)."""
        mp = self.max_parallelism
        found = []
        if self.view_version is not None:
            view = VersionView(self.graph.data, self.history_table.data, self.view_version)
            for group in self.ctx.state.key_groups:
                chunk = view.get(chunk_key(group, mp))
                if chunk is not None:
                    found.append((group, chunk))
        part = Partition(found, self.spec.directed, self.parallelism, mp)
        if self.combine == "sum":  # sums travel by sparse products with the transposed edges
            part.transposed(0)
        return part

    def export_state(self) -> tuple:
        return (super().export_state(), self.view_version)

    def import_state(self, state: tuple) -> None:
        inner, self.view_version = state
        super().import_state(inner)
        self.part = self._version_partition()
