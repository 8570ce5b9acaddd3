"""The ``gyreflow`` command line: run, explain, snapshots, config, graph and control.

``main`` is imported when it is asked for, so that a module of this package (its error reporting,
say) costs nothing more to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gyreflow.api.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from gyreflow.api.cli.commands import main

        return main
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
