"""Pipelines: named groups of pipeline tasks, each a function that builds a stream graph."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import sys
import weakref
from collections.abc import Callable, Iterator, Mapping

from gyreflow.api.config.auto import is_automatic
from gyreflow.api.config.loading import ConfigError
from gyreflow.api.config.session import current_settings
from gyreflow.api.connectors.requirements import check_requirements, requirements_of
from gyreflow.api.connectors.sources import GeneratorSource, as_source
from gyreflow.api.language.source_windows import call_site, warn_size_windows_per_task
from gyreflow.api.language.stream import GraphBuilder, Stream
from gyreflow.api.language.windows import AllWindow, Window
from gyreflow.plan.execution import ExecutionGraph, build_execution_graph
from gyreflow.plan.graph import PipelineGraph
from gyreflow.plan.operators import SourceSpec
from gyreflow.runtime.checkpoint import RecoveryOptions
from gyreflow.runtime.job_listener import JobListener, Listeners
from gyreflow.runtime.metrics import TaskResult
from gyreflow.state.records import frozen


class PipelineTaskContext:
    """Handed to a pipeline task's function: open sources here, then chain stream operations."""

    def __init__(self, builder: GraphBuilder, config) -> None:
        self.builder = builder
        self.config = config
        self.origins: dict[int, tuple[str, int]] = {}  # source vertex -> the line that opened it

    def source(self, source, window: Window | None = None, *, name: str | None = None,
               parallelism: int | None = None) -> Stream:
        """Read ``source`` (a Source or any iterable) cut into ``window`` (default: ``AllWindow()``).

        ``parallelism`` is the number of source tasks (default: the source's own, else the number
        the environment sets; 1 under ``environment.parallelism = "auto"``). Each task reads its
        own share of the input, and a ``SizeTumblingWindow(n)`` counts n records per task: with
        more than one task its windows change with the parallelism (``SourceParallelismWarning``).
        """
        source = as_source(source)
        window = window if window is not None else AllWindow()
        if not isinstance(window, Window):
            msg = (f"window must be SizeTumblingWindow, TimeTumblingWindow or AllWindow, "
                   f"got {type(window).__name__}")
            raise TypeError(msg)
        if parallelism is None and isinstance(source, GeneratorSource) and not source.splittable:
            parallelism = 1
        if parallelism is None:
            parallelism = getattr(source, "default_parallelism", None)
        if parallelism is None and is_automatic(self.config):
            parallelism = 1  # environment.parallelism = auto: what a source task reads stays as at 1
        node = self.builder.add(SourceSpec(source, window), [], parallelism, name)
        self.origins[node] = call_site()
        return Stream(self.builder, node)


@frozen
class PipelineTask:
    """One job of a pipeline: ``fn(ctx)`` builds its streams."""

    name: str
    fn: Callable[[PipelineTaskContext], object]

    def build(self, config) -> PipelineGraph:
        """Run the task's function and return the graph it built."""
        builder = GraphBuilder(config["environment.parallelism"], config, self.name)
        ctx = PipelineTaskContext(builder, config)
        self.fn(ctx)
        graph = builder.build()
        warn_size_windows_per_task(graph, ctx.origins)
        return graph


class PipelineResult(Mapping):
    """The results of a pipeline's tasks, by task name."""

    def __init__(self, tasks: dict[str, TaskResult]) -> None:
        self.tasks = tasks

    def __getitem__(self, name: str) -> TaskResult:
        try:
            return self.tasks[name]
        except KeyError:
            msg = f"no pipeline task named {name!r}; tasks: {sorted(self.tasks)}"
            raise KeyError(msg) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    def output(self, name: str = "collect") -> list:
        """Records collected under ``name`` by whichever task collected them, in window order."""
        for task in self.tasks.values():
            if name in task.collected:
                return task.output(name)
        msg = f"no task collected output named {name!r}"
        raise KeyError(msg)

    def by_window(self, name: str = "collect") -> dict[int, list]:
        """Records collected under ``name``, by window id."""
        for task in self.tasks.values():
            if name in task.collected:
                return task.by_window(name)
        msg = f"no task collected output named {name!r}"
        raise KeyError(msg)


class ExplainStop(BaseException):
    """Raised under ``gyreflow explain`` when a script reads the result of ``execute()``: nothing ran,
    so there is no result, and the plans of the pipelines executed so far are what explain shows.

    A ``BaseException``, as ``SystemExit`` is, so that a script's ``except Exception`` lets it pass.
    """


class _ExplainedResult(PipelineResult):
    """What ``execute()`` returns under ``gyreflow explain``: reading it stops the script."""

    def __init__(self, pipeline: str) -> None:
        super().__init__({})
        self.pipeline = pipeline

    def _stop(self):
        msg = (f"pipeline {self.pipeline!r} was explained, not run: the script stops where it "
               "reads the result of execute()")
        raise ExplainStop(msg)

    def __getitem__(self, name: str) -> TaskResult:
        self._stop()

    def __iter__(self) -> Iterator[str]:
        self._stop()

    def __len__(self) -> int:
        self._stop()

    def __contains__(self, name: object) -> bool:
        self._stop()

    def output(self, name: str = "collect") -> list:
        """Stops the script: nothing ran."""
        self._stop()

    def by_window(self, name: str = "collect") -> dict[int, list]:
        """Stops the script: nothing ran."""
        self._stop()


# Under ``gyreflow explain SCRIPT``: execute() returns a result whose reading stops the script
# (raises ExplainStop), rather than an empty one the script would fail on with a KeyError.
_STOP_AT_RESULT: contextvars.ContextVar[bool] = contextvars.ContextVar("gyreflow_explain_stop",
                                                                       default=False)


@contextlib.contextmanager
def stopping_at_results():
    """Inside the block, reading what an explained ``execute()`` returned raises ``ExplainStop``."""
    token = _STOP_AT_RESULT.set(True)
    try:
        yield
    finally:
        _STOP_AT_RESULT.reset(token)


class Pipeline:
    """A named set of pipeline tasks run in order by ``execute()``.

    >>> from gyreflow.api import Environment, SizeTumblingWindow
    >>> pipeline = Environment.local(progress=False).pipeline("count")
    >>> @pipeline.task
    ... def count(ctx):
    ...     words = ctx.source(["a b", "b c", "b"], SizeTumblingWindow(2)).flat_map(str.split)
    ...     words.map(lambda w: (w, 1)).key_by(lambda kv: kv[0]).reduce(
    ...         lambda a, b: (a[0], a[1] + b[1])).collect("counts")
    >>> pipeline.execute()["count"].by_window("counts")
    {1: [('a', 1), ('b', 2), ('c', 1)], 2: [('b', 3)]}
    """

    def __init__(self, env, name: str) -> None:
        if "/" in name:
            msg = (f"pipeline name {name!r}: a pipeline's name cannot contain '/' (it separates the "
                   f"pipeline from its task in a job's name, 'pipeline/task')")
            raise ValueError(msg)
        self.env = env
        self.name = name
        self.tasks: list[PipelineTask] = []

    def task(self, fn: Callable | None = None, *, name: str | None = None):
        """Register a pipeline task (usable as ``@pipeline.task`` or ``@pipeline.task(name=...)``)."""

        def register(function: Callable) -> Callable:
            task_name = name or function.__name__
            if any(t.name == task_name for t in self.tasks):
                msg = f"pipeline {self.name!r} already has a task named {task_name!r}"
                raise ValueError(msg)
            self.tasks.append(PipelineTask(task_name, function))
            _NOT_EXECUTED.add(self)
            return function

        return register(fn) if fn is not None else register

    def plans(self) -> list[tuple[str, PipelineGraph, ExecutionGraph]]:
        """Build every task's logical and physical plan."""
        plans = []
        for task in self.tasks:
            graph = task.build(self.env.config)
            plans.append((task.name, graph, build_execution_graph(graph)))
        return plans

    def explain(self, format: str = "text") -> str:  # noqa: A002 - the CLI flag's name
        """Describe every task's PipelineGraph and ExecutionGraph as text, or as one DOT graph or
        Mermaid flowchart in which each task is a subgraph."""
        from gyreflow.plan.explain import explain_all

        return explain_all(self.titled_plans(), format)

    def titled_plans(self) -> list[tuple[str, PipelineGraph, ExecutionGraph]]:
        """``plans`` titled ``pipeline/task``, as ``explain`` shows them."""
        return [(f"{self.name}/{name}", graph, execution) for name, graph, execution in self.plans()]

    def execute(self, progress: bool | None = None, *, resume: bool | None = None,
                fresh: bool | None = None, from_window: int | None = None,
                listener: JobListener | None = None) -> PipelineResult:
        """Run every task in order and return their results (blocks until the input ends).

        With ``resume=True`` each task continues after its last completed window (or after
        ``from_window``, a retained snapshot); ``fresh=True`` discards stored state first. Without
        either, stored state from an earlier run is an error that says which window would resume.
        Under ``gyreflow run --resume/--fresh/--from-window`` those flags are the defaults.
        ``listener`` (a ``JobListener``) is told of every window as it finishes.
        """
        if not self.tasks:
            msg = f"pipeline {self.name!r} has no tasks: add one with @pipeline.task"
            raise ValueError(msg)
        _NOT_EXECUTED.discard(self)
        settings = current_settings()
        if settings.explain_format is not None:
            if settings.explained is not None:  # gyreflow explain prints every pipeline at the end
                settings.explained.extend(self.titled_plans())
            else:
                sys.stdout.write(self.explain(settings.explain_format) + "\n")
            if _STOP_AT_RESULT.get():
                return _ExplainedResult(self.name)
            return PipelineResult({})
        if settings.listener is not None:
            listener = settings.listener if listener is None else Listeners((listener,
                                                                             settings.listener))
        if _show_progress(progress, self.env.config, settings):
            from gyreflow.api.service.progress import ProgressListener

            shown = ProgressListener(self.name)
            listener = shown if listener is None else Listeners((shown, listener))
        recovery = RecoveryOptions(
            resume=settings.resume if resume is None else resume,
            fresh=settings.fresh if fresh is None else fresh,
            from_window=settings.from_window if from_window is None else from_window,
        )
        if recovery.resume and recovery.fresh:
            msg = "choose one of resume and fresh, not both"
            raise ValueError(msg)
        ui = None
        monitor = settings.monitor
        if monitor is None and self.env.config["ui.address"]:
            ui = _open_ui(self.env.config, settings.stop)  # before any data moves
            monitor = ui.monitor
        if monitor is not None:
            listener = monitor if listener is None else Listeners((listener, monitor))
        results = {}
        try:
            # Every task's plan first, and what their sources and sinks need: a module missing for
            # the last task refuses the pipeline before the first task moves any data.
            graphs = [(task.name, task.build(self.env.config)) for task in self.tasks]
            for _, graph in graphs:
                check_requirements(requirements_of(graph))
            if self.env.config["control.parameters"]:
                from gyreflow.api.service.control import warn_unknown_operators

                warn_unknown_operators(self.env.config, self.name,
                                       {v.name for _, graph in graphs for v in graph.vertices})
            for name, graph in graphs:
                results[name] = self.env.run_task(f"{self.name}/{name}", graph, listener, recovery)
        except BaseException as exc:
            if ui is not None:
                ui.monitor.finish(exc)
            raise
        else:
            if ui is not None:
                ui.monitor.finish()
        finally:
            if ui is not None:
                ui.linger(settings.stop)
                ui.close()
        if settings.summaries is not None:
            settings.summaries.append((self.name, results))
        return PipelineResult(results)


def _show_progress(requested: bool | None, config, settings) -> bool:
    if requested is not None:
        return requested
    if settings.quiet or not config["progress.enabled"]:
        return False
    return settings.show_progress or sys.stderr.isatty()


def _open_ui(config, stop):
    """The port ``ui.address`` asks for, when ``execute`` runs outside ``gyreflow run --ui``."""
    from gyreflow.api.service.ui_server import RunUi, UiAddressError

    try:
        return RunUi.open(config["ui.address"], config["ui.linger"], stop)
    except UiAddressError as exc:
        raise ConfigError(str(exc)) from None


_NOT_EXECUTED: weakref.WeakSet = weakref.WeakSet()  # pipelines with tasks that never ran


def take_not_executed() -> list[str]:
    """Names of the pipelines given tasks but never executed (each reported once)."""
    names = sorted(p.name for p in _NOT_EXECUTED)
    _NOT_EXECUTED.clear()
    return names


def not_executed_warning(names: list[str]) -> str:
    """The warning for pipelines that were defined but never run."""
    listed = ", ".join(repr(n) for n in names)
    return (f"warning: pipeline {listed} {'has' if len(names) == 1 else 'have'} tasks but "
            f"{'was' if len(names) == 1 else 'were'} never executed: call pipeline.execute() "
            "to run it")


@atexit.register
def _warn_not_executed() -> None:
    names = take_not_executed()
    if names:
        sys.stderr.write(not_executed_warning(names) + "\n")
