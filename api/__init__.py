"""What users touch: environments, pipelines, windows, streams, sources, sinks and the CLI."""

from gyreflow.api.config import Config, ConfigError
from gyreflow.api.environment import Environment, LocalEnvironment
from gyreflow.api.functions import AggregateFunction
from gyreflow.api.pipeline import Pipeline, PipelineResult, PipelineTaskContext
from gyreflow.api.sinks import FileSink, PrintSink, Sink, SinkWriter
from gyreflow.api.sources import CollectionSource, FileSource, GeneratorSource, Source, SourceReader
from gyreflow.api.stream import KeyedStream, Stream
from gyreflow.api.windowed import EventTimeStream, WindowedStream
from gyreflow.api.windows import (
    AllWindow,
    Session,
    SizeTumblingWindow,
    Sliding,
    TimeTumblingWindow,
    Tumbling,
    Window,
)
from gyreflow.runtime.dataflow.event_time import EventWindow, LateRecord, WindowResult
from gyreflow.runtime.dataflow.windowing import WindowContext
from gyreflow.runtime.errors import UserFunctionError

__all__ = [
    "AggregateFunction",
    "AllWindow",
    "CollectionSource",
    "Config",
    "ConfigError",
    "Environment",
    "EventTimeStream",
    "EventWindow",
    "FileSink",
    "FileSource",
    "GeneratorSource",
    "KeyedStream",
    "LateRecord",
    "LocalEnvironment",
    "Pipeline",
    "PipelineResult",
    "PipelineTaskContext",
    "PrintSink",
    "Session",
    "Sink",
    "SinkWriter",
    "SizeTumblingWindow",
    "Sliding",
    "Source",
    "SourceReader",
    "Stream",
    "TimeTumblingWindow",
    "Tumbling",
    "UserFunctionError",
    "Window",
    "WindowContext",
    "WindowResult",
    "WindowedStream",
]
