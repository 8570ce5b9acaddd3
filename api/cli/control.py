"""``gyreflow control``: commands to a running job, applied at one window boundary on every task.

Exit statuses: 0 done; 1 the job refused the command (the line says why); 2 bad usage, no such
job, or several jobs and no ``--job``; 3 the job could not be reached.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from gyreflow.api.cli.errors import fail as _fail

if TYPE_CHECKING:
    from rich.console import Console

_JOB = click.option("--job", "job_name", default=None, metavar="NAME|PID",
                    help="The job (its name, part of it, or its pid); needed when several run.")
_CONFIG = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                       help="TOML config file (for control.directory).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print the job's answer as JSON.")


def _parsed(value: str):
    from gyreflow.runtime.control import parse_value

    return parse_value(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class _NumbersAsArguments(click.Command):
    """A command whose arguments may be negative numbers (``rescale quiet -1``, ``set op rate -0.5``):
    click reads ``-1`` as an unknown option, so that a negative N would never reach the job's own
    range check as 0 and 129 do. Any other unknown option is still refused, as click refuses it."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["context_settings"] = {**kwargs.get("context_settings", {}),
                                      "ignore_unknown_options": True}
        super().__init__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        import difflib

        options = {name: param for param in self.get_params(ctx) if isinstance(param, click.Option)
                   for name in (*param.opts, *param.secondary_opts)}
        tokens = iter(args)
        for token in tokens:
            name = token.partition("=")[0]
            if token == "--":
                break
            if name in options:
                if not options[name].is_flag and "=" not in token:
                    next(tokens, None)  # the option's value, whatever it looks like
            elif token.startswith("-") and len(token) > 1 and not _is_number(token):
                close = difflib.get_close_matches(name, [n for n in options if n.startswith("--")],
                                                  n=1)
                raise click.NoSuchOption(name, possibilities=close, ctx=ctx)
        return super().parse_args(ctx, args)


@click.group()
def control() -> None:
    """Send commands to a running job (see docs/control.md)."""


def _directory(console: Console, config_path: str | None) -> str:
    from gyreflow.api.config.loading import Config, ConfigError
    from gyreflow.api.service.control import control_directory

    try:
        return control_directory(Config.load(config_path))
    except ConfigError as exc:
        _fail(console, f"configuration: {exc}", 2)


def _ask(config_path: str | None, job_name: str | None, command: dict, as_json: bool) -> dict:
    from rich.console import Console

    from gyreflow.api.service.control import ControlError, find_job, send

    console = Console(stderr=True)
    directory = _directory(console, config_path)
    try:
        job = find_job(directory, job_name)
    except ControlError as exc:
        _fail(console, str(exc), 2)
    missing = [key for key in ("job", "host", "port", "token") if key not in job]
    if missing:  # not a file a job wrote (they are written whole, then renamed into place)
        _fail(console, f"control file {job.get('file')} has no {', '.join(missing)}: it was not "
                       "written by a gyreflow job; remove it", 3)
    try:
        answer = send(job, command)
    except ControlError as exc:
        _fail(console, f"{exc}; check that the job still runs: its control file "
                       f"{job.get('file')} may be left from a job that ended", 3)
    if not isinstance(answer, dict):
        _fail(console, f"job {job['job']!r} (pid {job['pid']}) answered with something other than "
                       f"a JSON object: is port {job['port']} its control endpoint?", 3)
    if as_json:
        sys.stdout.write(json.dumps(answer, indent=2, sort_keys=True) + "\n")
    if not answer.get("ok"):
        error = str(answer.get("error", "refused"))
        named = f"job {job['job']!r}"
        _fail(console, error if error.startswith(named) else f"{named}: {error}", 1)
    return answer


@control.command("list")
@_CONFIG
def list_jobs(config_path: str | None) -> None:
    """The running jobs that accept commands."""
    from rich.console import Console

    from gyreflow.api.service.control import running_jobs

    directory = _directory(Console(stderr=True), config_path)
    jobs = running_jobs(directory)
    if not jobs:
        click.echo(f"no running jobs (control files in {directory})")
    for job in jobs:
        click.echo(f"{job['job']}\tpid {job['pid']}\tport {job.get('port', '?')}")


@control.command()
@_JOB
@_CONFIG
@_JSON
def status(job_name: str | None, config_path: str | None, as_json: bool) -> None:
    """Whether the job runs, is paused or restarts (the attempt and the seconds left before it), its
    last completed window, its worker processes and its parameters."""
    answer = _ask(config_path, job_name, {"command": "status"}, as_json)
    if not as_json:
        state = answer["state"]
        if answer.get("attempt") is not None:
            state += (f" (attempt {answer['attempt']} of {answer['attempts']}, in "
                      f"{answer['seconds_left']:g} s)")
        workers = answer.get("workers")
        pids = answer.get("pids") or []
        where = ""
        if workers:
            where = f", {workers} worker process{'es' if workers > 1 else ''}"
            if pids:
                where += f" (pid {', '.join(map(str, pids))})"
        click.echo(f"{answer['job']}: {state}, last completed window "
                   f"{answer['last_completed']}, launched {answer['launched']}{where}")
        for operator, params in sorted(answer["parameters"].items()):
            for name, value in sorted(params.items()):
                click.echo(f"  {operator}.{name} = {json.dumps(value)}")


@control.command("set", cls=_NumbersAsArguments)
@click.argument("operator")
@click.argument("name")
@click.argument("value")
@_JOB
@_CONFIG
@_JSON
def set_parameter(operator: str, name: str, value: str, job_name: str | None,
                  config_path: str | None, as_json: bool) -> None:
    """Set parameter NAME of OPERATOR to VALUE (JSON when it parses: 5, 0.5, true, "text")."""
    answer = _ask(config_path, job_name, {"command": "set", "operator": operator, "name": name,
                                          "value": _parsed(value)}, as_json)
    if not as_json:
        click.echo(answer["message"])


@control.command()
@_JOB
@_CONFIG
@_JSON
def sample(job_name: str | None, config_path: str | None, as_json: bool) -> None:
    """A monitoring sample from every task, taken as they start the next window."""
    answer = _ask(config_path, job_name, {"command": "sample"}, as_json)
    if not as_json:
        click.echo(f"window {answer['window']}")
        click.echo("task\tindex\trecords in\trecords out\tstate keys\tqueued")
        for t in sorted(answer["tasks"], key=lambda t: (t["task"], t["index"])):
            click.echo(f"{t['task']}\t{t['index']}\t{t['records_in']}\t{t['records_out']}\t"
                       f"{t['state_keys']}\t{t['queued']}")


@control.command()
@_JOB
@_CONFIG
@_JSON
def pause(job_name: str | None, config_path: str | None, as_json: bool) -> None:
    """Stop starting new windows (the windows in flight complete)."""
    answer = _ask(config_path, job_name, {"command": "pause"}, as_json)
    if not as_json:
        click.echo(answer["message"])


@control.command("resume")
@_JOB
@_CONFIG
@_JSON
def resume_sources(job_name: str | None, config_path: str | None, as_json: bool) -> None:
    """Start windows again after a pause."""
    answer = _ask(config_path, job_name, {"command": "resume"}, as_json)
    if not as_json:
        click.echo(answer["message"])


@control.command(cls=_NumbersAsArguments)
@click.argument("target", nargs=-1, required=True, metavar="[OPERATOR] N")
@_JOB
@_CONFIG
@_JSON
def rescale(target: tuple[str, ...], job_name: str | None, config_path: str | None,
            as_json: bool) -> None:
    """From the next window boundary, run OPERATOR (and the operators chained to it) with N tasks,
    its keyed state moving by key group; or, without OPERATOR, run the job's tasks in N worker
    processes (a job on worker processes: environment.workers > 1 or Spark's workers mode), each
    task's state moving to the worker that takes it."""
    if len(target) > 2:
        msg = "give N (worker processes) or OPERATOR N (tasks of an operator)"
        raise click.UsageError(msg)
    operator, count = (None, target[0]) if len(target) == 1 else target
    try:
        parallelism = int(count)
    except ValueError:
        msg = f"expected an integer N (tasks or worker processes), got {count!r}"
        raise click.UsageError(msg) from None
    answer = _ask(config_path, job_name, {"command": "rescale", "operator": operator,
                                          "parallelism": parallelism}, as_json)
    if not as_json:
        click.echo(answer["message"])


@control.command()
@click.argument("operator", required=False)
@_JOB
@_CONFIG
@_JSON
def rebalance(operator: str | None, job_name: str | None, config_path: str | None,
              as_json: bool) -> None:
    """From the next window boundary, move key groups of OPERATOR (without it: of every keyed
    operator with several tasks) from its busiest task to its least loaded one, by the load
    measured so far, while that evens them out; the state moves by key group. Nothing moves when
    that would not lower the busiest task's load by a tenth."""
    answer = _ask(config_path, job_name, {"command": "rebalance", "operator": operator}, as_json)
    if not as_json:
        click.echo(answer["message"])
