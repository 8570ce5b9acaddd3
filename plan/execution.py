"""The physical plan: operator chains, nested execution vertex groups, cycles and their tasks."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable

from gyreflow.plan.graph import Partitioning, PipelineGraph, PipelineVertex
from gyreflow.plan.operators import OperatorKind
from gyreflow.state.records import frozen


@frozen(eq=False)
class ExecutionVertex:
    """A chain of fused operators that runs as one task per parallel instance.

    Records move between the operators of a chain by function call, never through a queue.
    """

    id: int
    chain: tuple[PipelineVertex, ...]
    parallelism: int

    @property
    def name(self) -> str:
        """The chain's operator names joined by ``->``."""
        return " -> ".join(v.name for v in self.chain)

    @property
    def head(self) -> PipelineVertex:
        """The first operator of the chain: it receives the vertex's input."""
        return self.chain[0]

    @property
    def is_source(self) -> bool:
        """Whether the chain starts with a source."""
        return self.head.kind is OperatorKind.SOURCE


@frozen(eq=False)
class ExecutionEdge:
    """Data moving between two execution vertices."""

    source: int
    target: int
    partitioning: Partitioning
    ordinal: int
    key_fn: Callable | None


class GroupKind(enum.Enum):
    """What an ExecutionVertexGroup schedules."""

    PIPELINE = "pipeline"  # the root: runs its child groups
    WINDOW = "window"  # one round per window (stream), or one round (batch)
    ITERATION = "iteration"  # one round per superstep, nested in a window group


@frozen(eq=False)
class ExecutionVertexGroup:
    """A set of vertices scheduled as a unit; data inside moves in pipeline mode."""

    id: int
    kind: GroupKind
    vertex_ids: tuple[int, ...]
    children: tuple[ExecutionVertexGroup, ...] = ()


@frozen
class ExecutionTask:
    """One parallel instance of an execution vertex."""

    id: int
    vertex_id: int
    index: int
    parallelism: int
    name: str


@frozen
class IterationLoop:
    """An iteration group inside a cycle: its tasks run supersteps of each window together."""

    group: int
    tasks: tuple[int, ...]
    max_iterations: int


@frozen(eq=False)
class ExecutionCycle:
    """The unit the scheduler drives: events go to the head tasks, Done events come from the tails.

    ``loops`` are the iteration groups nested in the cycle; the scheduler drives their supersteps.
    """

    id: int
    group: ExecutionVertexGroup
    tasks: tuple[ExecutionTask, ...]
    heads: tuple[int, ...]
    tails: tuple[int, ...]
    loops: tuple[IterationLoop, ...] = ()

    @property
    def iterative(self) -> bool:
        """Whether the cycle contains an iteration group."""
        return bool(self.loops)


@frozen(eq=False)
class ExecutionGraph:
    """Chained vertices, the edges between them and the nested groups, ready to schedule."""

    pipeline: PipelineGraph
    vertices: tuple[ExecutionVertex, ...]
    edges: tuple[ExecutionEdge, ...]
    root: ExecutionVertexGroup

    def vertex(self, vertex_id: int) -> ExecutionVertex:
        """Return the execution vertex ``vertex_id``."""
        return self.vertices[vertex_id]

    def inputs(self, vertex_id: int) -> list[ExecutionEdge]:
        """Edges into ``vertex_id`` by ordinal."""
        return sorted((e for e in self.edges if e.target == vertex_id), key=lambda e: e.ordinal)

    def outputs(self, vertex_id: int) -> list[ExecutionEdge]:
        """Edges out of ``vertex_id``."""
        return [e for e in self.edges if e.source == vertex_id]

    def tasks(self) -> list[ExecutionTask]:
        """Every task of every vertex, numbered from 0 in vertex order."""
        tasks = []
        for vertex in self.vertices:
            for index in range(vertex.parallelism):
                name = f"{vertex.name}[{index + 1}/{vertex.parallelism}]"
                tasks.append(ExecutionTask(len(tasks), vertex.id, index, vertex.parallelism, name))
        return tasks

    def cycles(self) -> list[ExecutionCycle]:
        """One cycle per window group, with its head and tail tasks."""
        tasks = self.tasks()
        cycles = []
        for group in self.root.children:
            members = set(group.vertex_ids)
            group_tasks = tuple(t for t in tasks if t.vertex_id in members)
            has_input = {e.target for e in self.edges if e.source in members and e.target in members}
            has_output = {e.source for e in self.edges if e.source in members and e.target in members}
            heads = tuple(t.id for t in group_tasks if t.vertex_id not in has_input)
            tails = tuple(t.id for t in group_tasks if t.vertex_id not in has_output)
            loops = tuple(
                IterationLoop(child.id, tuple(t.id for t in group_tasks if t.vertex_id in child.vertex_ids),
                              max(v.spec.max_iterations for vid in child.vertex_ids
                                  for v in self.vertex(vid).chain if v.kind is OperatorKind.ITERATION))
                for child in group.children if child.kind is GroupKind.ITERATION)
            cycles.append(ExecutionCycle(group.id, group, group_tasks, heads, tails, loops))
        return cycles

    def fingerprint(self) -> str:
        """A digest of the plan's shape: operators, their names and kinds, and the edges.

        Stored with snapshots so that resuming with an incompatible plan is refused. Parallelism is
        left out (state is kept per key group, so a job may resume with other parallelism), and so is
        the forward/rebalance distinction, which only follows from parallelism.
        """
        parts = []
        for v in self.pipeline.topological_order():
            parts.append(f"v:{v.name}:{v.spec.op}:{v.kind.value}")
        for e in self.pipeline.edges:
            src, dst = self.pipeline.vertex(e.source).name, self.pipeline.vertex(e.target).name
            partitioning = e.partitioning
            if partitioning is Partitioning.REBALANCE:
                partitioning = Partitioning.FORWARD
            parts.append(f"e:{src}:{dst}:{partitioning.value}:{e.ordinal}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def chain_vertices(graph: PipelineGraph) -> list[list[PipelineVertex]]:
    """Group the vertices into chains: an edge is fused when it is forward, the parallelism is equal,
    the target has one input and the source has one output."""
    chains: list[list[PipelineVertex]] = []
    chain_of: dict[int, list[PipelineVertex]] = {}
    for vertex in graph.topological_order():
        inputs = graph.inputs(vertex.id)
        if len(inputs) == 1:
            edge = inputs[0]
            upstream = graph.vertex(edge.source)
            if (
                edge.partitioning is Partitioning.FORWARD
                and upstream.parallelism == vertex.parallelism
                and len(graph.outputs(upstream.id)) == 1
                and chain_of[upstream.id][-1] is upstream
            ):
                chain = chain_of[upstream.id]
                chain.append(vertex)
                chain_of[vertex.id] = chain
                continue
        chain = [vertex]
        chains.append(chain)
        chain_of[vertex.id] = chain
    return chains


def build_execution_graph(graph: PipelineGraph) -> ExecutionGraph:
    """Chain the pipeline graph and group it: one window group per connected component."""
    chains = chain_vertices(graph)
    vertices = tuple(
        ExecutionVertex(index, tuple(chain), chain[0].parallelism) for index, chain in enumerate(chains)
    )
    owner = {pv.id: ev.id for ev in vertices for pv in ev.chain}
    edges = tuple(
        ExecutionEdge(owner[e.source], owner[e.target], e.partitioning, e.ordinal, e.key_fn)
        for e in graph.edges
        if owner[e.source] != owner[e.target]
    )
    # Connected components (ignoring direction) become independent window groups.
    parent = list(range(len(vertices)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for e in edges:
        parent[find(e.source)] = find(e.target)
    components: dict[int, list[int]] = {}
    for ev in vertices:
        components.setdefault(find(ev.id), []).append(ev.id)
    ordered = sorted(components.values())
    # Each vertex that runs an iteration (a graph computation) is an iteration group nested in its
    # window group: the scheduler runs its supersteps inside every window.
    looping = [ev.id for ev in vertices if any(v.kind is OperatorKind.ITERATION for v in ev.chain)]
    next_id = len(ordered) + 1
    groups = []
    for index, members in enumerate(ordered):
        children = []
        for vid in members:
            if vid in looping:
                children.append(ExecutionVertexGroup(next_id, GroupKind.ITERATION, (vid,)))
                next_id += 1
        groups.append(ExecutionVertexGroup(index + 1, GroupKind.WINDOW, tuple(members), tuple(children)))
    groups = tuple(groups)
    root = ExecutionVertexGroup(0, GroupKind.PIPELINE, tuple(ev.id for ev in vertices), groups)
    return ExecutionGraph(graph, vertices, edges, root)
