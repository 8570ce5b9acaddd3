"""Dataflow: what runs inside a task on any host: the task machinery here (tasks, operators, channels,
barrier alignment, emitter, fusion, combiners, iterations), record batches as columns in ``columns/``,
windows and event time in ``time/``, the graph runtime in ``graph/`` (in that order: each may import
the ones before it and the operator base, ``operators``; the task machinery may import all three).
"""
