"""GeaFlow's Hybrid DSL (its SQL side so far): scripts read by sqlglot and planned onto gyreflow."""

from gyreflow.api.dsl.parsing import DslError
from gyreflow.api.dsl.runner import build, prepare, run

__all__ = ["DslError", "build", "prepare", "run"]
