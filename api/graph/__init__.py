"""The graph library: graph views and vertex-centric programs, the algorithms, Graphalytics files.

``gyreflow.api.graph`` is the documented import path of the graph views (``GraphView``,
``VertexCentricCompute``, ``ArrayVertexCompute``, ...); the algorithms are ``gyreflow.api.graph_algorithms``.
"""

from gyreflow.api.graph.arrays import ArrayInbox, ArrayPartition, ArrayVertexCompute, ids_equal
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

__all__ = [
    "Aggregator",
    "ArrayInbox",
    "ArrayPartition",
    "ArrayVertexCompute",
    "Edge",
    "EdgeBlock",
    "GraphView",
    "Vertex",
    "VertexBlock",
    "VertexCentricCompute",
    "VertexContext",
    "identity_default",
    "ids_equal",
]
