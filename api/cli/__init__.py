"""The ``gyreflow`` command line: run, explain, snapshots, config, graph and control.

``main`` is imported when it is asked for, so that a module of this package (its error reporting,
say) costs nothing more to import.
"""

import typing as _typing

if _typing.TYPE_CHECKING:
    from gyreflow.api.cli.commands import main

__all__ = ["main"]


def __getattr__(name: str) -> object:
    if name == "main":
        from gyreflow.api.cli.commands import main

        return main
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)


def __dir__() -> list[str]:
    return sorted({name for name in globals() if name.startswith("__")} | set(__all__))
