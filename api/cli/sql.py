"""``gyreflow sql``: run a script of GeaFlow's Hybrid DSL (its SQL side) as one gyreflow job."""

from __future__ import annotations

import os
import sys

import click

from gyreflow.api.cli.errors import fail as _fail


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"expected KEY=VALUE, got {text!r}", param_hint="--set")
    return key.strip(), value


@click.command(name="sql")
@click.argument("script", type=click.Path(dir_okay=False))
@click.option("--env", "environment", type=click.Choice(("local", "spark")),
              help="Environment to run on (default: environment.type where the configuration sets it, "
                   "else local).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML config file (see conf/default.toml).")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="A setting, as the script's own `set KEY = VALUE;` (and ${KEY} in the script).")
@click.option("--resume", is_flag=True, help="Continue after the last completed window.")
def sql(script: str, environment: str | None, config_path: str | None, settings: tuple[str, ...],
        resume: bool) -> None:
    """Run the statements of SCRIPT in order as one job: SET, CREATE TABLE/VIEW/FUNCTION, INSERT INTO
    and SELECT (whose rows are printed, one line each in GeaFlow's row format).

    Exit status 2: a statement that does not parse or that gyreflow's SQL does not run, or Spark
    that did not start (nothing ran); 1: a query failed while it ran.
    """
    from rich.console import Console

    from gyreflow.api.config.loading import ConfigError, chosen_environment
    from gyreflow.api.config.session import RunSettings, using_settings
    from gyreflow.api.dsl.parsing import DslError
    from gyreflow.api.dsl.rows import RowFormatError, format_row
    from gyreflow.api.dsl.runner import run, selected_rows
    from gyreflow.runtime.errors import UserFunctionError
    from gyreflow.runtime.spark.session import SparkStartError

    console = Console(stderr=True)
    try:
        with open(script, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        _fail(console, f"{script}: cannot read it: {exc.strerror}", 2)
    values = dict(_setting(s) for s in settings)
    try:  # the configuration is read here first: its errors are one line too
        environment = environment or chosen_environment(config_path) or "local"
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    run_settings = RunSettings(config_path=config_path, environment=environment, quiet=True,
                               show_progress=False, summaries=[])
    name = os.path.splitext(os.path.basename(script))[0] or "sql"
    try:
        with using_settings(run_settings):
            from gyreflow.api.language.environment import Environment

            env = Environment.from_config()
            result = run(env, text, values, root=os.getcwd(), name=name, resume=resume, fresh=not resume)
    except DslError as exc:
        _fail(console, f"{script}: {exc}", 2, hint=exc.hint)
    except RowFormatError as exc:
        _fail(console, str(exc), 5)
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    except SparkStartError as exc:  # no Java, no Spark, a master or setting spark-submit refused
        _fail(console, str(exc), 2)
    except UserFunctionError as exc:
        from gyreflow.api.dsl.queries import QueryError

        cause = exc.cause if isinstance(exc.cause, QueryError) else None
        if cause is None:
            _fail(console, f"{script}: {str(exc).splitlines()[0]}", 1)
        _fail(console, f"{script}: {_with_window(str(cause), exc.window)}", 1)
    for _, rows in selected_rows(result):
        for row in rows:
            sys.stdout.write(format_row(row) + "\n")


def _with_window(message: str, window: int | None) -> str:
    """A query's run-time error naming its window as the query operator's do (``statement 2, line
    3, window 1: ...``): the errors of one-table operators (a filter, a projection, an aggregate)
    name the statement only, the job's error the window."""
    head, colon, rest = message.partition(": ")
    if window is None or not colon or not head.startswith("statement ") or ", window " in head:
        return message
    return f"{head}, window {window}: {rest}"


def _explain_settings(args: tuple[str, ...]) -> dict[str, str]:
    """``--set KEY=VALUE`` (or ``--set=KEY=VALUE``) after the script, as ``gyreflow sql`` takes them."""
    values, at = {}, 0
    while at < len(args):
        arg = args[at]
        if arg == "--set" and at + 1 < len(args):
            text, at = args[at + 1], at + 2
        elif arg.startswith("--set="):
            text, at = arg[len("--set="):], at + 1
        else:
            raise click.BadParameter(f"a SQL script takes --set KEY=VALUE, got {arg}",
                                     param_hint="SCRIPT_ARGS")
        key, value = _setting(text)
        values[key] = value
    return values


def explain_sql(script: str, fmt: str, config_path: str | None, environment: str | None,
                args: tuple[str, ...] = ()) -> None:
    """``gyreflow explain SCRIPT.sql [--set KEY=VALUE ...]``: the PipelineGraph and ExecutionGraph of
    each statement that runs (INSERT, SELECT), as for a Python script; nothing runs and no data is
    read. A statement that does not parse or check: one ``error:`` line naming it, exit 2."""
    from rich.console import Console

    from gyreflow.api.config.loading import ConfigError, chosen_environment
    from gyreflow.api.config.session import RunSettings, using_settings
    from gyreflow.api.dsl.parsing import DslError
    from gyreflow.api.dsl.runner import run

    console = Console(stderr=True)
    try:
        with open(script, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        _fail(console, f"{script}: cannot read it: {exc.strerror}", 2)
    values = _explain_settings(args)
    try:  # the configuration is read here first: its errors are one line too
        environment = environment or chosen_environment(config_path) or "local"
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    settings = RunSettings(config_path=config_path, environment=environment, quiet=True,
                           explain_format=fmt, explained=[])
    name = os.path.splitext(os.path.basename(script))[0] or "sql"
    try:
        with using_settings(settings):  # execute() hands its plans to ``explained`` and runs nothing
            from gyreflow.api.language.environment import Environment

            run(Environment.from_config(), text, values, root=os.getcwd(), name=name)
    except DslError as exc:
        _fail(console, f"{script}: {exc}", 2, hint=exc.hint)
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)
    if not settings.explained:
        _fail(console, f"{script} has no INSERT or SELECT: nothing to explain", 1)
    from gyreflow.plan.explain import explain_all

    sys.stdout.write(explain_all(settings.explained, fmt) + "\n")
