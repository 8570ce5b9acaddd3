"""The ``gyreflow`` command line: run a pipeline script, explain its plans, show the configuration."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from gyreflow.api.cli.control import control
from gyreflow.api.cli.errors import GyreflowGroup, fail_script, one_line, script_location
from gyreflow.api.cli.errors import fail as _fail
from gyreflow.api.cli.graph import graph
from gyreflow.api.cli.query import query
from gyreflow.api.cli.resume_flags import allow_changed_plan_option
from gyreflow.api.cli.snapshots import snapshots
from gyreflow.api.cli.sql import sql

# Choices named at the command line; tests/api/cli/test_cli.py checks them against config and explain. What
# a command runs is imported when it runs, so that every command starts fast.
ENVIRONMENT_TYPES = ("spark", "local")
SPARK_MODES = ("auto", "workers", "rounds")
EXPLAIN_FORMATS = ("text", "dot", "mermaid")


def _run_script(script: str, args: tuple[str, ...], settings) -> list[str]:
    """Run ``script`` as ``__main__`` under ``settings``; returns the names of the pipelines it gave
    tasks but never executed."""
    import runpy

    from gyreflow.api.config.loading import Config
    from gyreflow.api.config.session import using_settings
    from gyreflow.api.language.pipeline import take_not_executed

    if not os.path.isfile(script):
        if script.startswith("-"):  # unknown options reach the script's place: a misspelt option
            import difflib

            ctx = click.get_current_context()
            known = [name for param in ctx.command.params for name in param.opts
                     if name.startswith("--")]
            raise click.NoSuchOption(script, possibilities=difflib.get_close_matches(script, known, n=1),
                                     ctx=ctx)
        raise click.BadParameter(f"no such script: {script}", param_hint="SCRIPT")
    if settings.config_path is not None:
        Config.load(settings.config_path)  # bad config fails here, before any data moves
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with using_settings(settings):
            namespace = runpy.run_path(script, run_name="__main__")
        never_executed = take_not_executed()  # while the script's pipelines are still alive
        del namespace
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return never_executed


def _load_listeners(console, specs: tuple[str, ...], events_path: str | None) -> list:
    """The listeners ``--listener`` and ``--events`` ask for; a bad one exits 2 in one line."""
    from gyreflow.api.service.listeners import JsonLinesListener, ListenerSpecError, load_listener

    listeners = []
    try:
        listeners.extend(load_listener(spec) for spec in specs)
    except ListenerSpecError as exc:
        _fail(console, str(exc), 2)
    if events_path is not None:
        try:
            listeners.append(JsonLinesListener(events_path, on_error=_error_line(console)))
        except OSError as exc:
            _fail(console, f"--events {events_path}: cannot be written ({exc.strerror})", 2)
    return listeners


def _error_line(console):
    """A function that prints its message as one ``error:`` line on ``console``."""
    from rich.markup import escape

    def tell(message: str) -> None:
        console.print(f"[bold red]error:[/] {escape(one_line(message))}", markup=True,
                      highlight=False, soft_wrap=True)

    return tell


def _check_metrics_json(console, path: str | None) -> None:
    """``--metrics-json``'s folder must take the file: refused in one line (exit 2) before any data
    moves, as ``--events`` is, rather than after the job's work is done."""
    if path is None:
        return
    from gyreflow.api.service.progress import check_metrics_json

    try:
        check_metrics_json(path)
    except OSError as exc:
        _fail(console, f"--metrics-json {path}: cannot be written ({exc.strerror or exc})", 2)


def _write_metrics_json(console, path: str, summaries: list) -> None:
    """Write ``--metrics-json`` at the end of a run; a folder that went away or turned read-only
    meanwhile is told in one ``error:`` line, and the run keeps the exit status of its job."""
    from gyreflow.api.service.progress import write_metrics_json

    try:
        write_metrics_json(path, summaries)
    except OSError as exc:
        _error_line(console)(f"--metrics-json {path}: cannot be written ({exc.strerror or exc})")


class _StderrConsole:
    """rich's ``Console(stderr=True)``, made when the run first prints: a quiet run that succeeds
    never imports rich (a tenth of its start-up)."""

    def __init__(self) -> None:
        self._console = None

    def __getattr__(self, name: str):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True)
        return getattr(self._console, name)


def _open_ui(console, config_path: str | None, address: str | None, stop):
    """The run's port (``--ui`` or ``ui.address``), opened before the script runs; None if unset."""
    from gyreflow.api.config.loading import Config, ConfigError

    try:
        config = Config.load(config_path)
        address = address if address is not None else config["ui.address"]
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    if not address:
        return None
    # The HTTP server and prometheus_client: imported by a run that serves the ui, never by another.
    from gyreflow.api.service.ui_server import RunUi, UiAddressError

    try:
        ui = RunUi.open(address, config["ui.linger"], stop)
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    except UiAddressError as exc:
        _fail(console, str(exc), 2)
    except OSError as exc:
        _fail(console, f"cannot serve the ui on {address!r}: {exc.strerror or exc}", 2)
    return ui


def _stop_now(signum: int, last_completed: int, backend: str | None = None) -> None:
    """A second Ctrl-C: leave at once, as a crash would (a persistent backend's state is resumable
    after any crash; the memory backend's ends with the process)."""
    from gyreflow.runtime.stop import exit_status, resume_advice

    with contextlib.suppress(OSError):
        sys.stderr.write(f"stopped after window {last_completed}; {resume_advice(backend)}\n")
        sys.stderr.flush()
    os._exit(exit_status(signum))


_WORKERS_VARIABLE = "GYREFLOW_ENVIRONMENT__WORKERS"
_SPARK_MODE_VARIABLE = "GYREFLOW_SPARK__MODE"


@click.group(cls=GyreflowGroup)
@click.version_option(package_name="gyreflow")
def main() -> None:
    """gyreflow: stream, batch and graph pipelines under one cycle scheduler."""


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see conf/default.toml).")
@click.option("--env", "environment", type=click.Choice(ENVIRONMENT_TYPES),
              help="Environment for pipelines built with Environment.from_config().")
@click.option("--workers", type=int, default=None, metavar="N",
              help="With --env local: run each job's tasks in N worker processes (1: in this "
                   "process; config key environment.workers).")
@click.option("--spark-mode", type=click.Choice(SPARK_MODES), default=None,
              help="On Spark: workers (long-lived worker processes in one barrier stage), "
                   "rounds (a Spark job per window) or auto (rounds for a batch job without a "
                   "graph, workers otherwise; the default; config key spark.mode).")
@click.option("--quiet", "-q", is_flag=True, help="No progress display and no summary.")
@click.option("--resume", is_flag=True, help="Continue after the last completed window.")
@click.option("--fresh", is_flag=True, help="Discard stored state and start over.")
@click.option("--from-window", type=int, default=None,
              help="With --resume: continue after this retained snapshot instead of the last.")
@click.option("--until-idle", type=click.FloatRange(min=0), default=None, metavar="SECONDS",
              help="Followed sources (directories, tables) end after SECONDS without new data.")
@click.option("--ui", "ui_address", default=None, metavar="[HOST:]PORT",
              help="Serve /metrics (Prometheus), /api/job and a live page on this port while the "
                   "job runs (HOST defaults to 127.0.0.1; config key ui.address).")
@click.option("--metrics-json", type=click.Path(dir_okay=False, writable=True), default=None,
              metavar="FILE", help="Write the final metrics of every task to FILE as JSON.")
@click.option("--listener", "listener_specs", multiple=True, metavar="MODULE:NAME",
              help="A JobListener (class, instance or factory) told of every window, checkpoint "
                   "and job end; MODULE may be a path to a .py file. Repeatable.")
@click.option("--events", "events_path", type=click.Path(dir_okay=False, writable=True),
              default=None, metavar="FILE",
              help="Append every window, checkpoint and job end to FILE as JSON lines.")
@allow_changed_plan_option
def run(script: str, script_args: tuple[str, ...], config_path: str | None,
        environment: str | None, workers: int | None, spark_mode: str | None, quiet: bool,
        resume: bool, fresh: bool,
        from_window: int | None, until_idle: float | None, ui_address: str | None,
        metrics_json: str | None, listener_specs: tuple[str, ...],
        events_path: str | None) -> None:
    """Run the pipelines SCRIPT defines; arguments after -- go to the script."""
    import threading

    from gyreflow.api.cli.errors import fail_user_function
    from gyreflow.api.cli.run_failures import check_a_pipeline_ran, fail_other, kept
    from gyreflow.api.config.loading import ConfigError
    from gyreflow.api.config.session import RunSettings
    from gyreflow.api.service.listeners import JsonLinesListener, NoticeListener, combined
    from gyreflow.runtime.errors import (
        DataError,
        OutputError,
        PipelineDefinitionError,
        SnapshotNotRetainedError,
        SnapshotWriteError,
        UserFunctionError,
    )
    from gyreflow.runtime.stop import (
        JobInterrupted,
        JobStopped,
        StopRequest,
        exit_status,
        install_handlers,
        restore_handlers,
        resume_advice,
    )
    from gyreflow.state.shared.job_lock import JobLockedError
    from gyreflow.state.shared.snapshot import (
        BackendUnavailableError,
        IncompatiblePlanError,
        SnapshotCorruptedError,
        StateExistsError,
    )

    console = _StderrConsole()
    if resume and fresh:
        _fail(console, "choose one of --resume and --fresh", 2)
    if from_window is not None and not resume:
        _fail(console, "--from-window needs --resume", 2)
    if workers is not None and workers < 1:
        _fail(console, f"--workers {workers} is not a number of processes; valid choices: 1 (tasks "
                       "in this process) or N > 1 (N worker processes)", 2)
    if workers is not None and workers > 1 and environment == "spark":
        _fail(console, f"--workers {workers} runs worker processes of the local environment; with "
                       "--env spark, Spark's executors run the tasks: use --env local", 2)
    _check_metrics_json(console, metrics_json)  # before any data moves, and before --events
    from gyreflow.runtime.faults import spec_problem

    if (crash_problem := spec_problem()) is not None:  # a misspelt GYREFLOW_CRASH_AT
        _fail(console, f"configuration: {crash_problem}", 2)
    listeners = _load_listeners(console, listener_specs, events_path)  # creates its file
    if not quiet:
        listeners.insert(0, NoticeListener(console))
    stop = StopRequest(immediate=lambda signum, last: _stop_now(signum, last, stop.backend))
    ui = _open_ui(console, config_path, ui_address, stop)
    settings = RunSettings(config_path=config_path, environment=environment, quiet=quiet,
                           show_progress=not quiet, resume=resume, fresh=fresh,
                           from_window=from_window, until_idle=until_idle, summaries=[],
                           stop=stop, monitor=ui.monitor if ui is not None else None,
                           listener=combined(*listeners), ran=[])
    previous = install_handlers(stop) if threading.current_thread() is threading.main_thread() else {}
    # Every config the script loads takes --workers and --spark-mode (the variables' layer of
    # Config.load).
    flags = {_WORKERS_VARIABLE: None if workers is None else str(workers),
             _SPARK_MODE_VARIABLE: spark_mode}
    flags = {name: value for name, value in flags.items() if value is not None}
    before = {name: os.environ.get(name) for name in flags}
    os.environ.update(flags)
    try:
        try:
            never_executed = _run_script(script, script_args, settings)
            check_a_pipeline_ran(script, settings.ran, never_executed)  # as explain, exit 1
        except BaseException as exc:
            if ui is not None:
                ui.monitor.finish(exc if not isinstance(exc, SystemExit) or exc.code else None)
            raise
        if ui is not None:
            ui.monitor.finish()
    except (JobStopped, JobInterrupted) as exc:
        console.print(f"stopped after window {exc.last_completed}; {resume_advice(stop.backend)}",
                      markup=False, highlight=False, soft_wrap=True)
        sys.exit(exit_status(exc.signum))
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    except PipelineDefinitionError as exc:
        _fail(console, script_location(exc) + str(exc), 2,
              hint="Fix the pipeline definition and run again.")
    except UserFunctionError as exc:
        fail_user_function(console, exc, kept(stop.backend, "fix the function and run again "
                                                            "with --resume"))
    except JobLockedError as exc:
        _fail(console, str(exc), 4)
    except OutputError as exc:  # its message says what to fix
        _fail(console, str(exc), 5, hint=kept(stop.backend, "run again with --resume"))
    except DataError as exc:
        _fail(console, str(exc), 5, hint=kept(stop.backend, "fix the input (the data, or the "
                                                            "system it comes from) and run "
                                                            "again with --resume"))
    except (StateExistsError, IncompatiblePlanError, BackendUnavailableError,
            SnapshotCorruptedError, SnapshotNotRetainedError, SnapshotWriteError) as exc:
        hint = ""
        if isinstance(exc, SnapshotCorruptedError) and (
                "cannot be read" in str(exc) or "is missing" in str(exc)):
            hint = ("The stored state cannot be used as it is: restore it from a copy, or start "
                    "over with --fresh.")
        elif isinstance(exc, SnapshotCorruptedError):
            hint = ("To resume from an earlier retained snapshot, run with --resume "
                    "--from-window N (see gyreflow snapshots).")
        _fail(console, str(exc), 3, hint=hint)
    except Exception as exc:  # noqa: BLE001 - classified in fail_other, raised again if unknown
        fail_other(console, exc, stop.backend)
    finally:
        try:
            if metrics_json is not None:
                _write_metrics_json(console, metrics_json, settings.summaries)
            if ui is not None:
                ui.linger(stop)
        finally:
            if ui is not None:
                ui.close()
            for listener in listeners:
                if isinstance(listener, JsonLinesListener):
                    listener.close()
            restore_handlers(previous)
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    if not quiet:
        from gyreflow.api.service.progress import summary_tables

        for name, results in settings.summaries:
            idle = {task for task, result in results.items()
                    if result.window_count == 0 and result.last_completed > 0}
            for task in idle:  # a resume after the input's end
                console.print(f"nothing to do: {name}/{task} finished at window "
                              f"{results[task].last_completed}", markup=False, highlight=False,
                              soft_wrap=True)
            busy = {task: result for task, result in results.items() if task not in idle}
            for table in summary_tables(name, busy) if busy else ():
                console.print(table)
        for task, where, written in settings.ran:  # each task's environment and outputs
            console.print(f"{task} ran on {where}", markup=False, highlight=False, soft_wrap=True)
            if written:  # a line of its own: a path is shown whole, however long
                console.print("  output: " + ", ".join(written), markup=False, highlight=False,
                              soft_wrap=True)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("script", type=click.Path(dir_okay=False))
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--format", "fmt", type=click.Choice(EXPLAIN_FORMATS), default="text", show_default=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--env", "environment", type=click.Choice(ENVIRONMENT_TYPES),
              help="Environment for pipelines built with Environment.from_config() (its "
                   "parallelism shapes the plan; nothing starts).")
@click.option("--set", "variables", multiple=True, metavar="KEY=VALUE",
              help="A SQL script's variable, as gyreflow sql takes it (before or after SCRIPT).")
def explain(script: str, script_args: tuple[str, ...], fmt: str, config_path: str | None,
            environment: str | None, variables: tuple[str, ...]) -> None:
    """Print the PipelineGraph and ExecutionGraph of the pipelines SCRIPT defines, without running.

    The script runs with every execute() recording its pipeline's plan instead of running it; where
    the script first reads what execute() returned (result["task"], result.output(...)) it stops,
    as nothing ran: the plans shown are those of the pipelines it executed up to there.

    SCRIPT may also be a graph query ('MATCH ...', see gyreflow query): its compiled plan is
    printed, as text; or a SQL script (FILE.sql, see gyreflow sql): the plan of each statement
    that runs.
    """
    from rich.console import Console

    from gyreflow.api.config.loading import ConfigError
    from gyreflow.api.config.session import RunSettings

    if not os.path.exists(script) and script.lstrip()[:5].upper() == "MATCH":
        _explain_query(script, fmt)
        return
    given = tuple(arg for text in variables for arg in ("--set", text))
    if script.lower().endswith(".sql"):  # a script of gyreflow's SQL: each INSERT and SELECT's plan
        from gyreflow.api.cli.sql import explain_sql

        explain_sql(script, fmt, config_path, environment, given + script_args)
        return
    script_args = given + script_args  # a Python script's own --set, as it was given

    from gyreflow.api.language.pipeline import (
        ExplainStop,
        not_executed_warning,
        stopping_at_results,
        take_not_executed,
    )

    settings = RunSettings(config_path=config_path, environment=environment, quiet=True,
                           explain_format=fmt, explained=[])
    try:
        with stopping_at_results():
            never_executed = _run_script(script, script_args, settings)
        if never_executed:
            sys.stderr.write(not_executed_warning(never_executed) + "\n")
    except ExplainStop:  # the script read a result of execute(): its plans so far are the answer
        take_not_executed()  # the pipelines it would define after that point are no mistake
    except ConfigError as exc:
        _fail(Console(stderr=True), f"configuration: {exc}", 2)
    except click.ClickException:
        raise
    except Exception as exc:  # noqa: BLE001 - the script's own mistake, told in one line
        from gyreflow.runtime.errors import PipelineDefinitionError

        if isinstance(exc, PipelineDefinitionError):
            _fail(Console(stderr=True), script_location(exc) + str(exc), 2,
                  hint="Fix the pipeline definition and run again.")
        fail_script(Console(stderr=True), exc)
    if not settings.explained:
        _fail(Console(stderr=True), f"{script} defines no pipeline that it executes: nothing to "
                                    "explain (pipelines are explained where they call execute())", 1)
    from gyreflow.plan.explain import explain_all

    sys.stdout.write(explain_all(settings.explained, fmt) + "\n")


def _explain_query(text: str, fmt: str) -> None:
    from rich.console import Console

    from gyreflow.api.graph.query import Query, QuerySyntaxError

    if fmt != "text":
        _fail(Console(stderr=True), f"a query's plan is text only, not {fmt}: leave out --format", 2)
    try:
        click.echo(Query(text).explain())
    except QuerySyntaxError as exc:
        _fail(Console(stderr=True), str(exc), 2)


@main.command("config")
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@click.option("--schema", is_flag=True, help="Print every key as a Markdown table.")
def show_config(config_path: str | None, schema: bool) -> None:
    """Print the effective configuration (file + GYREFLOW_* variables) as TOML, passwords and
    secrets masked."""
    from gyreflow.api.config.loading import Config, ConfigError, schema_markdown

    if schema:
        click.echo(schema_markdown())
        return
    try:
        click.echo(Config.load(config_path).as_toml(mask_secrets=True))
    except ConfigError as exc:
        from rich.console import Console

        _fail(Console(stderr=True), f"configuration: {exc}", 2)


main.add_command(snapshots)
main.add_command(graph)
main.add_command(query)
main.add_command(sql)
main.add_command(control)

if __name__ == "__main__":
    main()

