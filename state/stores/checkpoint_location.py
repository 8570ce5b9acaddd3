"""Where a checkpoint location is: a local directory or an object store, its URL shown with the
password masked, why it could not be written, and whether an object store's endpoint answers."""

from __future__ import annotations

import re
import socket
import urllib.parse

from gyreflow.state.shared.snapshot import BackendUnavailableError


def is_local_url(url: str) -> bool:
    """Whether ``url`` names a directory of this file system (a plain path or ``file://``)."""
    return "://" not in url or url.startswith("file://")


_USERINFO_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]*@")
ENDPOINT_CONNECT_TIMEOUT = 5.0  # seconds an object store's endpoint may take to accept a connection


def shown_location(text: str) -> str:
    """``text`` (a URL, or a message quoting one) with the password of any ``user:password@``
    masked.

    >>> shown_location("ftp://backup:hunter2@nas/checkpoints")
    'ftp://backup:***@nas/checkpoints'
    """
    return _USERINFO_PASSWORD.sub(r"\1***@", text)


def _endpoint(options: dict) -> str | None:
    """The endpoint URL an object store's options name (S3-compatible stores: MinIO, moto...)."""
    client = options.get("client_kwargs")
    found = client.get("endpoint_url") if isinstance(client, dict) else None
    return found or options.get("endpoint_url")


def location_failure(url: str, exc: BaseException, options: dict | None = None) -> str:
    """Why the checkpoint location ``url`` could not be written, in one line: the store's own
    words and what to check (the bucket, the credentials, the endpoint), passwords masked."""
    reason = " ".join(str(exc).split())
    reason = shown_location(f"{type(exc).__name__}: {reason}" if reason else type(exc).__name__)
    names = {type(e).__name__ for e in _chain(exc)}
    endpoint = _endpoint(options or {})
    if is_local_url(url):
        check = "check that the directory can be created and written by this user"
    elif isinstance(exc, FileNotFoundError):
        check = "check that the bucket exists (it is not created for you)"
    elif isinstance(exc, PermissionError):
        check = ("check the credentials (key and secret in state.checkpoint_options, or the "
                 "AWS_* environment variables) and that they may write there")
    elif any(word in name for name in names for word in ("Connect", "Endpoint", "Timeout")):
        where = f"the endpoint {shown_location(endpoint)}" if endpoint else "the object store"
        check = (f"check that {where} is reachable (state.checkpoint_options "
                 "client_kwargs.endpoint_url)")
    else:
        check = "check the bucket, the credentials and the endpoint in state.checkpoint_options"
    return f"state.checkpoint_url {shown_location(url)!r} cannot be written ({reason}); {check}"


def _chain(exc: BaseException) -> list[BaseException]:
    found = []
    while exc is not None and exc not in found:
        found.append(exc)
        exc = exc.__cause__ or exc.__context__
    return found


_REACHED: set[str] = set()  # endpoints this process connected to once (stores open every round)


def check_endpoint(url: str, options: dict, timeout: float = ENDPOINT_CONNECT_TIMEOUT) -> None:
    """Refuse (``BackendUnavailableError``, one line) an endpoint in ``options`` whose address
    accepts no connection: the object store's client would retry for seconds before it says so.
    Once an endpoint answered, this process does not ask again."""
    endpoint = _endpoint(options)
    if not endpoint or is_local_url(url) or endpoint in _REACHED:
        return
    parts = urllib.parse.urlsplit(endpoint)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        return  # not an address this check understands: the client reports it
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            _REACHED.add(endpoint)
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        msg = (f"state.checkpoint_url {shown_location(url)!r}: the object store's endpoint "
               f"{shown_location(endpoint)} accepts no connection ({reason.lower()}); check that "
               "the store is running and that state.checkpoint_options client_kwargs.endpoint_url "
               "names it")
        raise BackendUnavailableError(msg) from exc
