"""How the command line reports an error a user can fix: one line on stderr and an exit status."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

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
