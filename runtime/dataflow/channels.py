"""Channel messages: batches of records (plain lists), window barriers and the end of input."""

from __future__ import annotations

from gyreflow.plan.graph import Partitioning


class Barrier:
    """Marks the end of window ``window`` on one channel; ``checkpoint`` says whether the job driver
    asked for a snapshot of it (asynchronous barrier snapshots: the request travels with the data);
    ``last``: the sender's input ended with this window (nothing follows but the end of input), so
    that event time can close every window when the window is finished."""

    __slots__ = ("checkpoint", "last", "window")

    def __init__(self, window: int, checkpoint: bool = True, last: bool = False) -> None:
        self.window = window
        self.checkpoint = checkpoint
        self.last = last

    def __repr__(self) -> str:
        return f"Barrier({self.window})" if self.checkpoint else f"Barrier({self.window}, checkpoint=False)"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Barrier) and other.window == self.window
                and other.checkpoint == self.checkpoint)

    def __hash__(self) -> int:
        return hash(("barrier", self.window, self.checkpoint))


class EndOfInput:
    """Marks that no more messages follow on a channel."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END_OF_INPUT"

    def __reduce__(self):
        return "END_OF_INPUT"


END_OF_INPUT = EndOfInput()


def link_channels(graph) -> tuple[dict[int, list[int]], list[tuple[object, object, object, int]]]:
    """Every channel of an execution graph: each task's input ordinals by channel number, and the
    links ``(edge, source task, target task, channel number at the target)``. A forward edge links
    task ``i`` to task ``i``; every other edge links every source task to every target task."""
    tasks = graph.tasks()
    by_vertex: dict[int, list] = {}
    for t in tasks:
        by_vertex.setdefault(t.vertex_id, []).append(t)
    inputs: dict[int, list[int]] = {t.id: [] for t in tasks}
    links = []
    for edge in graph.edges:
        for s in by_vertex[edge.source]:
            targets = by_vertex[edge.target]
            if edge.partitioning is Partitioning.FORWARD:
                targets = [targets[s.index]]
            for t in targets:
                inputs[t.id].append(edge.ordinal)
                links.append((edge, s, t, len(inputs[t.id]) - 1))
    return inputs, links
