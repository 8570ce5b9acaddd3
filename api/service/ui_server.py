"""One port for a running job: ``/metrics`` (Prometheus), ``/api/job`` (JSON), ``/`` (the page) and
``/static/`` (the charting library the page draws with, shipped in the package with its licence).

The server runs in a daemon thread for the length of a run. It binds 127.0.0.1 unless given a host,
opens before the first window and closes before the process exits.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gyreflow.api.service.monitor import JobMonitor
from gyreflow.api.service.ui_page import PAGE

DEFAULT_HOST = "127.0.0.1"
# Every file /static/ serves (package data in api/service/static/): uPlot 1.6.32 (MIT) and its licence.
STATIC_FILES = {
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
}


@cache
def static_file(name: str) -> bytes:
    """The bytes of ``api/service/static/NAME`` as installed with the package (read once)."""
    return resources.files("gyreflow.api.service").joinpath("static", name).read_bytes()


class UiAddressError(ValueError):
    """A ``--ui`` address that is not ``[HOST:]PORT``."""


def parse_address(text: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[::1]:PORT`` for IPv6) as ``(host, port)``; 0 picks a free port."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        msg = (f"ui address {text!r}: expected [HOST:]PORT with PORT from 0 to 65535, "
               "e.g. 8080 or 0.0.0.0:8080")
        raise UiAddressError(msg)
    return host, int(port)


class _Handler(BaseHTTPRequestHandler):
    monitor: JobMonitor  # set on the subclass each server makes

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, CONTENT_TYPE_LATEST, generate_latest(self.monitor.registry))
        elif path == "/api/job":
            body = json.dumps(self.monitor.snapshot()).encode()
            self._send(200, "application/json", body)
        elif path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", PAGE.encode())
        elif path.startswith("/static/") and path[len("/static/"):] in STATIC_FILES:
            name = path[len("/static/"):]
            self._send(200, STATIC_FILES[name], static_file(name), cache="max-age=3600")
        else:
            self._send(404, "text/plain; charset=utf-8", b"not found: try /, /metrics or /api/job\n")

    def _send(self, status: int, content_type: str, body: bytes, cache: str = "no-store") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args) -> None:  # noqa: A002 - the http.server API
        """Requests are not logged: the job's own output stays readable."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class UiServer:
    """Serves ``monitor`` on ``(host, port)`` from a daemon thread until ``close``."""

    def __init__(self, monitor: JobMonitor, host: str = DEFAULT_HOST, port: int = 0) -> None:
        handler = type("Handler", (_Handler,), {"monitor": monitor})
        server_class = _Server6 if ":" in host else _Server
        self.monitor = monitor
        self.httpd = server_class((host, port), handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="gyreflow-ui",
                                       kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}/"

    def close(self) -> None:
        """Stop serving and release the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


class RunUi:
    """A run's monitor and the server showing it, with the time it stays up after the run."""

    def __init__(self, monitor: JobMonitor, server: UiServer, linger_seconds: float) -> None:
        self.monitor = monitor
        self.server = server
        self.linger_seconds = linger_seconds

    @classmethod
    def open(cls, address: str, linger_seconds: float = 0.0, stop=None) -> RunUi:
        """Bind ``address`` (``[HOST:]PORT``), start serving a new monitor and print the address
        (``ui: http://HOST:PORT/``) on standard error."""
        host, port = parse_address(address)
        monitor = JobMonitor(stop=stop)
        ui = cls(monitor, UiServer(monitor, host, port), linger_seconds)
        sys.stderr.write(f"ui: {ui.server.url}\n")
        sys.stderr.flush()
        return ui

    def linger(self, stop=None) -> None:
        """Keep serving the final state for ``linger_seconds``, or until a stop signal comes while
        it lingers (after a run stopped by a signal, a second one ends the process at once)."""
        deadline = time.monotonic() + self.linger_seconds
        stopped_before = stop is not None and getattr(stop, "requested", False)
        while time.monotonic() < deadline:
            if not stopped_before and stop is not None and getattr(stop, "requested", False):
                return
            time.sleep(0.05)

    def close(self) -> None:
        """Close the port."""
        self.server.close()
