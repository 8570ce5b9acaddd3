"""Logical and physical plans: PipelineGraph, chaining, ExecutionGraph and cycles."""
