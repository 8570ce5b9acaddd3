"""Shared fixtures: every pipeline test runs in every environment through ``make_env``."""

from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _postgres import POSTGRES_SECRET
from _spark_master import ON_CLUSTER, SPARK_MASTER, cluster_state
from hypothesis import settings

from gyreflow.api import Environment

# Test modules sit in folders by the part they guard (tests/api/cli, tests/state, ...), the shared
# helpers (tests/_*.py, this file) here above them. Modules import each other's helpers by name
# (``from _recovery_data import word_count_oracle``): every test folder is on the import path, so
# that works whichever module pytest (or a parallel worker) collects first.
TESTS = Path(__file__).resolve().parent
for _folder, _subfolders, _files in os.walk(TESTS):
    _subfolders[:] = sorted(name for name in _subfolders if name not in ("data", "golden", "__pycache__"))
    if _folder != str(TESTS) and any(name.startswith("test_") for name in _files):
        sys.path.append(_folder)

# "workers": the local environment with its tasks in two long-lived worker processes
# (environment.workers = 2, runtime/workers/).
ENVIRONMENTS = ["local", "workers", "spark"]

# Property tests check behaviour, not speed: parallel workers on a busy machine stretch single
# examples past Hypothesis' 200 ms deadline (timings belong in benchmarks/).
settings.register_profile("gyreflow", deadline=None)
settings.load_profile("gyreflow")

# The suite starts hundreds of short-lived Spark driver JVMs (one per job run in a process of its
# own). Compiling with C1 only and the serial collector cost them about 40% less CPU (a small
# word count: 14.6 s of busy CPU per run -> 9.1 s), and the suite is CPU-bound. Subprocesses inherit
# it; set PYSPARK_SUBMIT_ARGS yourself to run with other options.
# scripts/test.sh also maps the classes those JVMs load from a class-data archive it made once
# (scripts/spark_class_archive.py): about 40% less CPU per start again.
# On the test cluster every application starts two executor JVMs of its own as well: the same
# options, without the archive (their class path is the worker's).
EXECUTOR_JVM_OPTIONS = os.environ.get("GYREFLOW_TEST_SPARK_DRIVER_OPTIONS",
                                      "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
DRIVER_JVM_OPTIONS = EXECUTOR_JVM_OPTIONS
_ARCHIVE = os.environ.get("GYREFLOW_TEST_SPARK_CLASS_ARCHIVE")
if _ARCHIVE and os.path.exists(_ARCHIVE):
    DRIVER_JVM_OPTIONS += f" -XX:SharedArchiveFile={_ARCHIVE} -Xlog:cds=off -Xlog:cds+dynamic=off"
# A Spark session a test makes itself (a DataFrame oracle) may be the first of the process, and
# every later Spark job reuses it: its Python workers must be this interpreter, as with gyreflow's.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# No test reads Spark's web UI: without it a driver starts about 1 CPU-second sooner.
os.environ.setdefault("PYSPARK_SUBMIT_ARGS",
                      f"--driver-java-options '{DRIVER_JVM_OPTIONS}' "
                      f"--conf 'spark.executor.extraJavaOptions={EXECUTOR_JVM_OPTIONS}' "
                      "--conf spark.ui.enabled=false pyspark-shell")


@pytest.fixture(params=ENVIRONMENTS)
def environment_type(request) -> str:
    """The environment a pipeline test runs in (each test runs once per environment)."""
    return request.param


@pytest.fixture
def make_env(environment_type, tmp_path):
    """Build an environment of the current type, e.g. ``make_env(2, **{"runtime.batch_size": 3})``."""

    def make(parallelism: int = 1, **config) -> Environment:
        overrides = {
            "environment.type": "local" if environment_type == "workers" else environment_type,
            "environment.parallelism": parallelism,
            "progress.enabled": False,
            "state.path": str(tmp_path / "state"),
        }
        if environment_type == "spark":
            overrides["spark.master"] = SPARK_MASTER  # one session serves the whole test run
        elif environment_type == "workers":
            overrides["environment.workers"] = 2
        overrides.update(config)
        if environment_type == "spark" and ON_CLUSTER:
            safe = cluster_state(overrides, tmp_path)
            if safe is None:
                pytest.skip("a cluster refuses this state (tests/spark/test_spark_cluster.py)")
            overrides = safe
        return Environment.from_config(None, overrides)

    return make


@pytest.fixture(scope="session")
def spark():
    """The process's SparkSession, for DataFrame oracles, shared with gyreflow's Spark environment.

    gyreflow's Spark environment starts the session first when none is running, so that it is the
    one gyreflow would create itself (its Python workers see the driver's import path): the Spark
    cases that run after an oracle in the same process get the session they expect, whatever the
    order the parallel workers take the tests in.
    """
    from pyspark.sql import SparkSession

    Environment.spark(master=SPARK_MASTER, progress=False,
                      config=cluster_state({}, Path(tempfile.mkdtemp()))).session()
    return SparkSession.builder.master(SPARK_MASTER).getOrCreate()


REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """A real PostgreSQL server: the one the test command started (GYREFLOW_TEST_POSTGRES_URL), or
    a throwaway one started here with scripts/postgres.sh."""
    url = os.environ.get("GYREFLOW_TEST_POSTGRES_URL")
    if url:
        yield url
        return
    yield from _throwaway_postgres()


def _throwaway_postgres():
    """Start a PostgreSQL server with scripts/postgres.sh, yield its URL, then stop it (not in
    ``postgres_url`` itself: the fixture starts no process when the test command started one,
    and its tests stay in-process for scripts/test.sh --fast)."""
    # In the temporary directory itself: PostgreSQL runs as the postgres user, who cannot enter
    # pytest's root-only temporary folders.
    directory = Path(tempfile.mkdtemp(prefix="gyreflow-test-pg-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    script = REPO / "scripts" / "postgres.sh"
    out = subprocess.run(["bash", str(script), "start", str(directory), str(port)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.fail(f"could not start PostgreSQL for the JDBC tests:\n{out.stderr}")
    yield out.stdout.strip().split("=", 1)[1]
    subprocess.run(["bash", str(script), "stop", str(directory)], check=False)
    shutil.rmtree(directory, ignore_errors=True)


BACKENDS = ["memory", "rocksdb", "sqlite", "postgresql", "checkpoint-dir", "checkpoint-s3"]


@pytest.fixture(scope="session")
def object_store():
    """An S3-compatible server on 127.0.0.1 (moto), for checkpoints in an object store."""
    from _object_store import ObjectStoreServer

    server = ObjectStoreServer()
    yield server
    server.stop()


@pytest.fixture(params=BACKENDS)
def backend_overrides(request, tmp_path) -> dict:
    """Config overrides selecting each snapshot backend in turn (jdbc on SQLite and on PostgreSQL)."""
    name = request.param
    overrides = {"state.path": str(tmp_path / "state")}
    if name == "memory":
        overrides["state.backend"] = "memory"
    elif name == "rocksdb":
        overrides["state.backend"] = "rocksdb"
    elif name == "sqlite":
        overrides["state.backend"] = "jdbc"
    elif name == "checkpoint-dir":  # rocksdb with its snapshots in a shared directory
        overrides["state.backend"] = "rocksdb"
        overrides["state.checkpoint_url"] = str(tmp_path / "checkpoints")
    elif name == "checkpoint-s3":  # rocksdb with its snapshots in an object store
        overrides.update(request.getfixturevalue("object_store").new_location())
    else:
        overrides["state.backend"] = "jdbc"
        overrides["state.url"] = request.getfixturevalue("postgres_url")
        overrides["state.secret"] = POSTGRES_SECRET
    return overrides


class CallLog:
    """Records calls in a file, so calls made in Spark worker processes are seen too."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def append(self, call) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(list(call)) + "\n")

    def entries(self) -> list[tuple]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as handle:
            return [tuple(json.loads(line)) for line in handle]


@pytest.fixture
def call_log(tmp_path) -> CallLog:
    """A call recorder that works in every environment (user functions may run in other processes)."""
    return CallLog(tmp_path / "calls.jsonl")


def pytest_configure(config) -> None:
    if config.getoption("dist", None) == "loadgroup" and not hasattr(config, "workerinput"):
        _check_that_groups_are_kept()
    config.addinivalue_line(
        "markers", "spark_subset(keep): on Spark, run only the parameter sets for which "
        "keep(params) is true (each one is a Spark job; the local environment runs them all)")
    config.addinivalue_line(
        "markers", "spark: runs a Spark job (set on every Spark case and every module in tests/spark)")
    config.addinivalue_line(
        "markers", "processes: it starts processes of its own (gyreflow run, a killed job, worker "
        "processes, a browser); scripts/test.sh --fast leaves these and the Spark cases out")


_STARTS_PROCESSES: dict[str, bool] = {}
_PROCESS_WORDS = ("subprocess", "Popen", "run_job", "kill_at")
# Fixtures that start a Spark JVM; a fixture that asks for one of them is found through the test's
# fixture closure.
SPARK_FIXTURES = frozenset({"spark"})


def _starts_processes(item) -> bool:
    """Whether the test's module starts processes (it uses subprocess, or runs jobs through
    tests/recovery/_recovery_jobs.py's helpers), read once per module, or one of its fixtures does."""
    path = str(item.path)
    if path not in _STARTS_PROCESSES:
        text = item.path.read_text(encoding="utf-8")
        _STARTS_PROCESSES[path] = any(name in text for name in _PROCESS_WORDS)
    return (_STARTS_PROCESSES[path]
            or any(_fixture_starts_processes(fixture.func) for fixture in _fixtures(item))
            or _calls_helpers_that_start_processes(getattr(item, "function", None), set()))


def _calls_helpers_that_start_processes(function, seen: set) -> bool:
    """Whether a test calls a function of another module that starts processes, directly or
    through the functions it calls (``from test_state_verification import run``): the module's own
    text does not show those."""
    code = getattr(function, "__code__", None)
    if code is None or function in seen:
        return False
    seen.add(function)
    names = set(code.co_names)
    names.update(name for const in code.co_consts if inspect.iscode(const) for name in const.co_names)
    for name in names:
        called = function.__globals__.get(name)
        if (not inspect.isfunction(called) or called.__module__ == "conftest"
                or not called.__code__.co_filename.startswith(str(TESTS))):
            continue  # only the suite's own helpers: the engine's code is what the tests run
        if called.__module__ != function.__module__ and _fixture_starts_processes(called):
            return True
        if _calls_helpers_that_start_processes(called, seen):
            return True
    return False


def _fixtures(item):
    """Every fixture definition the test uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)
    for definitions in (info.name2fixturedefs.values() if info is not None else ()):
        yield from definitions


@functools.cache
def _fixture_starts_processes(function) -> bool:
    """Whether a fixture's own code starts processes (the words of ``_starts_processes``), so
    that a test using a fixture from another module is marked as that module's tests are."""
    try:
        text = inspect.getsource(function)
    except (OSError, TypeError):  # a fixture without source (a plugin's): starts none of ours
        return False
    return any(name in text for name in _PROCESS_WORDS)


def _runs_spark(item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return (item.path.name.startswith("test_spark") or item.path.parent.name == "spark"
            or "spark" in (params.get("environment_type"), params.get("environment"))
            or not SPARK_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


def _runs_workers(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("environment_type") == "workers"


# Parameters that reach the S3 server (``object_store``, a process of its own) through
# ``request.getfixturevalue``, which the fixture closure does not show.
OBJECT_STORE_PARAMS = frozenset({"checkpoint-s3", "s3"})


def _reaches_object_store(item) -> bool:
    callspec = getattr(item, "callspec", None)
    params = callspec.params.values() if callspec is not None else ()
    return ("object_store" in getattr(item, "fixturenames", ())
            or any(type(value) is str and value in OBJECT_STORE_PARAMS for value in params))


# Modules whose tests take longest (Spark jobs in processes of their own, groups that one worker
# runs in a row): started first, so that parallel workers do not end waiting on one of them.
LONGEST_FIRST = ("test_spark_recovery.py", "test_spark_graph_recovery.py", "test_spark_cluster.py",
                 "test_graceful_stop.py", "test_graph_algorithms.py", "test_bad_data.py",
                 "test_cli.py", "test_event_time.py")


def pytest_collection_modifyitems(config, items) -> None:
    """Apply ``spark_subset`` (the Spark cases it leaves out are reported as deselected), then put
    the longest modules first."""
    kept, dropped = [], []
    for item in items:
        if _runs_spark(item):
            item.add_marker(pytest.mark.spark)
        if _starts_processes(item) or _runs_workers(item) or _reaches_object_store(item):
            item.add_marker(pytest.mark.processes)
        marker = item.get_closest_marker("spark_subset")
        callspec = getattr(item, "callspec", None)
        if (marker is not None and callspec is not None
                and callspec.params.get("environment_type") == "spark"
                and not marker.args[0](callspec.params)):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items[:] = sorted(kept, key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(autouse=True)
def _spark_only_when_marked(request):
    """Fail a test that starts a Spark JVM without the ``spark`` mark (scripts/test.sh --fast
    would start one): the marks come from the test's module, parameters and fixtures (see
    ``pytest_collection_modifyitems``), and this catches what they do not see."""
    if request.node.get_closest_marker("spark") is not None:
        yield
        return
    before = _spark_gateway_running()
    yield
    if not before and _spark_gateway_running():
        pytest.fail("this test started a Spark JVM without @pytest.mark.spark: mark it (or use "
                    "the spark fixture, which marks it), so that scripts/test.sh --fast leaves "
                    "it out", pytrace=False)


def _spark_gateway_running() -> bool:
    """Whether this process has started Spark's JVM (only asked when pyspark is imported)."""
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None)
    return getattr(context, "_gateway", None) is not None


_GROUPS_IGNORED = ("--dist loadgroup ignores xdist_group marks with this pytest and pytest-xdist "
                   "(pytest-xdist issue 1386): install the versions in requirements/test.txt")


def _check_that_groups_are_kept() -> None:
    """pytest-xdist groups a test by writing ``@group`` into its node's ``_nodeid``, which the node
    id must still be read from (pytest 9.2 reads a structured id instead)."""
    import inspect

    from _pytest.nodes import Node

    try:
        source = inspect.getsource(Node.nodeid.fget)
    except (OSError, TypeError):  # pytest installed without its sources: the workers check
        return
    if "_nodeid" not in source:
        raise pytest.UsageError(_GROUPS_IGNORED)


def pytest_collection_finish(session) -> None:
    """On a parallel worker, refuse to run when ``--dist loadgroup`` would ignore ``xdist_group``:
    each worker would then start its own Spark cluster and its own reference runs, and the groups'
    tests would race on what they share. pytest-xdist marks a grouped test by a ``@group`` suffix
    on its node id, which some pytest versions do not take (pytest-xdist issue 1386)."""
    if not getattr(session.config.option, "loadgroup", False):  # set on parallel workers only
        return
    lost = [item.nodeid for item in session.items
            if item.get_closest_marker("xdist_group") is not None and "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(f"{_GROUPS_IGNORED}; e.g. {lost[0]}")
