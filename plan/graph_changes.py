"""Change records of dynamic graphs: the removals a vertex or edge stream may carry besides additions.

A graph view's streams add vertices and edges; these records take them away. They are plain values
so that both the language (``gyreflow.api.graph``) and the running graph operators know them, and
they pickle between processes like any record.
"""

from __future__ import annotations

from typing import Any

import attrs

from gyreflow.state.records import frozen

# The side of an edge half that removes instead of adding (see ``GraphView``'s edge halves: 1 an
# out-edge, 3 an in-edge; the removal of those is -1 and -3), and the half that removes a vertex.
REMOVE_OUT, REMOVE_IN, REMOVE_VERTEX = -1, -3, 0


@frozen
class RemoveEdge:
    """Removes every edge ``src -> dst`` the graph has (undirected: every edge between them).

    Within a window the changes of one stream apply in the order they arrive, so a ``RemoveEdge``
    followed by the edge again replaces its value. Removing an edge the graph does not have does
    nothing.
    """

    src: Any
    dst: Any


@frozen
class RemoveVertex:
    """Removes a vertex and its value; carried by the vertex stream or the edge stream.

    A vertex removal applies after every other change of its window. Without ``detach`` the vertex
    must have no edges left by then (remove them with ``RemoveEdge`` in the same window or before):
    the window fails with the vertex and the edges it still has, as a graph database refuses to
    delete a node that has relationships. ``detach=True`` removes its edges with it, in both
    directions and at both ends, as Cypher's ``DETACH DELETE`` does. Removing a vertex the graph
    does not have does nothing.
    """

    id: Any
    detach: bool = attrs.field(default=False, kw_only=True)


class VertexStillConnectedError(ValueError):
    """A ``RemoveVertex`` named a vertex that still has edges at the end of its window."""
