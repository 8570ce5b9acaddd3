"""The SparkSession gyreflow's Spark environment runs on: created once from ``[spark]`` config."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable

_IMPORT_PATH_SHARED: list[bool] = []  # set once this process starts Spark's JVM itself


def workers_import_the_driver_path() -> bool:
    """Whether Spark's Python workers can import what this driver imports from its own folders:
    only when gyreflow started the JVM (after putting its import path in ``PYTHONPATH``). A session
    the application, a notebook or ``spark-submit`` started first runs workers without it."""
    return bool(_IMPORT_PATH_SHARED)


def session_master(config) -> tuple[str, bool]:
    """The master URL the session runs with, known before it starts (no data moves, no context
    starts), and whether this driver has yet to connect to it itself (so that trying its address
    tells whether anything answers). The first of:

    - a SparkContext already running in this process (a notebook's, the application's): its
      master, connected already. When it and ``[spark] master`` are both local, ``[spark] master``
      is kept: the number in its brackets is the slot count gyreflow plans with;
    - ``spark.master`` in ``[spark] conf``: it is set on the session last;
    - under ``spark-submit`` (which sets PYSPARK_GATEWAY_PORT): the master of the configuration it
      submitted, its ``--master`` (Spark's own ``local[*]`` without one) over ``[spark] master``.
      With ``--deploy-mode cluster`` this driver runs inside the cluster, where the submitter's
      address may not be the one it connects to: not to be tried;
    - else ``[spark] master``.
    """
    configured = config["spark.master"]
    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        if active is not None:
            both_local = active.master.startswith("local") and configured.startswith("local")
            return (configured if both_local else active.master), False
    conf = dict(config["spark.conf"])
    if "spark.master" in conf:
        return conf["spark.master"], "PYSPARK_GATEWAY_PORT" not in os.environ \
            or _submitted("spark.submit.deployMode") != "cluster"
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return (_submitted("spark.master") or configured,
                _submitted("spark.submit.deployMode") != "cluster")
    return configured, True


def _submitted(key: str) -> str | None:
    """``key`` of the configuration spark-submit started this application with (its JVM's system
    properties), read through the JVM it started: no SparkContext starts."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()
    return SparkConf().get(key, None)


def spark_session(config, announce: bool = False) -> Callable[[], object]:
    """A factory for the SparkSession that ``config``'s ``[spark]`` keys describe (created once);
    with ``announce``, a JVM it starts is announced on standard error first (``announce_start``)."""
    cached: list = []

    def factory():
        if cached:
            return cached[0]
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        _share_import_path()
        from pyspark.sql import SparkSession

        builder = SparkSession.builder
        if "PYSPARK_GATEWAY_PORT" not in os.environ:
            builder = builder.master(config["spark.master"]).appName(config["spark.app_name"])
        # else spark-submit (or the pyspark shell) started the JVM: its --master and --name win.
        for key, value in _settings(config):
            builder = builder.config(key, value)
        log = spark_log_path()
        logged = os.path.getsize(log) if os.path.exists(log) else 0
        from pyspark import SparkContext

        # The active session is per thread: a context started by another thread (or whose session
        # stopped) is taken over by ``getOrCreate``, never started a second time.
        starts_jvm = ("PYSPARK_GATEWAY_PORT" not in os.environ
                      and SparkSession.getActiveSession() is None
                      and SparkContext._active_spark_context is None)
        if starts_jvm:
            problem = spark_home_problem() or java_problem()
            if problem is not None:  # before spark-submit, whose own words are JAVA_GATEWAY_EXITED
                raise SparkStartError(f"Spark did not start with master {config['spark.master']}: "
                                      f"{problem}")
            if announce:
                announce_start(config["spark.master"])
        started = time.monotonic()
        try:
            with _jvm_output_to(log), _keeping_a_custom_sigint_handler():
                if starts_jvm:
                    _start_context_in_its_own_session(config)
                session = builder.getOrCreate()
        except Exception as exc:
            raise SparkStartError(_start_failure(config["spark.master"], exc, log, logged)) from exc
        if starts_jvm:
            _remember_start_seconds(time.monotonic() - started)
        session.sparkContext.setLogLevel("ERROR")
        cached.append(session)
        return session

    return factory


NO_JAVA_HINT = "--env local runs without Spark and needs no Java"


def java_problem(environ=None) -> str | None:
    """Why no JVM can start here, in words a user can act on, or None: the ``java`` Spark's scripts
    run (``$JAVA_HOME/bin/java`` when JAVA_HOME is set, else ``java`` on PATH) is not there."""
    environ = os.environ if environ is None else environ
    home = environ.get("JAVA_HOME", "")
    if home:
        java = os.path.join(home, "bin", "java")
        if os.path.isfile(java) and os.access(java, os.X_OK):
            return None
        return (f"JAVA_HOME is wrong: {home} has no bin/java; point JAVA_HOME at a Java 17 "
                f"installation or unset it to use the java on PATH ({NO_JAVA_HINT})")
    if shutil.which("java", path=environ.get("PATH", os.defpath)) is None:
        return (f"Java 17 is missing: no java on PATH and JAVA_HOME is not set; install Java 17 "
                f"(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME ({NO_JAVA_HINT})")
    return None


def spark_home_problem(environ=None) -> str | None:
    """Why PySpark cannot start Spark from SPARK_HOME, or None: when SPARK_HOME is set, PySpark runs
    ``$SPARK_HOME/bin/spark-submit`` (else the copy inside the pyspark package), and a folder
    without it fails with a bare "No such file or directory"."""
    environ = os.environ if environ is None else environ
    home = environ.get("SPARK_HOME")
    if home is None:
        return None
    submit = os.path.join(home, "bin", "spark-submit")
    if os.path.isfile(submit) and os.access(submit, os.X_OK):
        return None
    import pyspark

    wrong = f"{home} has no bin/spark-submit" if home else "it is set but empty"
    return (f"SPARK_HOME is wrong: {wrong}; point SPARK_HOME at a Spark {pyspark.__version__} "
            f"installation (the pyspark package's folder, {os.path.dirname(pyspark.__file__)}, is "
            f"one) or unset it to use the Spark pyspark comes with ({NO_JAVA_HINT})")


FIRST_START_SECONDS = 20  # what a first start of local[*] took on a 2-core machine (15-25 s)


def announce_start(master: str) -> None:
    """One line on standard error before the JVM starts: what starts, about how long it takes (the
    last start on this machine, else a first-start figure) and that ``--env local`` needs none of it.
    """
    seconds = _last_start_seconds() or FIRST_START_SECONDS
    with contextlib.suppress(OSError):
        sys.stderr.write(f"starting Spark {master} (a JVM; about {seconds:.0f} s) "
                         "— --env local starts none\n")
        sys.stderr.flush()


def _start_seconds_path() -> str:
    return os.path.join(os.path.dirname(spark_log_path()), "spark-start-seconds")


def _last_start_seconds() -> float | None:
    with contextlib.suppress(OSError, ValueError), open(_start_seconds_path(), encoding="ascii") as f:
        return max(1.0, float(f.read().strip()))
    return None


def _remember_start_seconds(seconds: float) -> None:
    with contextlib.suppress(OSError), open(_start_seconds_path(), "w", encoding="ascii") as f:
        f.write(f"{seconds:.1f}\n")


class SparkStartError(RuntimeError):
    """Spark did not start: its master did not take the application, or the JVM did not start.
    The message is one line naming the master and Spark's log; nothing ran."""


def _start_failure(master: str, exc: Exception, log: str, logged: int) -> str:
    """Why the session did not start, in one line: Spark's own reason when its log (written since
    byte ``logged``) says that no master answered, else the first line of the exception."""
    with contextlib.suppress(Exception):  # a context that stopped itself stays in PySpark's books
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    reason = ""
    written = ""
    with contextlib.suppress(OSError), open(log, "rb") as handle:
        handle.seek(logged)
        written = handle.read().decode("utf-8", "replace")
        for line in written.splitlines():
            if "All masters are unresponsive" in line:
                reason = ("no Spark master answered at that address (Spark: All masters are "
                          "unresponsive! Giving up.); check that the URL names the master's port "
                          "(spark://HOST:PORT, as the master's log shows it)")
    if not reason:
        java = getattr(exc, "java_exception", None)
        text = str(java) if java is not None else str(exc)
        reason = (text.strip().splitlines() or [type(exc).__name__])[0].strip()
        if "JAVA_GATEWAY_EXITED" in reason:
            refusal = _jvm_refusal(written)
            reason = (f"spark-submit stopped before Spark started: {refusal} (check spark.master, "
                      "[spark] conf and PYSPARK_SUBMIT_ARGS)" if refusal is not None else
                      f"{reason} (Spark needs Java 17: check java -version and JAVA_HOME; "
                      f"{NO_JAVA_HINT})")
    return f"Spark did not start with master {master}: {reason} (Spark's log: {log})"


def _jvm_refusal(written: str) -> str | None:
    """What spark-submit or its JVM said as it stopped before Spark started (``written``: Spark's log
    since the start), or None: the message of spark-submit's ``Exception in thread "main"`` (a
    master it refuses, yarn without HADOOP_CONF_DIR) or the line before the JVM's "Could not create
    the Java Virtual Machine" (an option it refuses, such as spark.driver.memory = lots)."""
    lines = [line.strip() for line in written.splitlines()]
    for at, line in enumerate(lines):
        if line.startswith('Exception in thread "main" '):
            thrown = line.removeprefix('Exception in thread "main" ')
            kind, colon, message = thrown.partition(": ")
            return message if colon and " " not in kind else thrown
        if line.startswith("Error: Could not create the Java Virtual Machine") and at and lines[at - 1]:
            return lines[at - 1]
    return None


def _settings(config) -> list[tuple[str, str]]:
    """gyreflow's Spark settings, then the user's ``spark.conf`` (which win)."""
    return [("spark.ui.showConsoleProgress", "false"), ("spark.python.worker.reuse", "true"),
            # Tasks read their state from the backend, not from cached blocks: waiting for a
            # block-local slot (3 s by default) only delays each round.
            ("spark.locality.wait", "0"),
            # A workers-mode barrier stage started again after an executor was lost waits until
            # the cluster has its slots back: check every second (Spark: every 15 s), for as long
            # as Spark's default allows in all (40 checks of 15 s).
            ("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s"),
            ("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "600"),
            *config["spark.conf"]]


def _start_context_in_its_own_session(config) -> None:
    """Start the JVM (and so its Python workers) in a process session of its own: a Ctrl-C typed in
    the terminal reaches the job's driver, which stops the job at a window boundary, and not the
    workers in the middle of a task. The JVM still ends with the driver (it watches its stdin)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf().setMaster(config["spark.master"]).setAppName(config["spark.app_name"])
    conf.setAll(_settings(config))
    gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
    SparkContext(conf=conf, gateway=gateway)
    _IMPORT_PATH_SHARED[:] = [True]  # _share_import_path() ran before this JVM started


def spark_log_path() -> str:
    """The JVM's log: in a directory of this user's own (0700) under the temporary directory, never
    reached through a symbolic link."""
    from gyreflow.state.shared.private import ensure_private_dir

    directory = ensure_private_dir(os.path.join(tempfile.gettempdir(), f"gyreflow-{os.geteuid()}"),
                                   "Spark log directory")
    return os.path.join(directory, "spark.log")


def _share_import_path() -> None:
    """Let Python workers import what the driver imports from its own folders.

    cloudpickle pickles functions and classes of importable modules by reference, so a worker must be
    able to import the pipeline script's modules. Python workers inherit the driver's environment
    (through the JVM), so the driver's non-interpreter ``sys.path`` entries go into ``PYTHONPATH``.
    """
    prefixes = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
    own = [p for p in (os.path.abspath(entry or os.curdir) for entry in sys.path)
           if os.path.isdir(p) and not os.path.realpath(p).startswith(prefixes)]
    existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(own + existing))


@contextlib.contextmanager
def _keeping_a_custom_sigint_handler():
    """A SparkContext replaces the SIGINT handler (it cancels the jobs, then raises
    KeyboardInterrupt); a handler the application installed itself (``gyreflow run``'s graceful
    stop) is put back."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    try:
        yield
    finally:
        if main and callable(previous) and previous is not signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def _jvm_output_to(path: str):
    """Start the JVM with its standard error in ``path``: Spark's start-up chatter (log4j, JVM
    warnings) stays out of the user's terminal; gyreflow reports task failures itself."""
    from gyreflow.state.shared.private import private_file

    sys.stderr.flush()
    log = private_file(path)
    saved = os.dup(2)
    try:
        os.dup2(log, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)
