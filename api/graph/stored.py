"""A job's graph as its last completed window (or a retained one) left it in the state store.

Both graph operators keep their graph in one state table: the per-vertex operator as
``NAME:graph`` (a vertex -> ``[value, out, out values, in, in values]``), the array operator as
``NAME:chunks`` (one chunk of arrays per key group). ``read_job_graph`` reads the table at a
committed version and gives back plain vertex and edge lists, which is what ``gyreflow query``
runs a query on.
"""

from __future__ import annotations

import attrs

from gyreflow.runtime.dataflow.graph.changelog import apply_chunk_change, chunk_size
from gyreflow.runtime.dataflow.graph.chunks import IN, OUT
from gyreflow.state.keys.logged import LoggedTable

_TABLE_SUFFIXES = (":graph", ":chunks")


class StoredGraphError(Exception):
    """A job, window or graph the store does not have; the message names what there is.
    ``no_job``: the store has no state for the job at all."""

    def __init__(self, message: str, no_job: bool = False) -> None:
        super().__init__(message)
        self.no_job = no_job


@attrs.frozen
class StoredGraph:
    """A version of a job's graph: ``vertices`` as ``(id, value)``, ``edges`` as
    ``(src, dst, value)`` (an undirected edge once)."""

    job: str
    graph: str
    window: int
    directed: bool
    vertices: list
    edges: list


def graph_tables(store, job: str) -> list[str]:
    """The graph operators of ``job`` with stored state (their names, without the table suffix)."""
    return sorted({table[: -len(suffix)] for table in store.tables(job)
                   for suffix in _TABLE_SUFFIXES if table.endswith(suffix)})


def read_job_graph(store, job: str, max_parallelism: int, *, window: int | None = None,
                   graph: str | None = None) -> StoredGraph:
    """``job``'s graph as of ``window`` (default: the last completed one; it must be retained)."""
    meta = store.read_meta(job)
    if meta is None:
        jobs = store.jobs()
        named = ", ".join(jobs) if jobs else "none"
        msg = f"no stored state for job {job!r} in {store.location()} (jobs with state: {named})"
        raise StoredGraphError(msg, no_job=True)
    if window is None:
        window = meta.last_completed
    elif window not in meta.retained:
        msg = (f"job {job!r} keeps windows {', '.join(map(str, meta.retained))}, not {window} "
               "(state.retained_snapshots says how many)")
        raise StoredGraphError(msg)
    names = graph_tables(store, job)
    if graph is None:
        if len(names) != 1:
            found = ", ".join(names) if names else "none"
            msg = (f"job {job!r} has {len(names)} graphs ({found}): name one with --graph"
                   if names else f"job {job!r} has no graph in its state")
            raise StoredGraphError(msg)
        graph = names[0]
    elif graph not in names:
        msg = f"job {job!r} has no graph {graph!r} (its graphs: {', '.join(names) or 'none'})"
        raise StoredGraphError(msg)
    tables = set(store.tables(job))
    data: dict = {}
    groups = range(max_parallelism)
    if f"{graph}:graph" in tables:
        store.read_into(job, f"{graph}:graph", groups, window, data)
        directed, vertices, edges = _from_entries(data)
    else:
        store.read_into(job, f"{graph}:chunks", groups, window, data)
        if f"{graph}:chunks:log" in tables:
            store.read_into(job, f"{graph}:chunks:log", groups, window, data)
        chunks = LoggedTable(f"{graph}:chunks", max_parallelism, apply_chunk_change, chunk_size)
        chunks.data = data
        chunks.after_restore(relaid=False)  # each key group's base and its logged changes
        directed, vertices, edges = _from_chunks(chunks.data.values())
    return StoredGraph(job, graph, window, directed, vertices, edges)


def _first_end(src, dst) -> bool:
    """Whether the half at ``src`` stands for an undirected edge ``src - dst`` (the other end
    keeps the same edge): the smaller id's half does, and a self-loop's only half."""
    if src == dst:
        return True
    try:
        return src < dst
    except TypeError:  # ids of different types: any fixed order will do
        return (type(src).__name__, repr(src)) < (type(dst).__name__, repr(dst))


def _from_entries(entries: dict) -> tuple[bool, list, list]:
    directed = any(entry[3] is not None for entry in entries.values())
    vertices, edges = [], []
    for vid, entry in entries.items():
        vertices.append((vid, entry[0]))
        values = entry[2]
        for i, other in enumerate(entry[1]):
            if directed or _first_end(vid, other):
                edges.append((vid, other, None if values is None else values[i]))
    return directed, vertices, edges


def _from_chunks(chunks) -> tuple[bool, list, list]:
    chunks = list(chunks)
    directed = any((chunk[5] == IN).any() for chunk in chunks)
    vertices, edges = [], []
    for ids, given, vids, others, values, sides in chunks:
        vertices.extend(zip(ids.tolist(), given.tolist(), strict=True))
        values = [None] * len(vids) if values is None else values.tolist()
        for vid, other, value, side in zip(vids.tolist(), others.tolist(), values, sides.tolist(),
                                           strict=True):
            if side == OUT and (directed or _first_end(vid, other)):
                edges.append((vid, other, value))
    return directed, vertices, edges
