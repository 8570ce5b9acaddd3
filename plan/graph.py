"""The logical plan: an immutable PipelineGraph of operator vertices and partitioned edges."""

from __future__ import annotations

import enum
from collections.abc import Callable

import attrs

from gyreflow.plan.operators import OperatorKind, OperatorSpec
from gyreflow.state.records import frozen


class Partitioning(enum.Enum):
    """How records travel along an edge from the tasks of one vertex to those of the next."""

    FORWARD = "forward"  # task i -> task i; equal parallelism
    REBALANCE = "rebalance"  # round robin by batch; unequal parallelism
    KEY = "key"  # by key group of key_fn(record)
    BROADCAST = "broadcast"  # every record to every task
    LOOP = "loop"  # iteration feedback (graph supersteps)


@frozen(eq=False)
class PipelineVertex:
    """One operator with its name and parallelism."""

    id: int = attrs.field(validator=attrs.validators.ge(0))
    name: str
    spec: OperatorSpec
    parallelism: int = attrs.field(validator=attrs.validators.ge(1))
    # The task owning each key group, when a rebalance moved key groups by their load; None: the
    # ranges of ``task_of_key_group``.
    assignment: tuple[int, ...] | None = None

    @property
    def kind(self) -> OperatorKind:
        """The operator family of this vertex."""
        return self.spec.kind


@frozen(eq=False)
class PipelineEdge:
    """A data dependency: records of ``source`` feed input ``ordinal`` of ``target``."""

    source: int
    target: int
    partitioning: Partitioning
    ordinal: int = 0
    key_fn: Callable | None = None


@frozen(eq=False)
class PipelineGraph:
    """The operators of one pipeline task and the edges between them, checked when built.

    >>> from gyreflow.plan.operators import MapSpec
    >>> g = PipelineGraph((PipelineVertex(0, "m", MapSpec(str), 1),), ())
    >>> g.vertex(0).name
    'm'
    """

    vertices: tuple[PipelineVertex, ...]
    edges: tuple[PipelineEdge, ...]

    def __attrs_post_init__(self) -> None:
        ids = [v.id for v in self.vertices]
        if len(set(ids)) != len(ids):
            msg = f"duplicate vertex ids in plan: {sorted(ids)}"
            raise ValueError(msg)
        names = [v.name for v in self.vertices]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            msg = f"operator names must be unique within a pipeline task; repeated: {duplicates}"
            raise ValueError(msg)
        known = set(ids)
        for edge in self.edges:
            if edge.source not in known or edge.target not in known:
                msg = f"edge {edge.source}->{edge.target} names a vertex that is not in the plan"
                raise ValueError(msg)
            if edge.partitioning is Partitioning.FORWARD and (
                self.vertex(edge.source).parallelism != self.vertex(edge.target).parallelism
            ):
                msg = f"forward edge {edge.source}->{edge.target} joins unequal parallelism"
                raise ValueError(msg)
            if edge.partitioning is Partitioning.KEY and edge.key_fn is None:
                msg = f"key edge {edge.source}->{edge.target} has no key function"
                raise ValueError(msg)

    def vertex(self, vertex_id: int) -> PipelineVertex:
        """Return the vertex with ``vertex_id``."""
        for v in self.vertices:
            if v.id == vertex_id:
                return v
        msg = f"no vertex {vertex_id} in plan"
        raise KeyError(msg)

    def inputs(self, vertex_id: int) -> list[PipelineEdge]:
        """Edges into ``vertex_id``, by ordinal."""
        return sorted((e for e in self.edges if e.target == vertex_id), key=lambda e: e.ordinal)

    def outputs(self, vertex_id: int) -> list[PipelineEdge]:
        """Edges out of ``vertex_id``."""
        return [e for e in self.edges if e.source == vertex_id]

    def forward_group(self, name: str) -> list[PipelineVertex]:
        """The vertex named ``name`` and every vertex joined to it by forward edges (they share one
        parallelism), in id order."""
        by_name = {v.name: v for v in self.vertices}
        seen = {by_name[name].id}
        stack = [by_name[name].id]
        while stack:
            current = stack.pop()
            for edge in self.edges:
                if edge.partitioning is not Partitioning.FORWARD:
                    continue
                for a, b in ((edge.source, edge.target), (edge.target, edge.source)):
                    if a == current and b not in seen:
                        seen.add(b)
                        stack.append(b)
        return [v for v in self.vertices if v.id in seen]

    def with_parallelism(self, name: str, parallelism: int) -> PipelineGraph:
        """This graph with operator ``name`` (and its forward group) run by ``parallelism`` tasks."""
        group = {v.id for v in self.forward_group(name)}
        vertices = tuple(attrs.evolve(v, parallelism=parallelism, assignment=None)
                         if v.id in group else v for v in self.vertices)
        return PipelineGraph(vertices, self.edges)

    def with_assignment(self, name: str, assignment: tuple[int, ...] | None) -> PipelineGraph:
        """This graph with the key groups of operator ``name`` (and its forward group) owned by the
        tasks ``assignment`` names, one per key group (None: by range)."""
        group = {v.id for v in self.forward_group(name)}
        vertices = tuple(attrs.evolve(v, assignment=assignment) if v.id in group else v
                         for v in self.vertices)
        return PipelineGraph(vertices, self.edges)

    def sources(self) -> list[PipelineVertex]:
        """Vertices that read external input."""
        return [v for v in self.vertices if v.kind is OperatorKind.SOURCE]

    def topological_order(self) -> list[PipelineVertex]:
        """Vertices with every producer before its consumers (ties broken by id)."""
        indegree = {v.id: 0 for v in self.vertices}
        for e in self.edges:
            if e.partitioning is not Partitioning.LOOP:
                indegree[e.target] += 1
        ready = sorted(i for i, d in indegree.items() if d == 0)
        order: list[PipelineVertex] = []
        while ready:
            current = ready.pop(0)
            order.append(self.vertex(current))
            for e in self.outputs(current):
                if e.partitioning is Partitioning.LOOP:
                    continue
                indegree[e.target] -= 1
                if indegree[e.target] == 0:
                    ready.append(e.target)
                    ready.sort()
        if len(order) != len(self.vertices):
            msg = "the plan has a cycle outside an iteration"
            raise ValueError(msg)
        return order
