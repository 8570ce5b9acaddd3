"""A warning at plan time when a size window's meaning depends on its source's parallelism."""

from __future__ import annotations

import sys
import warnings

from gyreflow.api.language.windows import SizeTumblingWindow
from gyreflow.plan.graph import PipelineGraph
from gyreflow.plan.operators import SourceSpec
from gyreflow.plan.words import plural

# Warnings shown so far, by Python's rules for a registry: once per source line and message
# (``warnings.simplefilter("always")`` shows every one, ``"error"`` makes it an exception).
_REGISTRY: dict = {}


class SourceParallelismWarning(UserWarning):
    """A source cut into ``SizeTumblingWindow(n)`` runs with parallelism above 1: each source task
    counts its own ``n`` records per window, so the windows (and any output that depends on them)
    change with the parallelism. ``ctx.source(..., parallelism=1)`` pins the source.

    Silence it for a whole program with
    ``warnings.filterwarnings("ignore", category=SourceParallelismWarning)``.
    """


def call_site(depth: int = 2) -> tuple[str, int]:
    """The file and line of the caller's caller: where a pipeline task opened a source."""
    frame = sys._getframe(depth)  # the cheap way to the caller's line
    return frame.f_code.co_filename, frame.f_lineno


def warn_size_windows_per_task(graph: PipelineGraph, origins: dict[int, tuple[str, int]]) -> None:
    """Warn once per source of ``graph`` whose ``SizeTumblingWindow`` is counted per source task
    (its parallelism is above 1); ``origins`` maps a source's vertex id to the file and line that
    opened it, which the warning names."""
    for vertex in graph.vertices:
        spec = vertex.spec
        if not isinstance(spec, SourceSpec) or not isinstance(spec.window, SizeTumblingWindow):
            continue
        if vertex.parallelism <= 1:
            continue
        size, parallelism = spec.window.size, vertex.parallelism
        msg = (f"source {vertex.name!r} runs with parallelism {parallelism} and "
               f"SizeTumblingWindow({size}): each of its {parallelism} source tasks cuts its own "
               f"share of the input ({spec.source.describe()}) into windows of "
               f"{plural(size, 'record')}, so a window holds up to {parallelism * size} records and "
               f"the windows change with the parallelism; for windows of "
               f"{plural(size, 'consecutive record')} pin the source with "
               f"ctx.source(..., parallelism=1)")
        filename, lineno = origins.get(vertex.id, ("<pipeline>", 0))
        warnings.warn_explicit(msg, SourceParallelismWarning, filename, lineno,
                               module="gyreflow.sources", registry=_REGISTRY)
