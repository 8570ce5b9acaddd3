"""Dataflow: what runs inside a task on any host (tasks, operators, channels, barrier alignment)."""
