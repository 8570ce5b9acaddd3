"""Key-group load and rebalancing (Chi's skew handling): which task should own each key group.

Every task's emitter counts the records it sends to each key group of a keyed operator and reports
the counts with the window (``Done.loads``). The driver keeps them per operator, decayed window by
window so that the recent load weighs most (a fixed amount of numbers per operator: nothing grows
with the windows). A rebalance moves key groups from the busiest task to the least loaded one while
that evens them out (a key group with no load stays where it is), and is worth a restart only when
it lowers the busiest task's load by a tenth or more. The new assignment reaches the tasks like a rescale: at
a window boundary, restored from the last completed snapshot (runtime/control.py).
"""

from __future__ import annotations

from gyreflow.plan.graph import PipelineGraph
from gyreflow.plan.operators import OperatorKind
from gyreflow.state.keys.keygroups import owner_table

DECAY = 0.8  # the weight of the load measured before each window, against the window's own
WARM_UP = 3  # windows measured before an automatic rebalance is considered
GAIN = 0.9  # a new assignment must bring the busiest task's load to this share of today's or below


def balanced(loads: list[float], owners: list[int], parallelism: int) -> list[int]:
    """An assignment of key groups to ``parallelism`` tasks that evens out ``loads``, moving as few
    groups as it can from ``owners`` (Chi moves hot key groups, it does not deal them all again):
    while a group of the busiest task weighs less than its lead over the least loaded task, the
    one that evens the pair best moves there. Each move lowers the sum of the squared task loads,
    so it ends; few groups move, so a task's key groups stay in few runs (storage splits by run).

    >>> balanced([5, 1, 1, 1], [0, 0, 1, 1], 2)
    [0, 1, 1, 1]
    """
    assignment = list(owners)
    totals = task_loads(loads, assignment, parallelism)
    owned: list[list[int]] = [[] for _ in range(parallelism)]
    for group, load in enumerate(loads):
        if load > 0:
            owned[assignment[group]].append(group)
    for _ in range(len(loads) * parallelism):
        busiest = max(range(parallelism), key=totals.__getitem__)
        lightest = min(range(parallelism), key=totals.__getitem__)
        lead = totals[busiest] - totals[lightest]
        movable = [g for g in owned[busiest] if loads[g] < lead]
        if not movable:
            break
        group = min(movable, key=lambda g: (abs(lead / 2 - loads[g]), g))
        owned[busiest].remove(group)
        owned[lightest].append(group)
        assignment[group] = lightest
        totals[busiest] -= loads[group]
        totals[lightest] += loads[group]
    return assignment


def task_loads(loads: list[float], owners: list[int], parallelism: int) -> list[float]:
    """The load of each task when key groups belong to ``owners``."""
    totals = [0.0] * parallelism
    for owner, load in zip(owners, loads, strict=True):
        totals[owner] += load
    return totals


def rebalanceable(graph: PipelineGraph, name: str) -> str | None:
    """Why the key groups of operator ``name`` cannot move between its tasks, or None if they can."""
    group = graph.forward_group(name)
    vertex = next(v for v in group if v.name == name)
    if any(v.kind is OperatorKind.SOURCE for v in group):
        return f"{name!r} runs in one chain with a source, which reads its own split of the input"
    if any(v.kind is OperatorKind.ITERATION for v in group):
        return f"{name!r} is a graph computation, whose vertices stay partitioned by range"
    if not any(v.spec.keyed for v in group):
        return f"{name!r} keeps no keyed state: its records are not routed by key group"
    if vertex.parallelism < 2:
        return f"{name!r} runs with one task: there is nothing to balance (rescale it first)"
    return None


class LoadTracker:
    """The decayed records per key group of every keyed operator whose key groups may move."""

    def __init__(self, graph: PipelineGraph, max_parallelism: int, skew: float = 1.3,
                 min_records: int = 1000) -> None:
        self.graph = graph
        self.max_parallelism = max_parallelism
        self.skew = skew
        self.min_records = min_records
        self.vertices = {v.name: v for v in graph.vertices
                         if v.spec.keyed and rebalanceable(graph, v.name) is None}
        self.owners = {name: owner_table(v.parallelism, max_parallelism, v.assignment)
                       for name, v in self.vertices.items()}
        self.loads = {name: [0.0] * max_parallelism for name in self.vertices}
        self.windows = dict.fromkeys(self.vertices, 0)
        self.skewed: set[str] = set()  # operators whose last measured window was skewed

    def observe(self, dones) -> None:
        """Take the loads the tasks reported with one finished window of one cycle."""
        window: dict[str, list[int]] = {}
        for done in dones:
            for target, counted in getattr(done, "loads", ()):
                if target not in self.vertices:
                    continue
                counts = window.setdefault(target, [0] * self.max_parallelism)
                for group, n in counted:
                    counts[group] += n
        for name, counts in window.items():
            self.loads[name] = [load * DECAY + n for load, n in zip(self.loads[name], counts, strict=True)]
            self.windows[name] += 1
            tasks = task_loads(counts, self.owners[name], self.vertices[name].parallelism)
            total = sum(tasks)
            if total >= self.min_records and max(tasks) > self.skew * _median(tasks):
                self.skewed.add(name)
            else:
                self.skewed.discard(name)

    def operator_of(self, name: str) -> str | None:
        """The tracked operator in ``name``'s forward group (they share one assignment)."""
        for vertex in self.graph.forward_group(name):
            if vertex.name in self.vertices:
                return vertex.name
        return None

    def propose(self, name: str) -> tuple[tuple[int, ...], list[float], list[float]] | None:
        """A better assignment for operator ``name`` with the busiest task's load before and after,
        or None when none lowers it enough (or nothing was measured yet)."""
        loads, owners = self.loads[name], self.owners[name]
        parallelism = self.vertices[name].parallelism
        if not any(loads):
            return None
        before = task_loads(loads, owners, parallelism)
        assignment = balanced(loads, owners, parallelism)
        after = task_loads(loads, assignment, parallelism)
        if max(after) > GAIN * max(before):
            return None
        return tuple(assignment), before, after

    def due(self) -> dict[str, tuple[int, ...]]:
        """The assignments an automatic rebalance makes now: skewed operators measured long enough
        for which a better assignment exists."""
        found = {}
        for name in sorted(self.skewed):
            if self.windows[name] < WARM_UP:
                continue
            proposal = self.propose(name)
            if proposal is not None:
                found[name] = proposal[0]
        return found


def describe(name: str, before: list[float], after: list[float]) -> str:
    """One line on a rebalance of ``name``: the tasks' shares of the load before and after."""
    total = sum(before) or 1.0

    def shares(loads: list[float]) -> str:
        return "/".join(f"{round(100 * load / total)}%" for load in loads)

    return f"{name}: records per task {shares(before)} -> {shares(after)}"


def _median(values: list) -> float:
    """``statistics.median``, imported by the first keyed operator with a load to weigh (its
    import, with fractions and decimal, is a few milliseconds of every run's start-up)."""
    from statistics import median

    return median(values)
