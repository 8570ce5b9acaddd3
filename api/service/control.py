"""The control endpoint of a running job, and the client ``gyreflow control`` uses.

Each job run by this process (one pipeline task at a time) listens on a port of 127.0.0.1 while it
runs, and leaves a control file ``<pid>-<job>.json`` in the control directory (``control.directory``,
by default a 0700 directory of this user under the temporary directory; the file is 0600). The file
holds the port and a random token; a request without the token is refused, so only whoever can read
the file (its owner) can control the job. A request is one JSON line, the answer one JSON line.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import secrets
import socket
import socketserver
import tempfile
import threading
import time
import warnings

from gyreflow.runtime.control import ControlInbox, parse_value

ANSWER_TIMEOUT = 60.0  # seconds a command may wait for its window boundary


def control_directory(config) -> str:
    """The private directory control files go to (created 0700)."""
    from gyreflow.state.shared.private import ensure_private_dir

    configured = config["control.directory"] if config is not None else ""
    default = os.path.join(tempfile.gettempdir(), f"gyreflow-{os.geteuid()}", "control")
    return ensure_private_dir(configured or default, "control directory")


def initial_parameters(config) -> dict[str, dict]:
    """``control.parameters`` as ``{operator: {name: value}}`` (values parsed as JSON when they
    parse)."""
    out: dict[str, dict] = {}
    for dotted, text in config["control.parameters"]:
        operator, _, name = dotted.rpartition(".")
        if not operator or not name:
            from gyreflow.api.config.loading import ConfigError

            msg = (f"control.parameters: {dotted!r} must be OPERATOR.NAME (the operator's name as "
                   "explain shows it)")
            raise ConfigError(msg)
        out.setdefault(operator, {})[name] = parse_value(text)
    return out


class ControlParameterWarning(UserWarning):
    """``control.parameters`` names an operator the pipeline about to run does not have (a typo,
    or an operator of another pipeline of the same script): the setting does nothing in it."""


_WARNED: dict = {}  # the warnings registry: once per message


def warn_unknown_operators(config, pipeline: str, operators: set[str]) -> None:
    """Warn, before ``pipeline`` moves any data, of each ``control.parameters`` operator that is
    none of its ``operators``. A warning, not an error: the parameters apply to every pipeline
    of a run, and a script's other pipelines may have the operator."""
    named = sorted({dotted.rpartition(".")[0] for dotted, _ in config["control.parameters"]})
    for operator in named:
        if operator in operators:
            continue
        msg = (f"control.parameters names operator {operator!r}, which pipeline {pipeline!r} does "
               f"not have (its operators: {', '.join(sorted(operators))}): its parameters do "
               "nothing there")
        warnings.warn_explicit(msg, ControlParameterWarning, "control.parameters", 0,
                               module="gyreflow.control", registry=_WARNED)


class _Handler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        endpoint: ControlEndpoint = self.server.endpoint
        line = self.rfile.readline(1 << 16)
        try:
            request = json.loads(line)
            token = str(request.pop("token", ""))
        except (ValueError, AttributeError):
            answer = {"ok": False, "error": "a request is one JSON object on one line"}
        else:
            if not hmac.compare_digest(token, endpoint.token):
                answer = {"ok": False, "error": "wrong token"}
            else:
                answer = endpoint.inbox.submit(request, ANSWER_TIMEOUT)
        self.wfile.write((json.dumps(answer, default=str) + "\n").encode())


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class ControlEndpoint:
    """Serves one job's control requests until ``close``."""

    def __init__(self, job: str, inbox: ControlInbox, directory: str) -> None:
        self.job = job
        self.inbox = inbox
        self.token = secrets.token_hex(16)
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.endpoint = self
        self.port = self.server.server_address[1]
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", job)[:80]
        self.path = os.path.join(directory, f"{os.getpid()}-{slug}.json")
        record = {"job": job, "pid": os.getpid(), "host": "127.0.0.1", "port": self.port,
                  "token": self.token, "started": time.time()}
        staged = f"{self.path}.{secrets.token_hex(4)}.tmp"
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(staged, self.path)
        self.thread = threading.Thread(target=self.server.serve_forever, name="gyreflow-control",
                                       kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Remove the control file and stop serving (requests still waiting are answered that the
        job ended); the job does not wait for the server's loop to notice (up to its poll
        interval), a thread of its own does."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.inbox.close(f"job {self.job!r} has ended")
        threading.Thread(target=self._stop, name="gyreflow-control-stop", daemon=True).start()

    def _stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# The client ---------------------------------------------------------------------------------------


class ControlError(Exception):
    """No such job, several match, or the job cannot be reached; the message says which."""


_CONTROL_FIELDS = frozenset({"pid", "job"})  # without these a file names no job (a send says what else lacks)


def running_jobs(directory: str) -> list[dict]:
    """The control files of jobs whose process is alive (stale files of dead ones are removed)."""
    found = []
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="utf-8") as handle:
                record = json.load(handle)
            os.kill(int(record["pid"]), 0)
            if _started_after(int(record["pid"]), float(record.get("started", 0))):
                raise ProcessLookupError  # the job's pid was given to a process started later
        except ProcessLookupError:
            _remove(path)
            continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not isinstance(record, dict) or not _CONTROL_FIELDS <= record.keys():
            continue  # not a job's control file (or one cut short): no job to name or reach
        record["file"] = path
        found.append(record)
    return found


def _started_after(pid: int, started: float) -> bool:
    """Whether process ``pid`` started after ``started`` (seconds since the epoch), so that it is
    not the job that wrote its control file then: ``/proc`` says when it started (False where
    there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # after the command's name
        with open("/proc/stat", "rb") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith(b"btime "))
        ticks = int(fields[19])  # field 22, the start time in clock ticks after the boot
    except (OSError, StopIteration, IndexError, ValueError):
        return False
    # the boot time is known to the second: a process younger by more than that is another one
    return boot + ticks / os.sysconf("SC_CLK_TCK") > started + 2


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def find_job(directory: str, wanted: str | None) -> dict:
    """The running job ``wanted`` names (its name, a part of it, or its pid); the only one when
    ``wanted`` is None."""
    jobs = running_jobs(directory)
    if wanted is not None:
        exact = [j for j in jobs if wanted in (j["job"], str(j["pid"]))]
        jobs = exact or [j for j in jobs if wanted in j["job"]]
    if not jobs:
        which = f" matching {wanted!r}" if wanted is not None else ""
        msg = f"no running job{which} (control files in {directory})"
        raise ControlError(msg)
    if len(jobs) > 1:
        names = ", ".join(f"{j['job']} (pid {j['pid']})" for j in jobs)
        msg = f"several running jobs: {names}; choose one with --job"
        raise ControlError(msg)
    return jobs[0]


def send(job: dict, command: dict, timeout: float = ANSWER_TIMEOUT + 5) -> dict:
    """Send ``command`` to ``job`` and return its answer."""
    try:
        with socket.create_connection((job["host"], job["port"]), timeout=timeout) as conn:
            conn.sendall((json.dumps({**command, "token": job["token"]}) + "\n").encode())
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
    except OSError as exc:
        msg = f"job {job['job']!r} (pid {job['pid']}) cannot be reached: {exc}"
        raise ControlError(msg) from exc
    try:
        return json.loads(data)
    except ValueError as exc:
        msg = f"job {job['job']!r} (pid {job['pid']}) sent no answer"
        raise ControlError(msg) from exc
