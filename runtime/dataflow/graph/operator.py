"""The running graph operator: one task's share of a graph view and the supersteps of its program.

The task keeps its vertices (by key group) in keyed state tables, so the graph is snapshotted and
restored with every window like any keyed state: ``NAME:graph`` maps a vertex id to ``[value the
vertex stream gave, out-neighbours, out-edge values, in-neighbours, in-edge values]`` (lists of ids;
a values list is None while every value is None, and in an undirected graph the in-lists are None:
every incident edge is an out-edge), and, for incremental computations, ``NAME:values`` maps it to the
computed value. Lists of plain ids keep snapshots cheap (they pickle several times faster than lists of
pairs). Input of a window is held until the scheduler's InitIteration for that window
(``window_input``); supersteps then exchange messages with the other tasks of the operator
through a loop exchange, combined per target vertex when the program has a combiner
(``supersteps``); a window in progress is snapshotted between supersteps and moved between
processes as one value (``progress``). ``GraphOperator`` holds the state and joins the three.
"""

from __future__ import annotations

from gyreflow.plan.operators import GraphComputeSpec, GraphMode
from gyreflow.runtime.dataflow.graph.context import Slots, context_class
from gyreflow.runtime.dataflow.graph.progress import Progress
from gyreflow.runtime.dataflow.graph.supersteps import Supersteps, merger
from gyreflow.runtime.dataflow.graph.window_input import WindowInput
from gyreflow.runtime.dataflow.operators import Operator
from gyreflow.runtime.errors import RecordError


def _base_method(program, name: str) -> bool:
    """Whether ``program`` keeps the default ``name`` method, which returns the value it is given."""
    return getattr(getattr(type(program), name, None), "identity_default", False)


class GraphOperator(WindowInput, Supersteps, Progress, Operator):
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

    def _tables(self) -> None:
        # Looked up again for every window: a rollback may have replaced the tables' contents.
        self.graph = self.ctx.state.table(f"{self.name}:graph")
        self.view = self.graph.data  # what the supersteps read (a versioned operator: a version)
        if self.mode is GraphMode.INCREMENTAL:
            self.values = self.values_table().data

    def _init(self, vid, value):
        try:
            return self.program.init(vid, value)
        except Exception as exc:
            raise RecordError(self.name, (vid, value), exc) from exc

    def values_table(self):
        """The state table of computed values (incremental computations)."""
        return self.ctx.state.table(f"{self.name}:values")
