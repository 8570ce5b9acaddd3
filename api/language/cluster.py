"""What a Spark cluster refuses before any data moves: a master nobody answers at, and state and
output that only the driver reaches.

On ``local[N]`` the driver and the executors share one machine; on a cluster (any other master URL)
they do not. State must live where every node reaches it: the jdbc backend on a database server, or
rocksdb with ``state.checkpoint_url``. The memory backend, a local SQLite file and relative paths are
refused by rule; absolute directories (a checkpoint directory, a FileSink's output) are probed: the
driver writes a token there and a Spark job on the executors must read it back.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import secrets
import socket
import sys
import urllib.parse

from gyreflow.api.config.loading import ConfigError

_PROBE_NAME = ".gyreflow-cluster-probe-"
MASTER_CONNECT_TIMEOUT = 5.0  # seconds the master's port may take to accept a connection
MASTER_FORMS = ("local, local[N], local[*], local[N,F], spark://HOST:PORT (or HOST1:PORT1,"
                "HOST2:PORT2), yarn or k8s://https://HOST:PORT")
# Spark's own patterns (SparkContext.createTaskScheduler): N threads, F task failures allowed.
_LOCAL_MASTER = re.compile(r"local|local\[(?P<threads>[0-9]+|\*)(?:\s*,\s*[0-9]+)?\]"
                           r"|local-cluster\[\s*[0-9]+\s*,\s*[0-9]+\s*,\s*[0-9]+\s*\]")
_PORT = re.compile(r"[0-9]{1,5}")


def is_cluster_master(master: str) -> bool:
    """Whether ``master`` runs executors outside the driver's machine (anything but ``local``)."""
    return not master.strip().startswith("local")


def master_problem(master: str) -> str | None:
    """What makes ``master`` a URL Spark refuses, in one line naming it (None: Spark takes its form).

    >>> master_problem("local[2]"), master_problem("spark://a:7077,b:7078"), master_problem("yarn")
    (None, None, None)
    >>> master_problem("spark://127.0.0.1:7077x").split(";")[0]
    "spark.master spark://127.0.0.1:7077x: the port '7077x' is not a number"
    """
    problem = _what_is_wrong(master)
    if problem is None:
        return None
    shown = master if master and master == master.strip() else repr(master)
    return f"spark.master {shown}: {problem}; Spark takes {MASTER_FORMS}"


def _what_is_wrong(master: str) -> str | None:
    if not master.strip():
        return "no URL at all"
    if master != master.strip():
        return "spaces around the URL, which Spark does not strip"
    if master.startswith("local"):
        match = _LOCAL_MASTER.fullmatch(master)
        if match is None:
            return "not a local master's form"
        if match.group("threads") is not None and match.group("threads").strip("0") == "":
            return "local[0] runs no task: the number of threads must be 1 or more"
        return None
    if master.startswith("spark://"):
        return _standalone_problem(master[len("spark://"):])
    if master == "yarn":
        return None
    if master.startswith("k8s://"):
        rest = master[len("k8s://"):]
        parsed = urllib.parse.urlsplit(rest if "://" in rest else f"https://{rest}")
        try:
            parsed.port  # noqa: B018 - raises ValueError for a port that is not one
        except ValueError:
            return f"the port of the API server {rest!r} is not a number from 1 to 65535"
        return None if parsed.hostname else "it names no API server (k8s://https://HOST:PORT)"
    if master.startswith("mesos://"):
        return "Spark 4 runs on no Mesos cluster (Spark 4.0 removed it)"
    if re.fullmatch(r"[\w.-]+:[0-9]+", master):
        return f"a host and port without a scheme (did you mean spark://{master}?)"
    scheme = master.partition("://")[0] if "://" in master else master
    close = difflib.get_close_matches(scheme, ["spark", "local", "yarn", "k8s"], n=1)
    guess = f" (did you mean {close[0]}{'://' if close[0] in ('spark', 'k8s') else ''}?)" \
        if close else ""
    return f"{scheme!r} is not a kind of master Spark knows{guess}"


def _standalone_problem(masters: str) -> str | None:
    """What is wrong with the ``HOST:PORT[,HOST:PORT]`` of a standalone cluster: Spark reads each
    as ``spark://HOST:PORT`` and requires the port."""
    for entry in masters.split(","):
        host, colon, port = entry.rpartition(":")
        if not entry:
            return "it names no master (spark://HOST:PORT)"
        if not colon or host.endswith(":") and not host.startswith("["):
            return (f"{entry!r} has no port: write spark://{entry}:PORT (a standalone master "
                    "listens on 7077 unless told otherwise; an IPv6 address goes in brackets)")
        if not _PORT.fullmatch(port):
            return f"the port {port!r} is not a number"
        if not 0 < int(port) < 65536:
            return f"the port {port} is not from 1 to 65535"
        bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        if not bare:
            return f"{entry!r} names no host"
        if ":" in bare and bare == host or any(c in bare for c in "/?#@[] "):
            return f"{host!r} is not a host name or address"
    return None


@contextlib.contextmanager
def refusals_in_one_line():
    """Let a ``ConfigError`` through (``gyreflow run`` prints it in one line and exits 2; a program
    may catch it), except in a program ``spark-submit`` started (outside ``gyreflow run``): nothing
    would print it there but Python's traceback, with exit status 1. There the line ``gyreflow run``
    prints goes to standard error and the program exits 2 (spark-submit exits with its status)."""
    from gyreflow.api.config.session import current_settings

    try:
        yield
    except ConfigError as exc:
        settings = current_settings()
        if "PYSPARK_GATEWAY_PORT" not in os.environ or settings.summaries is not None \
                or settings.explained is not None:
            raise
        message = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
        with contextlib.suppress(OSError):
            sys.stderr.write(f"error: configuration: {message}\n")
            sys.stderr.flush()
        raise SystemExit(2) from exc


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs a master URL names: every master of a standalone cluster
    (``spark://host1:7077,host2:7077``) or the API server of Kubernetes (``k8s://https://host:6443``);
    none for masters without an address (``yarn``, ``local[N]``).

    >>> master_addresses("spark://a:7077,b")
    [('a', 7077), ('b', 7077)]
    >>> master_addresses("k8s://https://10.0.0.1:6443"), master_addresses("yarn")
    ([('10.0.0.1', 6443)], [])
    """
    master = master.strip()
    if master.startswith("spark://"):
        found = []
        for entry in master[len("spark://"):].split(","):
            host, colon, port = entry.strip().rpartition(":")
            if not colon:
                host, port = port, ""
            found.append((host.strip("[]"), int(port) if port.isdigit() else 7077))
        return found
    if master.startswith("k8s://"):
        rest = master[len("k8s://"):]
        parsed = urllib.parse.urlsplit(rest if "://" in rest else f"https://{rest}")
        try:
            port = parsed.port or (80 if parsed.scheme == "http" else 443)
        except ValueError:
            port = None
        return [(parsed.hostname, port)] if parsed.hostname and port else []
    return []


def check_master_reachable(master: str, timeout: float = MASTER_CONNECT_TIMEOUT) -> None:
    """Refuse (``ConfigError``, one line) a master URL whose address accepts no connection.

    Spark itself would try to register with it for a minute and then stop its context, which
    reaches the user as a Java stack; a connection attempt answers in milliseconds (refused, or an
    unknown host) or ``timeout`` seconds (nothing answers). Only for a driver that has yet to
    connect (``runtime.spark.session.session_master``).
    """
    addresses = master_addresses(master)
    failures = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            failures.append(f"{host}:{port} ({reason.lower()})")
    if failures:
        msg = (f"spark.master {master}: nothing accepts connections at {', '.join(failures)}; "
               "check that the Spark master is running and that the URL names its host and port "
               "(the master's log and web UI show its URL, spark://HOST:PORT)")
        raise ConfigError(msg)


def check_cluster_state(config, backend, *, check_address: bool = True) -> None:
    """Refuse, in one line, a cluster that cannot work: state that executors cannot reach (by
    rule), then (``check_address``: a driver that has yet to connect) a master URL nobody answers at
    (``check_master_reachable``). ``config["spark.master"]`` is the master the session runs with."""
    _check_state_location(config, backend)
    if check_address:
        check_master_reachable(config["spark.master"])


def _check_state_location(config, backend) -> None:
    master = config["spark.master"]
    name = backend.name
    if name == "memory":
        msg = (f"state.backend = memory keeps state in one process, which the executors of the "
               f"cluster {master} cannot reach: use state.backend = rocksdb with "
               "state.checkpoint_url (a directory every node mounts, or s3://...), or jdbc with a "
               "PostgreSQL state.url")
        raise ConfigError(msg)
    if name == "rocksdb" and not backend.checkpoint_url:
        msg = (f"state.backend = rocksdb keeps snapshots under state.path on each machine's own disk,"
               f" so executors of the cluster {master} would each start from empty state: set "
               "state.checkpoint_url to a directory every node mounts or an object-store URL "
               "(s3://bucket/path)")
        raise ConfigError(msg)
    if name == "rocksdb" and "://" not in backend.checkpoint_url \
            and not os.path.isabs(backend.checkpoint_url):
        msg = (f"state.checkpoint_url {backend.checkpoint_url!r} is relative, so each machine of "
               f"the cluster {master} would resolve it in its own working directory: give an "
               "absolute path every node mounts, or an object-store URL")
        raise ConfigError(msg)
    if name == "jdbc" and backend.url.startswith("sqlite"):
        msg = (f"state.backend = jdbc on SQLite keeps state in a file of the driver's disk, which "
               f"executors of the cluster {master} cannot share: set state.url to a PostgreSQL "
               "server every node reaches (postgresql+psycopg://...)")
        raise ConfigError(msg)


def shared_locations(backend, sinks) -> list[tuple[str, str]]:
    """``(what, location)`` of the folders executors write and the driver reads, or the other way."""
    found = []
    if backend.name == "rocksdb" and backend.checkpoint_url:
        found.append(("state.checkpoint_url", backend.checkpoint_url))
    for name, sink in sinks:
        directory = getattr(sink, "directory", None)
        if directory is not None:
            found.append((f"the output of {name!r}", os.fspath(directory)))
    return found


def input_files(sources) -> list[tuple[str, str]]:
    """``(what, path)`` of the input files and directories executors read."""
    found = []
    for name, source in sources:
        for attribute in ("path", "directory"):
            if isinstance(getattr(source, attribute, None), str):
                found.append((f"the input of {name!r}", getattr(source, attribute)))
    return found


def dead_letter_locations(sources) -> list[tuple[str, str]]:
    """``(what, folder)`` of the dead-letter folders source tasks write."""
    return [(f"the dead letters of {name!r}", source.dead_letters) for name, source in sources
            if isinstance(getattr(source, "dead_letters", None), str)]


def probe_inputs(spark_context, files: list[tuple[str, str]]) -> None:
    """Refuse (``ConfigError``) an input file that some executor cannot read."""
    if not files:
        return
    slots = max(2, spark_context.defaultParallelism) * 2
    missing = spark_context.parallelize(range(slots), slots).mapPartitions(
        _file_checker(files)).collect()
    if missing:
        what, path, host = missing[0]
        msg = (f"{what} {path!r} cannot be read by the executor on {host}: on a cluster an input "
               "file must be on a file system every node mounts")
        raise ConfigError(msg)


def _file_checker(files):
    def check(_items):
        import socket

        return iter([(what, path, f"{socket.gethostname()} (pid {os.getpid()})")
                     for what, path in files if not os.access(path, os.R_OK)])

    return check


def probe_shared(spark_context, backend, locations: list[tuple[str, str]]) -> None:
    """Write a token in each location on the driver; a Spark job reads them on the executors.

    Refuses (``ConfigError``) a location some executor cannot read: a directory only the driver
    sees. Every executor core gets a probe task, so each executor is asked.
    """
    if not locations:
        return

    from gyreflow.state.backends import _nested

    options = _nested(getattr(backend, "storage_options", ()))
    made: list[tuple[str, str]] = []  # (folder, its first ancestor this probe made) on this machine
    try:
        _probe_shared(spark_context, options, locations, made)
    except Exception:
        for folder, first in made:  # a refused run leaves no empty folders behind
            _remove_empty(folder, first)
        raise


def _probe_shared(spark_context, options: dict, locations: list[tuple[str, str]],
                  made: list[tuple[str, str]]) -> None:
    """``probe_shared`` for ``locations``, adding to ``made`` each local folder it creates."""
    import fsspec

    from gyreflow.state.shared.snapshot import BackendUnavailableError
    from gyreflow.state.stores.checkpoint_location import (
        check_endpoint,
        location_failure,
        shown_location,
    )

    tokens = []
    for what, location in locations:
        is_url = "://" in location and not location.startswith("file://")
        token = secrets.token_hex(8)
        try:
            if what == "state.checkpoint_url":  # the state store's location: as when it opens
                check_endpoint(location, options)
            fs, root = fsspec.core.url_to_fs(location, **(options if is_url else {}))
            if not is_url:
                first = _first_missing(root)
                fs.makedirs(root, exist_ok=True)
                if first is not None:
                    made.append((root, first))
            path = f"{root.rstrip('/')}/{_PROBE_NAME}{token}"
            fs.pipe_file(path, token.encode())
        except BackendUnavailableError:
            raise
        except Exception as exc:
            if what == "state.checkpoint_url":
                raise BackendUnavailableError(location_failure(location, exc, options)) from exc
            reason = shown_location(" ".join(f"{type(exc).__name__}: {exc}".split()))
            msg = f"{what} {shown_location(location)!r} cannot be written ({reason})"
            raise ConfigError(msg) from exc
        tokens.append((what, location, path, token, is_url))
    slots = max(2, spark_context.defaultParallelism) * 2
    try:
        missing = (spark_context.parallelize(range(slots), slots)
                   .mapPartitions(_reader(tokens, options)).collect())
    finally:
        for _, location, path, _, is_url in tokens:
            fs, _ = fsspec.core.url_to_fs(location, **(options if is_url else {}))
            fs.rm_file(path)
    if missing:
        what, location, host = missing[0]
        msg = (f"{what} {location!r} is not reachable from the executor on {host}: on a cluster it "
               "must be a directory every node mounts (or an object-store URL), not a path of the "
               "driver's machine")
        raise ConfigError(msg)


def _first_missing(folder: str) -> str | None:
    """The outermost folder on ``folder``'s path that does not exist yet, or None."""
    first = None
    path = os.path.abspath(folder)
    while not os.path.lexists(path):
        first = path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return first


def _remove_empty(folder: str, first: str) -> None:
    """Remove ``folder`` and its parents up to ``first`` while they are empty."""
    path = os.path.abspath(folder)
    while True:
        try:
            os.rmdir(path)
        except OSError:
            return
        if path == first or os.path.dirname(path) == path:
            return
        path = os.path.dirname(path)


def _reader(tokens, options):
    def read(_items):
        import socket

        import fsspec

        out = []
        for what, location, path, token, is_url in tokens:
            try:
                fs, _ = fsspec.core.url_to_fs(location, **(options if is_url else {}))
                ok = fs.cat_file(path) == token.encode()
            except Exception:  # noqa: BLE001 - unreachable, whatever the reason
                ok = False
            if not ok:
                out.append((what, location, f"{socket.gethostname()} (pid {os.getpid()})"))
        return iter(out)

    return read
