"""What a query over a graph the script's INSERTs change window by window sees of its window: the
vertices a MATCH starts from (GeaFlow's dynamic traversal) and GeaFlow's ``assp`` per window."""

from __future__ import annotations

import attrs

INCR_TRAVERSAL = "geaflow.dsl.graph.enable.incr.traversal"
INCR_THRESHOLD = "geaflow.dsl.incr.traversal.iteration.threshold"
INCR_WINDOW = "geaflow.dsl.graph.incr.traversal.window"


@attrs.define
class Window:
    """What a query sees of its window: the vertices each streamed graph's changes touched (the new
    vertices, both ends of the new edges), the window's number, and what its algorithms keep."""

    number: int
    changed: dict  # graph name -> set of vertex ids
    memory: dict  # CALL block name -> its values, kept from window to window
    calls: frozenset = frozenset()  # the CALL blocks whose rows the engine's programs stream in


# ---- MATCH per window -----------------------------------------------------------------------------

def match_starts(query, graph, window: Window | None, settings: dict):
    """The vertices a MATCH over a streamed graph starts from in this window, as GeaFlow's dynamic
    traversal chooses them; None: every vertex. A path of one edge or none starts from the
    vertices the window's changes touched; a longer one from every vertex, or with
    ``geaflow.dsl.graph.enable.incr.traversal`` (after the first window, up to
    ``geaflow.dsl.incr.traversal.iteration.threshold`` steps) from the touched vertices and those
    that reach them backwards along the path's edges but its first."""
    if window is None or (query.graph or "").lower() not in window.changed:
        return None
    if len(query.matches) != 1 or query.subqueries or query.lets or len(query.matches[0].items) != 1 \
            or len(query.matches[0].items[0][0]) != 1:
        return None
    path = query.matches[0].patterns[0]
    edges = path[1::2]
    if any(e.hops is not None for e in edges):
        return None
    changed = window.changed[(query.graph or "").lower()]
    if not changed:
        return set()
    iterations = len(edges) + 1
    incremental = str(settings.get(INCR_TRAVERSAL, "false")).lower() == "true" \
        and 2 < iterations <= int(settings.get(INCR_THRESHOLD, 4)) \
        and (int(settings.get(INCR_WINDOW, -1)) == -1 or window.number > int(settings.get(INCR_WINDOW)))
    if incremental and window.number > 1:
        return _evolved(graph, changed, edges)
    return set(changed) if iterations <= 2 else None


def _evolved(graph, changed: set, edges: list) -> set:
    """``changed`` and the vertices reached from it backwards along the path's edges, last but
    one first (the touched vertices hold both ends of a new edge, so the last edge is covered)."""
    steps = [{"out": "in", "in": "out"}.get(e.direction, "both") for e in edges][:-1][::-1]
    found, frontier = set(changed), set(changed)
    for step in steps:
        reached = set()
        for v in frontier:
            if step in ("out", "both"):
                reached.update(e.dst for e in graph.out_edges.get(v, ()))
            if step in ("in", "both"):
                reached.update(e.src for e in graph.in_edges.get(v, ()))
        found |= reached
        frontier = reached
    return found


# ---- assp ------------------------------------------------------------------------------------------

def assp(graph, active: set | None, paths: dict) -> list[tuple]:
    """GeaFlow's ``assp``: each vertex's shortest path (fewest edges, along edges) from every vertex
    that reaches it, as ``{"vertex":v,"paths":{source:[source,...,v]}}``, for the ``active``
    vertices (a window's touched ones; None: every vertex) and those their paths reached. ``paths``
    holds each vertex's paths from the windows before and is updated."""
    active = set(graph.vertices) if active is None else active & set(graph.vertices)
    seen = set(active)
    inbox: dict = {}
    for v in active:
        paths.setdefault(v, {})
        for target in _targets(graph, v):
            inbox.setdefault(target, []).append([v])
            inbox[target].extend(list(p) for p in paths[v].values())
    while inbox:
        messages, inbox = inbox, {}
        for v, offered in messages.items():
            seen.add(v)
            known = paths.setdefault(v, {})
            best: dict = {}
            for path in offered:
                if path[0] != v and (path[0] not in best or len(path) < len(best[path[0]])):
                    best[path[0]] = path
            for source, path in best.items():
                if source not in known or len(path) + 1 < len(known[source]):
                    known[source] = [*path, v]
                    for target in _targets(graph, v):
                        inbox.setdefault(target, []).append(known[source])
    return [(_assp_text(v, paths.get(v, {})),) for v in sorted(seen, key=str)]


def _targets(graph, v) -> list:
    return [e.dst for e in graph.out_edges.get(v, ())]


def _assp_text(vertex, paths: dict) -> str:
    """As fastjson writes GeaFlow's row: ids bare, the sources in a Java HashMap's order."""
    capacity = 16
    while len(paths) > capacity * 3 // 4:
        capacity *= 2
    inner = ",".join(f"{_json(s)}:[{','.join(_json(x) for x in p)}]" for s, p in sorted(
        paths.items(), key=lambda kv: (_bucket(kv[0], capacity), str(kv[0]))))
    return f'{{"vertex":{_json(vertex)},"paths":{{{inner}}}}}'


def _bucket(key, capacity: int) -> int:
    """The bucket of a Java HashMap of ``capacity`` a Long key falls in (others: 0)."""
    if not isinstance(key, int):
        return 0
    h = (key ^ ((key & 0xFFFFFFFFFFFFFFFF) >> 32)) & 0xFFFFFFFF
    return (h ^ (h >> 16)) & (capacity - 1)


def _json(value) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)
