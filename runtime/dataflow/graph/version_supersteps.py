"""The supersteps of a graph operator that reads past versions: each version a window's requests
name runs with a context and values of its own over its ``VersionView``, its messages keyed
``(version, vertex)``, all in the window's supersteps."""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.plan.operators import GraphMode
from gyreflow.runtime.dataflow.graph.context import EMPTY, Slots, context_class
from gyreflow.runtime.errors import DataError, RecordError
from gyreflow.state.keys.keygroups import key_group_of

_MISSING = object()


class Version:
    """One version's share of a window's traversal: its view, context and vertex values."""

    def __init__(self, operator, version: int) -> None:
        self.version = version
        self.view = operator.view_of(version)
        self.context = context_class(operator.combine)(operator.spec.directed, operator.aggregators,
                                                       Slots())
        self.values: dict = {}


class VersionSupersteps:
    """The per-version supersteps of ``VersionedGraphOperator`` (a part of it: the state it reads
    and writes is the operator's)."""

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
                state = self.versions[version] = Version(self, version)
            self._run(state, box, iteration, combined, outgoing, aggregates)
        work = self._send(iteration + 1, outgoing)
        if self.program.always_active:
            work += sum(len(state.values) for state in self.versions.values())
        return work, tuple(aggregates.items())

    def _run(self, state: Version, box: dict, iteration: int, combined: dict, outgoing: dict,
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
