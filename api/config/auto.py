"""The ``auto`` values of ``environment.parallelism`` and ``environment.workers``, resolved to numbers."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from gyreflow.api.config.loading import AUTO, Config

_LOCAL_MASTER = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[(\d+),\s*(\d+),\s*\d+\]$")


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def master_cores(master: str, cores: int | None = None) -> int | None:
    """The task slots a local Spark master has, from its URL alone; None for a cluster's URL
    (only its session knows).

    >>> master_cores("local[3]"), master_cores("local[*]", cores=8), master_cores("local")
    (3, 8, 1)
    >>> master_cores("local-cluster[2,3,1024]"), master_cores("spark://host:7077")
    (6, None)
    """
    text = master.strip()
    match = _LOCAL_MASTER.match(text)
    if match is not None:
        count = match.group(1)
        if count is None:
            return 1
        return (cores or machine_cores()) if count == "*" else max(1, int(count))
    match = _LOCAL_CLUSTER.match(text)
    if match is not None:
        return max(1, int(match.group(1)) * int(match.group(2)))
    return None


def resolve(config: Config, *, in_process: bool = False, cores: int | None = None,
            spark_parallelism: Callable[[], int] | None = None) -> Config:
    """``config`` with ``auto`` parallelism and workers replaced by numbers (the names that were
    ``auto`` are kept in ``Config.automatic``).

    On Spark, auto parallelism is the session's default parallelism (``spark_parallelism()``, its
    cores) and workers are 1 (Spark's executors run the tasks). On the local environment, auto
    parallelism is ``environment.workers`` when that is a number (no worker stays idle), else
    ``local_workers(cores)``: a core for the driver and one worker process for each other core
    (parallelism above 1 in one process is slower than 1), so that on 2 cores or fewer the job
    runs in this process at parallelism 1. ``in_process`` (``Environment.local()``) keeps an auto
    job in this process at parallelism 1. The parallelism never exceeds ``state.max_parallelism``.

    >>> auto = Config.load(environ={}, overrides={"environment.type": "local"})
    >>> resolved = resolve(auto, cores=4)
    >>> resolved["environment.parallelism"], resolved["environment.workers"], resolved.automatic
    (3, 3, ('environment.parallelism', 'environment.workers'))
    >>> two = resolve(auto, cores=2)
    >>> two["environment.parallelism"], two["environment.workers"]
    (1, 1)
    >>> workers = auto.with_overrides({"environment.workers": 3})
    >>> resolve(workers, cores=4)["environment.parallelism"]
    3
    >>> local = resolve(auto, in_process=True, cores=4)
    >>> local["environment.parallelism"], local["environment.workers"]
    (1, 1)
    """
    parallelism = config["environment.parallelism"]
    workers = config["environment.workers"]
    automatic = tuple(name for name, value in (("environment.parallelism", parallelism),
                                               ("environment.workers", workers)) if value == AUTO)
    if not automatic:
        return config
    bound = config["state.max_parallelism"]
    if config["environment.type"] == "spark":
        if parallelism == AUTO:
            parallelism = min(bound, max(1, spark_parallelism() if spark_parallelism else 1))
        workers = 1 if workers == AUTO else workers
    else:
        chosen = parallelism != AUTO
        if not chosen:
            if workers != AUTO:
                parallelism = workers
            else:
                parallelism = 1 if in_process else local_workers(cores or machine_cores())
            parallelism = min(bound, parallelism)
        if workers == AUTO:
            workers = parallelism if not (chosen or in_process) else 1
    values = {**config.values, "environment.parallelism": parallelism,
              "environment.workers": workers}
    return config.resolved(values, automatic)


def local_workers(cores: int) -> int:
    """The worker processes (and parallelism) ``auto`` takes on a machine of ``cores`` cores: one
    core is the driver's. Every window waits on the driver's process (its scheduler round, the
    commit, the publish of each sink's files) and the driver on the workers, so a worker process
    that shares the driver's core delays every window; on 2 cores the main job
    (``examples/word_count.py``, 100 windows) took 1.0 s in one process and 1.25 s in 2 worker
    processes, the event-time example 2.0 s and 2.7 s (docs/benchmarks.md, "The main job: where a
    window's time goes"). 1 means this process.

    >>> local_workers(1), local_workers(2), local_workers(3), local_workers(8)
    (1, 1, 2, 7)
    """
    return max(1, cores - 1)


def is_automatic(config, name: str = "environment.parallelism") -> bool:
    """Whether ``name`` was ``auto`` in the configuration ``config`` was resolved from."""
    return name in getattr(config, "automatic", ())
