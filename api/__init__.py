"""What users touch: environments, pipelines, windows, streams, sources, sinks and the CLI."""

from gyreflow.api.config import Config, ConfigError
from gyreflow.api.environment import Environment, LocalEnvironment
from gyreflow.api.functions import AggregateFunction
from gyreflow.api.pipeline import Pipeline, PipelineResult, PipelineTaskContext
from gyreflow.api.sinks import FileSink, PrintSink, Sink, SinkWriter
from gyreflow.api.sources import CollectionSource, FileSource, GeneratorSource, Source, SourceReader
from gyreflow.api.stream import KeyedStream, Stream
from gyreflow.api.windows import AllWindow, SizeTumblingWindow, TimeTumblingWindow, Window
from gyreflow.runtime.errors import UserFunctionError

__all__ = [
    "AggregateFunction",
    "AllWindow",
    "CollectionSource",
    "Config",
    "ConfigError",
    "Environment",
    "FileSink",
    "FileSource",
    "GeneratorSource",
    "KeyedStream",
    "LocalEnvironment",
    "Pipeline",
    "PipelineResult",
    "PipelineTaskContext",
    "PrintSink",
    "Sink",
    "SinkWriter",
    "SizeTumblingWindow",
    "Source",
    "SourceReader",
    "Stream",
    "TimeTumblingWindow",
    "UserFunctionError",
    "Window",
]
