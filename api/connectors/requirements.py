"""What a plan's sources and sinks need installed, checked before any data moves.

A source or sink names the Python modules it needs with ``requires()`` (``DirectorySource`` with
``columnar=True`` or Parquet: pyarrow; a source of your own may declare its client library). A
job whose plan needs a module that cannot be imported stops before window 1 with one line naming
the operator, the module and how to install it, instead of failing in window 1 with a traceback.

>>> try:
...     check_requirements([("lines", Needs(Requirement("nomod", "pip install nomod")))])
... except ConfigError as exc:
...     print(exc)
operator 'lines' (Needs) needs the Python module nomod, which is not installed: pip install nomod
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import attrs

from gyreflow.api.config.loading import ConfigError


@attrs.frozen
class Requirement:
    """A module an operator imports while it runs, and how to install it."""

    module: str
    install: str


# A dependency of gyreflow itself: missing only from an installation that skipped dependencies.
PYARROW = Requirement("pyarrow", "pip install 'pyarrow>=14' (it comes with gyreflow: an "
                                 "installation with --no-deps leaves it out)")


@attrs.frozen
class Needs:
    """A stand-in source that needs ``requirement`` (for examples and tests)."""

    requirement: Requirement

    def requires(self) -> tuple[Requirement, ...]:
        return (self.requirement,)

    def describe(self) -> str:
        return "Needs"


def requirements_of(graph) -> list[tuple[str, object]]:
    """``(operator name, source or sink)`` for every source and sink of a ``PipelineGraph``."""
    found = []
    for vertex in graph.vertices:
        for field in ("source", "sink"):
            connector = getattr(vertex.spec, field, None)
            if connector is not None:
                found.append((vertex.name, connector))
    return found


def check_requirements(connectors: Iterable[tuple[str, object]]) -> None:
    """Raise ``ConfigError`` naming the first operator whose source or sink ``requires()`` a
    module that cannot be imported (each module is imported once)."""
    importable: dict[str, bool] = {}
    for name, connector in connectors:
        requires = getattr(connector, "requires", None)
        for requirement in requires() if callable(requires) else ():
            if requirement.module not in importable:
                importable[requirement.module] = _imports(requirement.module)
            if not importable[requirement.module]:
                describe = getattr(connector, "describe", None)
                what = describe() if callable(describe) else type(connector).__name__
                msg = (f"operator {name!r} ({what}) needs the Python module {requirement.module}, "
                       f"which is not installed: {requirement.install}")
                raise ConfigError(msg)


def _imports(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True
