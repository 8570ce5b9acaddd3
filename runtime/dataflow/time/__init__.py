"""Time: windows and event time inside a task: processing-time window aggregates, counts and the
stream-table join operator (``windows``), timestamps and watermarks (``event_time``), keyed
event-time windows with late records (``event_windows``, ``window_assignment``), and the same rules
applied to whole column batches in Arrow (``event_columns``). It may import ``columns/`` and the
operator base of the top level (``operators``), never ``graph/`` or the task machinery.
"""
