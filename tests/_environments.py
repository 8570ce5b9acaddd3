"""What a test environment means for a gyreflow process: its variables and its command-line flags.

The ``environment_type`` fixture (tests/conftest.py) is "local", "workers" or "spark"; "workers" is
the local environment with its tasks in two worker processes (environment.workers = 2).
"""

from __future__ import annotations

WORKERS = 2  # the worker processes of the "workers" test environment


def environment_variables(environment_type: str) -> dict[str, str]:
    """The GYREFLOW_* variables that select ``environment_type`` for a job."""
    if environment_type == "workers":
        return {"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_ENVIRONMENT__WORKERS": str(WORKERS)}
    if environment_type == "local":  # in this process (environment.workers = auto would fork)
        return {"GYREFLOW_ENVIRONMENT__TYPE": "local", "GYREFLOW_ENVIRONMENT__WORKERS": "1"}
    return {"GYREFLOW_ENVIRONMENT__TYPE": environment_type}


def environment_flags(environment_type: str) -> list[str]:
    """The ``gyreflow run``/``gyreflow graph`` flags that select ``environment_type``."""
    if environment_type == "workers":
        return ["--env", "local", "--workers", str(WORKERS)]
    if environment_type == "local":
        return ["--env", "local", "--workers", "1"]
    return ["--env", environment_type]
