"""What users touch: environments, pipelines, windows, streams, sources, sinks and the CLI."""

from gyreflow.api.config import Config, ConfigError
from gyreflow.api.directory_source import DirectorySource
from gyreflow.api.environment import Environment, LocalEnvironment
from gyreflow.api.functions import AggregateFunction, ProcessFunction
from gyreflow.api.listeners import (
    CheckpointMetrics,
    JobListener,
    JsonLinesListener,
    TaskResult,
    WindowMetrics,
)
from gyreflow.api.pipeline import Pipeline, PipelineResult, PipelineTaskContext
from gyreflow.api.postgres import PostgresSink, PostgresSource
from gyreflow.api.sinks import CsvSink, FileSink, ParquetSink, PrintSink, Sink, SinkWriter
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
    "ProcessFunction",
    "CheckpointMetrics",
    "JobListener",
    "JsonLinesListener",
    "TaskResult",
    "WindowMetrics",
    "AllWindow",
    "CollectionSource",
    "Config",
    "CsvSink",
    "DirectorySource",
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
    "ParquetSink",
    "Pipeline",
    "PipelineResult",
    "PipelineTaskContext",
    "PostgresSink",
    "PostgresSource",
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
