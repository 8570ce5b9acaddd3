"""How the command line reports an error a user can fix: one line on stderr and an exit status."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape


def fail(console: Console, message: str, code: int) -> None:
    """Print ``error: message`` and exit with ``code`` (the statuses are listed in the README).

    The message is never wrapped at the terminal's width (a log line or ``grep error:`` keeps it
    whole); a hint after a line break in ``message`` stands on a line of its own.
    """
    # Messages quote user data (records, TOML sections): never read them as markup.
    console.print(f"[bold red]error:[/] {escape(message)}", markup=True, highlight=False,
                  soft_wrap=True)
    sys.exit(code)
