"""What users touch: environments, pipelines, windows, streams, sources, sinks and listeners.

The names are imported when first used (PEP 562), so that importing one part of the
package (the command line, say) does not import all of it.
"""

# No ``from __future__ import annotations`` and no plain imports: every name bound here would be one
# more name of the package (``dir(gyreflow.api)``, ``from gyreflow.api import *``).
import gc as _gc
import sys as _sys
import typing as _typing
from importlib import import_module as _import_module

if _typing.TYPE_CHECKING:
    from gyreflow.api.config.loading import (
        Config,
        ConfigError,
    )
    from gyreflow.api.connectors.directory_source import (
        DirectorySource,
    )
    from gyreflow.api.connectors.file_sink import (
        CsvSink,
        FileSink,
        ParquetSink,
    )
    from gyreflow.api.connectors.file_source import (
        FileSource,
    )
    from gyreflow.api.connectors.postgres import PostgresSink
    from gyreflow.api.connectors.postgres_source import PostgresSource
    from gyreflow.api.connectors.sinks import (
        PrintSink,
        Sink,
        SinkWriter,
    )
    from gyreflow.api.connectors.sources import (
        ArrowSource,
        CollectionSource,
        GeneratorSource,
        Source,
        SourceReader,
    )
    from gyreflow.api.language.environment import (
        Environment,
        LocalEnvironment,
    )
    from gyreflow.api.language.functions import (
        AggregateFunction,
        ProcessFunction,
    )
    from gyreflow.api.language.pipeline import (
        Pipeline,
        PipelineResult,
        PipelineTaskContext,
    )
    from gyreflow.api.language.stream import (
        KeyedStream,
        Stream,
    )
    from gyreflow.api.language.windowed import (
        EventTimeStream,
        WindowedStream,
    )
    from gyreflow.api.language.windows import (
        AllWindow,
        Session,
        SizeTumblingWindow,
        Sliding,
        TimeTumblingWindow,
        Tumbling,
        Window,
    )
    from gyreflow.api.service.listeners import (
        CheckpointMetrics,
        JobListener,
        JsonLinesListener,
        TaskResult,
        WindowMetrics,
    )
    from gyreflow.runtime.dataflow.columns.expressions import (
        col,
    )
    from gyreflow.runtime.dataflow.time.event_time import (
        EventWindow,
        LateRecord,
        WindowResult,
    )
    from gyreflow.runtime.dataflow.time.windows import (
        WindowContext,
    )
    from gyreflow.runtime.errors import (
        UserFunctionError,
    )

_EXPORTS: dict[str, str] = {
    "AggregateFunction": "gyreflow.api.language.functions",
    "AllWindow": "gyreflow.api.language.windows",
    "ArrowSource": "gyreflow.api.connectors.sources",
    "col": "gyreflow.runtime.dataflow.columns.expressions",
    "CheckpointMetrics": "gyreflow.api.service.listeners",
    "CollectionSource": "gyreflow.api.connectors.sources",
    "Config": "gyreflow.api.config.loading",
    "ConfigError": "gyreflow.api.config.loading",
    "CsvSink": "gyreflow.api.connectors.file_sink",
    "DirectorySource": "gyreflow.api.connectors.directory_source",
    "Environment": "gyreflow.api.language.environment",
    "EventTimeStream": "gyreflow.api.language.windowed",
    "EventWindow": "gyreflow.runtime.dataflow.time.event_time",
    "FileSink": "gyreflow.api.connectors.file_sink",
    "FileSource": "gyreflow.api.connectors.file_source",
    "GeneratorSource": "gyreflow.api.connectors.sources",
    "JobListener": "gyreflow.api.service.listeners",
    "JsonLinesListener": "gyreflow.api.service.listeners",
    "KeyedStream": "gyreflow.api.language.stream",
    "LateRecord": "gyreflow.runtime.dataflow.time.event_time",
    "LocalEnvironment": "gyreflow.api.language.environment",
    "ParquetSink": "gyreflow.api.connectors.file_sink",
    "Pipeline": "gyreflow.api.language.pipeline",
    "PipelineResult": "gyreflow.api.language.pipeline",
    "PipelineTaskContext": "gyreflow.api.language.pipeline",
    "PostgresSink": "gyreflow.api.connectors.postgres",
    "PostgresSource": "gyreflow.api.connectors.postgres_source",
    "PrintSink": "gyreflow.api.connectors.sinks",
    "ProcessFunction": "gyreflow.api.language.functions",
    "Session": "gyreflow.api.language.windows",
    "Sink": "gyreflow.api.connectors.sinks",
    "SinkWriter": "gyreflow.api.connectors.sinks",
    "SizeTumblingWindow": "gyreflow.api.language.windows",
    "Sliding": "gyreflow.api.language.windows",
    "Source": "gyreflow.api.connectors.sources",
    "SourceReader": "gyreflow.api.connectors.sources",
    "Stream": "gyreflow.api.language.stream",
    "TaskResult": "gyreflow.api.service.listeners",
    "TimeTumblingWindow": "gyreflow.api.language.windows",
    "Tumbling": "gyreflow.api.language.windows",
    "UserFunctionError": "gyreflow.runtime.errors",
    "Window": "gyreflow.api.language.windows",
    "WindowContext": "gyreflow.runtime.dataflow.time.windows",
    "WindowMetrics": "gyreflow.api.service.listeners",
    "WindowResult": "gyreflow.runtime.dataflow.time.event_time",
    "WindowedStream": "gyreflow.api.language.windowed",
}

__all__ = [
    "AggregateFunction",
    "AllWindow",
    "ArrowSource",
    "CheckpointMetrics",
    "CollectionSource",
    "Config",
    "ConfigError",
    "CsvSink",
    "DirectorySource",
    "Environment",
    "EventTimeStream",
    "EventWindow",
    "FileSink",
    "FileSource",
    "GeneratorSource",
    "JobListener",
    "JsonLinesListener",
    "KeyedStream",
    "LateRecord",
    "LocalEnvironment",
    "ParquetSink",
    "Pipeline",
    "PipelineResult",
    "PipelineTaskContext",
    "PostgresSink",
    "PostgresSource",
    "PrintSink",
    "ProcessFunction",
    "Session",
    "Sink",
    "SinkWriter",
    "SizeTumblingWindow",
    "Sliding",
    "Source",
    "SourceReader",
    "Stream",
    "TaskResult",
    "TimeTumblingWindow",
    "Tumbling",
    "UserFunctionError",
    "Window",
    "WindowContext",
    "WindowMetrics",
    "WindowResult",
    "WindowedStream",
    "col",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(_import_quietly(module), name)
    globals()[name] = value
    return value


def _import_quietly(module: str) -> object:
    """Import ``module`` with the cyclic garbage collector paused (when it runs at all): the first
    name imports most of gyreflow, thousands of classes and functions that all stay alive, and the
    sixty-odd collections their allocations trigger free nothing (about 10 ms of start-up).

    What is alive then is frozen (``gc.freeze``): the collector never walks those objects again,
    neither in the collections the run's own allocations trigger nor in the full one at exit
    (together about 25 ms of a small job's CPU). They are still freed by reference counting; only
    a reference cycle among them that becomes garbage stays in memory, as module-level objects do.
    An interactive session (a REPL, IPython, Jupyter) is not frozen: what it holds before it first
    uses gyreflow is its user's, and may become garbage in cycles later.
    """
    if not _gc.isenabled():
        return _import_module(module)
    _gc.disable()
    try:
        return _import_module(module)
    finally:
        if not _interactive():
            _gc.freeze()
        _gc.enable()


def _interactive() -> bool:
    return hasattr(_sys, "ps1") or bool(_sys.flags.interactive) or "IPython" in _sys.modules


def __dir__() -> list[str]:
    """The public names and the module's own dunders, not its private helpers."""
    return sorted({name for name in globals() if name.startswith("__")} | set(__all__))
