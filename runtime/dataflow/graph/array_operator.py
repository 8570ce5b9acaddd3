"""The running graph operator of array programs: one array operation per task and superstep.

The task keeps its share of the graph in the keyed state table ``NAME:chunks``, one chunk per key
group (see ``partition``), and, for incremental computations, the computed values per chunk
in ``NAME:values``. When a window adds vertices or edges (or the state was restored) the task builds
its CSR partition again from the chunks; then each superstep hands the program the vertex values,
the partition and the combined incoming messages as arrays. Messages travel between the tasks of the
operator through the same loop exchange as per-vertex programs, as array pieces per target task:
``(positions, None, values, counts)`` for the task's own vertices, ``(None, ids, values, counts)``
for another task's. The window input is ``array_input``'s, the supersteps, results and
progress ``array_supersteps``'s; ``ArrayGraphOperator`` holds the state and joins them.
"""

from __future__ import annotations

import numpy as np

from gyreflow.plan.operators import GraphComputeSpec, GraphMode
from gyreflow.runtime.dataflow.graph.array_context import KnownIds
from gyreflow.runtime.dataflow.graph.array_input import NO_EDGES, ArrayWindowInput
from gyreflow.runtime.dataflow.graph.array_supersteps import ArraySupersteps
from gyreflow.runtime.dataflow.graph.arrays import COMBINES
from gyreflow.runtime.dataflow.graph.changelog import chunk_table, values_table
from gyreflow.runtime.dataflow.graph.context import Slots
from gyreflow.runtime.dataflow.graph.operator import GraphOperator
from gyreflow.runtime.dataflow.graph.partition import Partition


def merge_pieces(box: list, more: list) -> None:
    """Merge one box of array message pieces into another."""
    box.extend(more)


class _Holder:
    """What ``export_state`` carries besides the tables: the emitted list of the context."""

    emitted: list
    notifications: dict


class ArrayGraphOperator(ArrayWindowInput, ArraySupersteps, GraphOperator):
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
        self.reported: list | None = None  # the values the program said it changes, as they were
        self.removed_halves = None  # a window's removals, edge by edge, when known
        self.scope = self.local_scope = frozenset()  # removals: see ``_restart``
        self.lost = None
        self.gone_values: list = []  # removals: the stored values of the removed vertices
        self.touched = np.zeros(0, dtype=bool)
        self.added = NO_EDGES
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
        self.known_ids = KnownIds(ctx.parallelism)  # the id lookups of received messages

    def _tables(self) -> None:
        # Logged tables: a snapshot writes the changes a window recorded (``changelog``).
        self.graph = chunk_table(self.ctx.state, f"{self.name}:chunks")
        if self.mode is GraphMode.INCREMENTAL:
            self.value_chunks = values_table(self.ctx.state, f"{self.name}:values")

    def restored(self) -> None:
        self.part = None  # the chunks were replaced: the partition describes the old ones
        self.removed_halves = None
        self.known_ids.forget()
