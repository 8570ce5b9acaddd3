"""Crash points: named moments at which a test can make the job process die as if by ``kill -9``.

Set ``GYREFLOW_CRASH_AT=POINT:WINDOW`` (several separated by commas) and the job process sends itself
SIGKILL when it reaches that point for that window. A commit may cover several windows at once, so
``before-commit``, ``after-commit`` and ``mid-publish`` fire at the first commit of that window or a
later one. Points:

- ``window-finished``  every tail reported the window; its snapshot may still be in flight
- ``snapshot-written`` the writer stored a task's snapshot of the window but has not acknowledged it
- ``before-commit``    the window's snapshots are durable; the meta commit was not sent
- ``after-commit``     the meta commit is durable; no sink has published the window
- ``mid-publish``      the first sink task published the window, the others not yet
- ``mid-window``       a source read the first batch of the window
- ``superstep``        (``superstep:WINDOW.STEP``) the driver is about to start superstep STEP of a
                       graph computation in the window (on the driver, local and Spark)

The local and the Spark executor both reach ``window-finished``, ``before-commit``, ``after-commit`` and
``mid-publish`` in the job's own process (on Spark, the driver). ``snapshot-written`` belongs to the
local executor's snapshot writer process, and ``mid-window`` to the process that reads the source (on
Spark, a Python worker: it kills the worker, not the job).

Every point fires once per run of the job. A point that kills the job process cannot fire twice; one
that kills a worker (``mid-window``) would fire again on every replay of its window after the
restart, so the first process that fires it leaves a marker (in ``gyreflow-<uid>/crash-points`` under
the temporary directory), named after the run (``GYREFLOW_CRASH_RUN``, set by the job process and
inherited by its workers), that the others see.

Unset (the normal case), every check is a constant-time no-op.
"""

from __future__ import annotations

import functools
import os
import signal

POINTS = ("window-finished", "snapshot-written", "before-commit", "after-commit", "mid-publish",
          "mid-window", "superstep")


def _parse(spec: str) -> tuple[frozenset[tuple[str, int]], str | None]:
    """The points ``spec`` arms, and what is wrong with it (None when nothing is)."""
    points = set()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, window = item.partition(":")
        if name == "superstep" and window.count(".") == 1 and window.replace(".", "").isdigit():
            at, step = window.split(".")
            points.add((name, (int(at), int(step))))
            continue
        if name not in POINTS or not window.isdigit():
            return frozenset(), (f"GYREFLOW_CRASH_AT item {item!r}: expected POINT:WINDOW with "
                                 f"POINT one of {', '.join(POINTS)} (superstep:WINDOW.STEP)")
        points.add((name, int(window)))
    return frozenset(points), None


_SPEC = os.environ.get("GYREFLOW_CRASH_AT", "").strip()
if _SPEC and "GYREFLOW_CRASH_RUN" not in os.environ:  # the job process: its workers inherit it
    import secrets  # secrets and tempfile: only for a run a test armed

    os.environ["GYREFLOW_CRASH_RUN"] = f"{os.getpid()}-{secrets.token_hex(4)}"

# Points the job's own process reaches (the driver): a misspelt variable is raised there (a job run
# in code; the command line refuses it before the job starts). A task or a snapshot writer that
# met it would turn it into a task failure, so there the variable arms nothing.
_JOB_PROCESS_POINTS = frozenset({"window-finished", "before-commit", "after-commit", "mid-publish",
                                 "superstep"})
_FROM_WINDOW_ON = frozenset({"before-commit", "after-commit", "mid-publish"})


@functools.cache
def _reading() -> tuple[frozenset[tuple[str, int]], str | None]:
    # Read on first use, not at import: importing this module never raises, so a typo cannot
    # break every module that imports it (the command line's error handling among them).
    return _parse(_SPEC)


def spec_problem() -> str | None:
    """What is wrong with ``GYREFLOW_CRASH_AT`` (None: unset or well formed): the command line
    asks before a job starts, and refuses a misspelt variable in one line (exit 2)."""
    return _reading()[1]


def _armed(name: str, window: int) -> bool:
    points, problem = _reading()
    if problem is not None and name in _JOB_PROCESS_POINTS:
        raise ValueError(problem)
    if name in _FROM_WINDOW_ON:
        return any(point == name and window >= armed for point, armed in points)
    return (name, window) in points


def crash_point(name: str, window: int | tuple[int, int], pid: int | None = None) -> None:
    """Die (or kill ``pid``, the job process) here if a test armed ``name`` for ``window``."""
    if _SPEC and _armed(name, window) and _first_time(name, window):
        os.kill(pid or os.getpid(), signal.SIGKILL)
        if pid is not None:
            os._exit(1)


def _first_time(name: str, window) -> bool:
    """Whether no process of this run fired ``name`` for ``window`` before (then this one does)."""
    import tempfile

    run = os.environ.get("GYREFLOW_CRASH_RUN")
    if run is None:
        return True
    folder = os.path.join(tempfile.gettempdir(), f"gyreflow-{os.geteuid()}", "crash-points")
    marker = os.path.join(folder, f"{run}-{name}-{window}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True
