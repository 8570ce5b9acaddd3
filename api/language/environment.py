"""Environments: where pipelines run (in this process, and later on Spark), built from code or config."""

from __future__ import annotations

import os
from collections.abc import Mapping

from gyreflow.api.config.auto import master_cores, resolve
from gyreflow.api.config.loading import AUTO, ENVIRONMENT_TYPES, Config, ConfigError
from gyreflow.api.config.session import current_settings
from gyreflow.api.connectors.requirements import check_requirements, requirements_of
from gyreflow.api.language.windows import AllWindow
from gyreflow.plan.graph import PipelineGraph
from gyreflow.plan.operators import GraphComputeSpec, SourceSpec
from gyreflow.plan.words import plural
from gyreflow.runtime.checkpoint import RecoveryOptions
from gyreflow.runtime.control import ControlInbox
from gyreflow.runtime.driver import JobListener
from gyreflow.runtime.job_run import JobRun
from gyreflow.runtime.local.host import LocalHost
from gyreflow.runtime.metrics import TaskResult
from gyreflow.state.backends import backend_from_config
from gyreflow.state.stores.sql_urls import missing_driver


class Environment:
    """Where pipelines run. Build one with ``Environment.local()`` or ``Environment.from_config()``.

    >>> env = Environment.local(parallelism=2, progress=False)
    >>> env.config["environment.parallelism"], env.type_name
    (2, 'local')
    """

    type_name = "abstract"

    def __init__(self, config: Config) -> None:
        self._config = config  # with "auto" values resolved, or resolved on first use (config)
        self.state_backend = backend_from_config(config)
        url = getattr(self.state_backend, "url", "")
        problem = missing_driver(url, "state.url") if url else None
        if problem is not None:  # before any data moves, in one line
            raise ConfigError(problem)
        from gyreflow.api.service.control import initial_parameters

        initial_parameters(config)  # a malformed control.parameters fails before any data moves

    @property
    def config(self) -> Config:
        """The settings this environment runs with (``auto`` values resolved to numbers)."""
        if self._config["environment.parallelism"] == AUTO:  # a Spark cluster's: its session knows
            self._config = resolve(self._config, spark_parallelism=self._session_parallelism)
        return self._config

    def _session_parallelism(self) -> int:
        raise NotImplementedError

    def describe(self, graph: PipelineGraph, workers: int | None = None) -> str:
        """Where ``graph`` runs, for the run summary: the environment, its processes (``workers``:
        as a rescale left them) and the parallelism."""
        raise NotImplementedError

    @staticmethod
    def local(parallelism: int | None = None, *, progress: bool | None = None,
              config: Mapping[str, object] | None = None) -> LocalEnvironment:
        """An in-process environment; ``config`` overrides dotted keys (``{"runtime.batch_size": 64}``).

        Under ``gyreflow run --config FILE`` the file's values are the starting point. Where
        ``environment.parallelism`` is ``auto`` (the default) it is 1, in this process, unless
        ``environment.workers`` names a number of worker processes (``--workers N``: then N).
        """
        overrides = dict(config or {})
        overrides["environment.type"] = "local"
        if parallelism is not None:
            overrides["environment.parallelism"] = parallelism
        if progress is not None:
            overrides["progress.enabled"] = progress
        settings = current_settings()
        if settings.environment == "spark":
            warn_environment_ignored("Environment.local()", "spark")
        return LocalEnvironment(Config.load(settings.config_path, overrides), in_process=True)

    @staticmethod
    def spark(master: str | None = None, parallelism: int | None = None, *,
              progress: bool | None = None,
              config: Mapping[str, object] | None = None) -> SparkEnvironment:
        """An environment that runs on Spark (``master`` defaults to ``[spark] master``); ``auto``
        parallelism (the default) is the master's cores (``local[N]``: N)."""
        overrides = dict(config or {})
        overrides["environment.type"] = "spark"
        if master is not None:
            overrides["spark.master"] = master
        if parallelism is not None:
            overrides["environment.parallelism"] = parallelism
        if progress is not None:
            overrides["progress.enabled"] = progress
        settings = current_settings()
        if settings.environment == "local":
            warn_environment_ignored("Environment.spark()", "local")
        return SparkEnvironment(Config.load(settings.config_path, overrides))

    @staticmethod
    def from_config(path: str | os.PathLike | None = None,
                    overrides: Mapping[str, object] | None = None) -> Environment:
        """The environment a TOML config file describes (plus ``GYREFLOW_SECTION__KEY`` variables).

        Without ``path``, the file given to ``gyreflow run --config`` is used, else the defaults:
        Spark ``local[*]`` at the session's parallelism (``auto``), or with ``gyreflow run --env
        local`` one worker process per core but the driver's (in this process on 2 cores or fewer).
        """
        settings = current_settings()
        merged = dict(overrides or {})
        if settings.environment is not None:
            merged.setdefault("environment.type", settings.environment)
        config = Config.load(path if path is not None else settings.config_path, merged)
        return create_environment(config)

    def pipeline(self, name: str):
        """Start a new pipeline named ``name``."""
        from gyreflow.api.language.pipeline import Pipeline

        return Pipeline(self, name)

    def sql(self, text: str, settings: Mapping[str, str] | None = None, *, name: str = "sql",
            root: str | None = None, **execute):
        """Run a script of GeaFlow's SQL (docs/dsl.md) as one pipeline named ``name``, its statements
        in order; ``settings`` are ``set key = value`` ahead of the script and fill its ``${key}``s;
        relative paths resolve against ``root`` (default: the working folder). Returns the
        PipelineResult; a SELECT's rows are its output ``rows-N`` (N: the statement's number)."""
        from importlib import import_module

        # gyreflow.api.dsl sits above this folder (it plans onto pipelines): reached by name at call time.
        runner = import_module("gyreflow.api.dsl.runner")
        return runner.run(self, text, dict(settings or {}), root, name, **execute)

    def run_task(self, name: str, graph: PipelineGraph, listener: JobListener | None,
                 recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run one pipeline task's graph; subclasses choose the executor."""
        raise NotImplementedError

    def _drive(self, name: str, graph: PipelineGraph, listener: JobListener | None,
               recovery: RecoveryOptions | None, backend, make_host) -> TaskResult:
        """Run ``graph`` as one ``JobRun`` on hosts ``make_host(backend)`` builds, with the job's
        control endpoint open; a rescale command stops the tasks at a window boundary and runs them
        again from there with the new parallelism (key groups move through the snapshot), in the
        same run: same job lock, same state location, same control endpoint."""
        from gyreflow.api.service.control import ControlEndpoint, control_directory, initial_parameters

        ran = current_settings().ran
        entry = None
        if ran is not None:  # gyreflow run names them under its summary
            entry = len(ran)
            ran.append((name, self.describe(graph), outputs(graph)))
        inbox = ControlInbox(initial_parameters(self.config))
        endpoint = None
        if self.config["control.enabled"]:
            endpoint = ControlEndpoint(name, inbox, control_directory(self.config))
        try:
            run = JobRun(self.config, backend, make_host, listener, stop=current_settings().stop,
                         control=inbox)
            try:
                return run.execute(name, graph, recovery)
            finally:
                changes = layout_changes(run.rescales, run.rebalances)
                if entry is not None and changes:  # the layout the run ended with
                    where = self.describe(run.graph or graph, workers=run.workers)
                    ran[entry] = (name, f"{where}\n  ({changes} while it ran)", ran[entry][2])
        finally:
            if endpoint is not None:
                endpoint.close()


class LocalEnvironment(Environment):
    """Runs every task in this process with the cooperative local executor, or in worker processes
    (``environment.workers``). ``in_process`` (``Environment.local()``): ``auto`` parallelism and
    workers are 1 unless ``environment.workers`` names a number (then the parallelism follows it).
    """

    type_name = "local"

    def __init__(self, config: Config, *, in_process: bool = False) -> None:
        super().__init__(resolve(config, in_process=in_process))

    def describe(self, graph: PipelineGraph, workers: int | None = None) -> str:
        rescaled = workers is not None  # a worker host keeps its processes, one included
        workers = self.config["environment.workers"] if workers is None else workers
        where = ("in this process" if workers <= 1 and not rescaled else
                 f"in {plural(workers, 'worker process', 'worker processes')}")
        return f"local, {where}, {parallelism_text(self.config['environment.parallelism'], graph)}"

    def run_task(self, name: str, graph: PipelineGraph, listener: JobListener | None,
                 recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run ``graph`` in this process."""
        check_requirements(requirements_of(graph))  # before any data moves
        return self._drive(name, graph, listener, recovery, self.state_backend,
                           lambda backend: LocalHost(self.config, backend))


def layout_changes(rescales: int, rebalances: int) -> str:
    """What the run summary says changed the tasks' layout while a run ran: its rescales (an
    operator's parallelism or the worker processes) and, apart, its rebalances (key groups moved
    between an operator's tasks); empty when neither happened.

    >>> layout_changes(1, 0), layout_changes(1, 2), layout_changes(0, 1), layout_changes(0, 0)
    ('rescaled once', 'rescaled once and rebalanced 2 times', 'rebalanced once', '')
    """
    def times(count: int) -> str:
        return "once" if count == 1 else f"{count} times"

    said = [f"{verb} {times(count)}" for verb, count in (("rescaled", rescales),
                                                          ("rebalanced", rebalances)) if count]
    return " and ".join(said)


def parallelism_text(default: int, graph: PipelineGraph) -> str:
    """The run summary's parallelism: the environment's, then a line for each other number of
    tasks that operators ran with (``  with 2 tasks: count``)."""
    other: dict[int, list[str]] = {}
    for vertex in graph.vertices:
        if vertex.parallelism != default:
            other.setdefault(vertex.parallelism, []).append(vertex.name)
    lines = [f"parallelism {default}"]
    for tasks, names in sorted(other.items()):
        lines.append(f"\n  with {tasks} task{'s' if tasks != 1 else ''}: {', '.join(names)}")
    return "".join(lines)


def spark_mode(configured: str, graph: PipelineGraph) -> str:
    """The mode a Spark job runs in: ``configured``, with ``auto`` resolved to rounds for a batch
    job without a graph computation (every source one ``AllWindow``: a window Spark's shuffle may
    have to spill) and to workers for every other job (a stream, whose windows then cost
    milliseconds instead of a Spark job each; a graph, whose supersteps do too)."""
    if configured != "auto":
        return configured
    specs = [v.spec for v in graph.vertices]
    windows = [spec.window for spec in specs if isinstance(spec, SourceSpec)]
    batch = bool(windows) and all(isinstance(window, AllWindow) for window in windows)
    graph_compute = any(isinstance(spec, GraphComputeSpec) for spec in specs)
    return "rounds" if batch and not graph_compute else "workers"


class SparkEnvironment(Environment):
    """Runs every pipeline on Apache Spark through PySpark: ``[spark] master`` picks local mode
    (``local[*]``) or a cluster; ``spark.mode`` runs long-lived workers in one barrier stage
    (workers), one Spark job per window round (rounds), or picks by the job (auto, the default:
    rounds for a batch job without a graph computation, workers for a stream or a graph).

    >>> env = Environment.spark(master="local[2]", progress=False)
    >>> env.type_name, env.config["spark.master"]
    ('spark', 'local[2]')
    """

    type_name = "spark"

    def __init__(self, config: Config) -> None:
        from gyreflow.api.language.cluster import (
            check_cluster_state,
            is_cluster_master,
            master_problem,
            refusals_in_one_line,
        )
        from gyreflow.runtime.spark.host import spark_session
        from gyreflow.runtime.spark.session import session_master

        with refusals_in_one_line():  # before any data moves: spark-submit's --master counts
            master, not_connected = session_master(config)
            problem = master_problem(master)
            if problem is not None:
                raise ConfigError(problem)
            if master != config["spark.master"]:
                config = config.with_overrides({"spark.master": master})
        slots = dict(config["spark.conf"]).get("spark.default.parallelism", "")
        slots = int(slots) if slots.strip().isdigit() else master_cores(master)
        if slots is not None or config["environment.parallelism"] != AUTO:
            config = resolve(config, spark_parallelism=lambda: slots)
        super().__init__(config)
        self.on_cluster = is_cluster_master(master)
        if self.on_cluster:  # refused before any data moves
            with refusals_in_one_line():
                check_cluster_state(config, self.state_backend, check_address=not_connected)
        settings = current_settings()  # gyreflow run -q or progress.enabled = false: no start line
        self.session = spark_session(config, announce=not settings.quiet and config["progress.enabled"])
        self._probed: set = set()

    def describe(self, graph: PipelineGraph, workers: int | None = None) -> str:
        mode = spark_mode(self.config["spark.mode"], graph)
        return (f"Spark {self.config['spark.master']}, {mode} mode, "
                f"{parallelism_text(self.config['environment.parallelism'], graph)}")

    def _session_parallelism(self) -> int:
        """A cluster's default parallelism: the cores of its executors (starts the session)."""
        return self.session().sparkContext.defaultParallelism

    def run_task(self, name: str, graph: PipelineGraph, listener: JobListener | None,
                 recovery: RecoveryOptions | None = None) -> TaskResult:
        """Run ``graph`` on Spark."""
        from gyreflow.runtime.spark.host import SparkHost, SparkState

        check_requirements(requirements_of(graph))  # before any data moves (or Spark starts)
        make_host = None
        if spark_mode(self.config["spark.mode"], graph) == "workers":
            # its refusals first; auto falls back to rounds where Spark runs no barrier stage
            make_host = self._worker_host_factory(chosen=self.config["spark.mode"] == "workers")
        if self.on_cluster:
            self._probe(graph)
        if make_host is not None:
            return self._drive(name, graph, listener, recovery, self.state_backend, make_host)
        state = SparkState(self.state_backend)  # one state location for the run, restarts included
        try:
            return self._drive(name, graph, listener, recovery, state.backend,
                               lambda backend: SparkHost(self.config, backend, self.session))
        finally:
            state.close()

    def _worker_host_factory(self, chosen: bool):
        """Workers mode: worker hosts whose workers are the tasks of a Spark barrier stage; the
        driver stores their snapshots, so the state stays where the backend says. Refused in one
        line, before any data moves, when the master has fewer task slots than workers; under
        dynamic allocation too when workers mode was ``chosen``, else None (auto: rounds)."""
        from gyreflow.runtime.spark.barrier import (
            SparkLauncher,
            dynamic_allocation_refusal,
            is_local_master,
            task_slots,
            too_few_slots,
        )
        from gyreflow.runtime.workers.host import WorkerHost

        master = self.config["spark.master"]
        context = None if is_local_master(master) else self.session().sparkContext
        cpus = dict(self.config["spark.conf"]).get("spark.task.cpus", "1")
        if context is not None:
            cpus = context.getConf().get("spark.task.cpus", "1")
        slots = task_slots(context, master, int(cpus) if cpus.strip().isdigit() else 1)
        workers = self.config["spark.workers"] or slots
        dynamic = dynamic_allocation_refusal(context)
        if dynamic is not None and not chosen:
            return None
        refusal = dynamic or too_few_slots(max(workers, 1), slots, master)
        if refusal is not None:
            raise ConfigError(refusal)
        return lambda backend: WorkerHost(self.config, backend, workers,
                                          SparkLauncher(self.session, master, slots))

    def _probe(self, graph: PipelineGraph) -> None:
        """On a cluster, check once per location that every executor reaches the checkpoint
        location and the output directories (a directory only the driver sees is refused)."""
        from gyreflow.api.language.cluster import (
            dead_letter_locations,
            input_files,
            probe_inputs,
            probe_shared,
            refusals_in_one_line,
            shared_locations,
        )

        sinks = [(v.name, v.spec.sink) for v in graph.vertices
                 if getattr(v.spec, "sink", None) is not None]
        sources = [(v.name, v.spec.source) for v in graph.vertices
                   if getattr(v.spec, "source", None) is not None]
        locations = [item for item in [*shared_locations(self.state_backend, sinks),
                                       *dead_letter_locations(sources)]
                     if item[1] not in self._probed]
        files = [item for item in input_files(sources) if item[1] not in self._probed]
        with refusals_in_one_line():
            context = self.session().sparkContext
            probe_shared(context, self.state_backend, locations)
            probe_inputs(context, files)
        self._probed.update(location for _, location in [*locations, *files])


_ENVIRONMENTS = {"local": LocalEnvironment, "spark": SparkEnvironment}


def outputs(graph: PipelineGraph) -> list[str]:
    """What ``graph`` writes: each sink as ``explain`` shows it (``FileSink(out/x)``), and the
    results it collects for ``execute()``."""
    from gyreflow.plan.operators import CollectSpec

    found = []
    for vertex in graph.vertices:
        sink = getattr(vertex.spec, "sink", None)
        if sink is not None:
            found.append(sink.describe())
        elif isinstance(vertex.spec, CollectSpec):
            found.append(f"collected as {vertex.spec.name!r}")
    return list(dict.fromkeys(found))


def warn_environment_ignored(built: str, asked: str) -> None:
    """``gyreflow run --env ASKED`` on a script that builds its environment in code: say once, on
    standard error, that the flag does not apply there (only ``Environment.from_config()`` takes
    it), naming the script's line."""
    import sys

    frame = sys._getframe(2)  # the line of the script that built the environment
    where = f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"
    key = (where, asked)
    if key in _WARNED:
        return
    _WARNED.add(key)
    runs = "in this process" if built == "Environment.local()" else "on Spark"
    sys.stderr.write(f"warning: --env {asked} is ignored by {built} at {where}: its pipelines run "
                     f"{runs}; build the environment with Environment.from_config() to let --env "
                     "choose\n")
    sys.stderr.flush()


_WARNED: set = set()


def create_environment(config: Config) -> Environment:
    """Instantiate the environment class that ``environment.type`` names."""
    kind = config["environment.type"]
    cls = _ENVIRONMENTS.get(kind)
    if cls is None:
        msg = f"environment.type {kind!r} is not available; valid choices: {', '.join(ENVIRONMENT_TYPES)}"
        raise ConfigError(msg)
    return cls(config)
