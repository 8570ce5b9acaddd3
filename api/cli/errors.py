"""How the command line reports an error a user can fix: one line on stderr and an exit status."""

from __future__ import annotations

import errno
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from rich.console import Console


def one_line(message: str) -> str:
    """``message`` with its line breaks folded into spaces (a driver's or a user's exception text
    may hold several lines)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def fail(console: Console, message: str, code: int, *, hint: str | None = None,
         detail: str | None = None) -> None:
    """Print ``error: message`` on one line and exit with ``code`` (the statuses are listed in
    docs/recovery.md).

    The message is never wrapped at the terminal's width, so a log line or ``grep error:`` keeps it
    whole. ``hint`` (what to do next) follows on a line of its own; ``detail`` (a user function's
    own traceback) is printed as it is after that.
    """
    from rich.markup import escape

    # Messages quote user data (records, TOML sections): never read them as markup.
    console.print(f"[bold red]error:[/] {escape(one_line(message))}", markup=True, highlight=False,
                  soft_wrap=True)
    if hint:
        console.print(hint, markup=False, highlight=False, soft_wrap=True)
    if detail:
        console.print(detail.rstrip("\n"), markup=False, highlight=False, soft_wrap=True)
    sys.exit(code)


def fail_user_function(console: Console, error: BaseException, hint: str | None) -> None:
    """Exit 1 for a user function that raised: one ``error:`` line naming the operator, window, task
    and record, then ``hint``, then the function's own traceback."""
    head, _, user_traceback = str(error).partition("\n\nOriginal traceback:\n")
    fail(console, head, 1, hint=hint,
         detail=f"Original traceback:\n{user_traceback}" if user_traceback else None)


def script_location(error: BaseException) -> str:
    """``FILE:LINE: `` of the innermost line of the user's own code ``error`` passed through (the
    path relative to the working folder when inside it), or an empty string."""
    import os

    from gyreflow.runtime.user_code import user_location

    location = user_location(error)
    if location is None:
        return ""
    path, line = location
    if os.path.isabs(path) and not os.path.relpath(path).startswith(".."):
        path = os.path.relpath(path)
    return f"{path}:{line}: "


def fail_script(console: Console, error: BaseException) -> None:
    """Exit for an exception the script raised outside any user function of a job, in one
    ``error: FILE:LINE: Type: message`` line followed by the script's own frames only.

    - the user's own code raised (a SyntaxError, an ImportError, a NameError; Python's "Did you
      mean" hint stays in the line): exit 1, as Python exits for an uncaught exception;
    - gyreflow's public layer refused what the script asked (``with_parallelism(0)``,
      ``stream.mapp(...)``), or a module gyreflow imports is missing: exit 2, before any data
      moved;
    - anything else raised inside gyreflow is a fault of gyreflow: exit 6, with its whole traceback
      (click's and runpy's frames left out) for a report.
    """
    import traceback

    from gyreflow.runtime.user_code import (
        exception_line,
        fault_traceback,
        raised_inside_gyreflow,
        user_frames_text,
    )

    if isinstance(error, click.ClickException):
        raise error  # a usage error: click tells it (see GyreflowGroup)
    what = exception_line(error)
    where = script_location(error)
    frames = user_frames_text(error)
    if isinstance(error, SyntaxError):  # the line that does not parse, with its caret
        frames += "".join(line for line in traceback.format_exception_only(error)[:-1]
                          if not line.lstrip().startswith('File "'))
    raised_in = raised_inside_gyreflow(error)
    if isinstance(error, SyntaxError) or raised_in is None:
        fail(console, where + what, 1, detail=frames or None)
    if isinstance(error, ModuleNotFoundError):  # an optional dependency gyreflow imports late
        fail(console, where + what, 2, hint="Install the missing module and run again.",
             detail=frames or None)
    if raised_in == "api" and where and isinstance(error, _REFUSALS):
        fail(console, where + what, 2, detail=frames or None)
    fail(console, f"gyreflow failed: {what}", 6,
         hint="This is a fault of gyreflow: report it with the traceback below.",
         detail=fault_traceback(error))


# What gyreflow's public layer raises for an argument or a name the script got wrong.
_REFUSALS = (ValueError, TypeError, AttributeError, LookupError)


class GyreflowGroup(click.Group):
    """The ``gyreflow`` group: click's own usage errors read like every other error, ``error:
    message`` first (lower case, one line), then the usage and the help hint."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            status = super().main(*args, standalone_mode=False, **kwargs)
        except click.exceptions.UsageError as exc:
            _usage_error(exc)
        except click.ClickException as exc:
            click.echo(f"error: {_lower_first(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except OSError as exc:  # a closed pipe (``| head``), as click leaves it
            if exc.errno != errno.EPIPE:
                raise
            sys.stdout = _DevNull()
            sys.exit(1)
        sys.exit(status if isinstance(status, int) else 0)


def _usage_error(exc: click.exceptions.UsageError) -> None:
    if type(exc).__name__ == "NoArgsIsHelpError":  # a command given nothing: its help, as click
        exc.show()
        sys.exit(exc.exit_code)
    click.echo(f"error: {_lower_first(one_line(exc.format_message()))}", err=True)
    if exc.ctx is not None:
        click.echo(exc.ctx.get_usage(), err=True)
        if exc.ctx.command.get_help_option(exc.ctx) is not None:
            click.echo(f"Try '{exc.ctx.command_path} {exc.ctx.help_option_names[0]}' for help.",
                       err=True)
    sys.exit(exc.exit_code)


def _lower_first(message: str) -> str:
    """``No such option`` -> ``no such option``; a word in capitals (``SCRIPT``) stays."""
    if len(message) > 1 and message[0].isupper() and not message[1].isupper():
        return message[0].lower() + message[1:]
    return message


class _DevNull:
    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass
