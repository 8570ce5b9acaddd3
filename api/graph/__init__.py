"""The graph library: graph views and vertex-centric programs, the algorithms, Graphalytics files.

``gyreflow.api.graph`` is the documented import path of the graph views (``GraphView``,
``VertexCentricCompute``, ``ArrayVertexCompute``, ...); the algorithms are ``gyreflow.api.graph_algorithms``.
"""

from gyreflow.api.graph.arrays import ArrayInbox, ArrayPartition, ArrayVertexCompute, ids_equal
from gyreflow.api.graph.query import (
    Query,
    QuerySyntaxError,
    UnsupportedQueryError,
    parse_query,
    query_graph,
)
from gyreflow.api.graph.repair import RepairingCompute
from gyreflow.api.graph.views import (
    Aggregator,
    Edge,
    EdgeBlock,
    GraphView,
    Vertex,
    VertexBlock,
    VertexCentricCompute,
    VertexContext,
    identity_default,
)
from gyreflow.plan.graph_changes import RemoveEdge, RemoveVertex, VertexStillConnectedError
from gyreflow.plan.operators import EVERY_VERTEX

__all__ = [
    "Aggregator",
    "ArrayInbox",
    "ArrayPartition",
    "ArrayVertexCompute",
    "EVERY_VERTEX",
    "Edge",
    "EdgeBlock",
    "GraphView",
    "Query",
    "QuerySyntaxError",
    "RemoveEdge",
    "RemoveVertex",
    "RepairingCompute",
    "UnsupportedQueryError",
    "Vertex",
    "VertexBlock",
    "VertexCentricCompute",
    "VertexContext",
    "VertexStillConnectedError",
    "identity_default",
    "parse_query",
    "query_graph",
    "ids_equal",
]
