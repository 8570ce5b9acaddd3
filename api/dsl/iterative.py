"""GeaFlow's vertex-centric algorithms as its expected files show them, emulated round by round:
``cc``, ``lpa``, ``incremental_kcore``, ``IncMST`` and ``cluster_coefficient`` with a smallest degree.

Each round, a vertex reads the messages of the round before, changes its value and sends messages,
as GeaFlow's iterations do. Where GeaFlow's result depends on how it stores things, the same rule is
followed here: an in-edge stored at a vertex names that vertex as its source (so a message "to the
in-edge's source" comes back to the sender) and labels are met in the order of Java's ``HashMap``.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from gyreflow.api.dsl.queries import QueryError


def _id_order(value):
    return (str(type(value)), value)


def _java_string_hash(text: str) -> int:
    """``String.hashCode``, as an unsigned 32-bit number."""
    result = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        result = (31 * result + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return result


def _hash_map_order(keys: list[str]) -> list[str]:
    """The order in which a Java ``HashMap`` that was given ``keys`` (in this order) iterates them:
    by bucket of its final capacity (16, doubled while more than 3/4 full), then as inserted."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)
    return [k for _, k in sorted(enumerate(keys), key=lambda pair: (bucket(pair[1]), pair[0]))]


def _both(graph, v) -> list:
    """The other end of every edge of ``v``, out-edges first (a vertex per edge, as sent)."""
    return [e.dst for e in graph.out_edges.get(v, ())] + [e.src for e in graph.in_edges.get(v, ())]


def connected_components(graph, iterations=20, *_):
    """GeaFlow's ``cc``: every vertex starts with its id as text and sends its value against its
    edges (to the sources of its in-edges); a vertex takes the smallest text it receives ('10' is
    smaller than '9') and sends it on, for ``iterations`` rounds."""
    value = {v: str(v) for v in graph.vertices}
    inbox: dict = defaultdict(list)
    for v in graph.vertices:
        for e in graph.in_edges.get(v, ()):
            inbox[e.src].append(value[v])
    for _ in range(2, int(iterations)):
        outbox: dict = defaultdict(list)
        for v, messages in inbox.items():
            if v in value and min(messages) < value[v]:
                value[v] = min(messages)
                for e in graph.in_edges.get(v, ()):
                    outbox[e.src].append(value[v])
        if not outbox:
            break
        inbox = outbox
    return list(value.items())


def label_propagation(graph, iterations=1000, *_):
    """GeaFlow's ``lpa``: every vertex starts with its id as text and sends its label along every
    edge, both ways; a vertex that receives labels counts them and, meeting them in a Java
    ``HashMap``'s order, moves to a label smaller than the one it holds whose count is at least
    that of the last one it moved to; it sends its label again only when it changed."""
    label = {v: str(v) for v in graph.vertices}
    inbox: dict = defaultdict(list)
    for v in graph.vertices:
        for w in _both(graph, v):
            inbox[w].append(label[v])
    for _ in range(2, int(iterations)):
        outbox: dict = defaultdict(list)
        for v, messages in inbox.items():
            if v not in label:
                continue
            counts = Counter(messages)
            best, most = label[v], 0
            for candidate in _hash_map_order(list(counts)):
                if counts[candidate] >= most and candidate < best:
                    best, most = candidate, counts[candidate]
            if best != label[v]:
                label[v] = best
                for w in _both(graph, v):
                    outbox[w].append(best)
        if not outbox:
            break
        inbox = outbox
    return list(label.items())


def incremental_kcore(graph, k=3, iterations=100, *_):
    """GeaFlow's ``incremental_kcore(k, iterations, threshold)`` on a graph read once: rows
    ``(vertex, degree, degree, status)``. Each round an active vertex counts the messages sent to
    it by active vertices (one per out-edge to its target, one per in-edge to the in-edge's
    source, that is to the vertex itself) and leaves the core below ``k``; a vertex that left is
    REMOVED, one that stayed INIT. ``degree`` counts its edges, in and out."""
    k, iterations = int(k), int(iterations)
    degree = {v: len(graph.out_edges.get(v, ())) + len(graph.in_edges.get(v, ())) for v in graph.vertices}
    core, status, active = dict(degree), dict.fromkeys(graph.vertices, "INIT"), set(graph.vertices)

    def sent(senders) -> Counter:
        counts: Counter = Counter()
        for u in senders:
            for e in graph.out_edges.get(u, ()):
                counts[e.dst] += 1
            counts[u] += len(graph.in_edges.get(u, ()))
        return counts
    counts = sent(active)
    for _ in range(2, iterations + 1):
        staying = set()
        for v in active:
            count = counts.get(v, 0)
            new = 0 if count < k else count
            if new != core[v] and count < k:
                status[v] = "REMOVED"
            core[v] = new
            if count >= k:
                staying.add(v)
        if staying == active:
            break
        active, counts = staying, sent(staying)
    return [(v, degree[v], degree[v], status[v]) for v in graph.vertices]


def cluster_coefficient_of(graph, *args):
    """GeaFlow's ``cluster_coefficient(smallest degree)``: for each vertex, its distinct neighbours
    (either direction), the links among them counted from the neighbours of at least the smallest
    degree, over d * (d - 1); 0.0 below the smallest degree (default 2). With a label first
    (``cluster_coefficient('person', 1)``) GeaFlow leaves out of a neighbourhood only the vertices of
    other labels that the same task met before, so its result depends on how its tasks share the
    vertices: refused."""
    if args and isinstance(args[0], str):
        raise QueryError("cluster_coefficient with a label is not supported: GeaFlow's result depends "
                         "on which of its tasks holds each vertex")
    if len(args) > 1 or (args and not isinstance(args[0], int)):
        raise QueryError("cluster_coefficient takes one argument, the smallest degree")
    smallest = int(args[0]) if args else 2
    near = {v: set(_both(graph, v)) for v in graph.vertices}
    rows = []
    for v, mine in near.items():
        d = len(mine)
        links = sum(len(near[w] & mine) for w in mine if w in near and len(near[w]) >= smallest)
        rows.append((v, links / (d * (d - 1)) if d >= smallest and d > 1 else 0.0))
    return rows


def incremental_mst(graph, iterations=50, *_):
    """GeaFlow's ``IncMST(iterations, threshold, name)`` as its expected files show it: in the first
    round each vertex proposes its first 50 out-edges to their targets, in the second a target in
    another component (any other vertex: no component has grown yet) accepts, and in the third the
    proposer keeps the accepted edge under its own id at both ends (GeaFlow records the acceptance's
    source, itself, as the far end): rows ``(vertex, vertex, weight)``, one per distinct weight."""
    if int(iterations) < 3:  # the acceptances are read in the third round
        return []
    rows = []
    for v in graph.vertices:
        weights: dict = {}
        for e in graph.out_edges.get(v, ())[:50]:
            if e.dst != v:
                weights[next((x for key, x in e.items() if key not in (e.src_col, e.dst_col)), None)] = True
        rows.extend((v, v, w) for w in weights)
    return rows


ITERATIVE = {"cc": connected_components, "lpa": label_propagation, "incremental_kcore": incremental_kcore,
             "incmst": incremental_mst}
