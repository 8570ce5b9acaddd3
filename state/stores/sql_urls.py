"""SQL database URLs: PostgreSQL goes through psycopg (version 3) unless the URL names another driver;
how a URL is shown (password masked) and why a connection to it failed, in one line."""

from __future__ import annotations

import importlib
import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL


def make_url(url: str | URL) -> URL:
    """SQLAlchemy's URL of ``url``; SQLAlchemy is imported here, when a database URL is read, so a
    job on the memory or RocksDB backend never pays its import (a quarter of a second)."""
    from sqlalchemy.engine import make_url as parse

    return parse(url)

# The pool (and psycopg, closing a connection or pipeline) log the failed reset of a connection to a
# server that went away, and psycopg logs server notices; gyreflow reports a failure itself, in one
# line, so none of it may reach stderr through logging's last resort.
for _logger in ("sqlalchemy.pool", "psycopg"):
    logging.getLogger(_logger).addHandler(logging.NullHandler())

# The module each SQLAlchemy driver name needs, and how to install it.
_DRIVERS = {
    "psycopg": ("psycopg", "pip install 'gyreflow[postgres]'"),
    "psycopg2": ("psycopg2", "pip install psycopg2-binary"),
    "pg8000": ("pg8000", "pip install pg8000"),
}

# The databases gyreflow's SQL stores and connectors are written for, and a URL of each.
DIALECTS = {"sqlite": "sqlite:///path/to/file.db",
            "postgresql": "postgresql://user:password@host:5432/database"}

CONNECT_TIMEOUT = 5  # seconds a PostgreSQL connection may take before it counts as unreachable

_USERINFO_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]*@")


def engine_url(url: str | URL) -> URL:
    """``url`` as SQLAlchemy should open it: ``postgresql://`` means ``postgresql+psycopg://``."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def shown_url(url: str | URL) -> str:
    """``url`` with its password masked, for messages (also when it does not parse).

    >>> shown_url("postgresql://app:hunter2@db:5432/orders")
    'postgresql://app:***@db:5432/orders'
    >>> shown_url("postgresql://app:hunter2@db:port/orders")
    'postgresql://app:***@db:port/orders'
    """
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy reads: mask what looks like a password
        return _USERINFO_PASSWORD.sub(r"\1***@", str(url))


def unknown_dialect(url: str | URL) -> str | None:
    """Why ``url`` names no database SQLAlchemy knows (a misspelt dialect), else None.

    >>> unknown_dialect("sqlit:///x.db")
    "unknown database dialect 'sqlit' in sqlit:///x.db: use sqlite or postgresql (sqlite:///path/to/file.db, postgresql://user:password@host:5432/database)"
    >>> unknown_dialect("sqlite:///x.db") is None
    True
    """
    from sqlalchemy.exc import NoSuchModuleError

    parsed = make_url(url)
    dialect = parsed.get_backend_name()
    try:
        parsed.set(drivername=dialect).get_dialect()
    except NoSuchModuleError:
        return (f"unknown database dialect {dialect!r} in {shown_url(url)}: use "
                f"{' or '.join(DIALECTS)} ({', '.join(DIALECTS.values())})")
    return None


def missing_driver(url: str | URL, what: str) -> str | None:
    """A one-line message when ``url`` cannot be opened as it is: it is not a database URL, it
    names a dialect SQLAlchemy does not know, or the Python driver it needs is not installed (None
    when it can)."""
    try:
        parsed = engine_url(url)
    except Exception:  # noqa: BLE001 - ArgumentError, or ValueError for a port that is no number
        return (f"{what}: {shown_url(url)!r} is not a database URL (expected e.g. "
                "postgresql://user:password@host:5432/database or sqlite:///path/to/file.db)")
    unknown = unknown_dialect(parsed)
    if unknown is not None:
        return f"{what}: {unknown}"
    if parsed.get_backend_name() != "postgresql":
        return None
    driver = parsed.get_driver_name()
    module, install = _DRIVERS.get(driver, (driver, f"install the {driver} package"))
    try:
        importlib.import_module(module)
    except ImportError:
        pass
    else:
        return None
    return (f"{what}: the PostgreSQL driver {module!r} is not installed: {install} "
            f"(URL {parsed.render_as_string(hide_password=True)})")


def connect_args(url: str | URL) -> dict:
    """Driver arguments gyreflow opens ``url`` with: a server that does not answer within
    ``CONNECT_TIMEOUT`` seconds counts as unreachable."""
    if engine_url(url).get_backend_name() == "postgresql":
        return {"connect_timeout": CONNECT_TIMEOUT}
    return {}


def connection_failure(url: str | URL, exc: BaseException) -> str:
    """Why connecting to ``url`` failed, in one line: the URL (password masked), the driver's own
    words (folded onto one line) and what to check.

    >>> failed = OSError('FATAL:\\n database "x" does not exist')
    >>> connection_failure("postgresql://app:pw@db/x", failed).split("; ")  # doctest: +NORMALIZE_WHITESPACE
    ['cannot connect to postgresql://app:***@db/x: FATAL: database "x" does not exist',
     'check that the database exists (createdb x)']
    """
    try:
        verb = "open" if engine_url(url).get_backend_name() == "sqlite" else "connect to"
    except Exception:  # noqa: BLE001 - not a URL: what_to_check says to check it
        verb = "connect to"
    return f"cannot {verb} {shown_url(url)}: {driver_message(url, exc)}; {what_to_check(url, exc)}"


def driver_message(url: str | URL, exc: BaseException) -> str:
    """The database driver's message of ``exc`` on one line, without SQLAlchemy's background link,
    and never with the password of ``url``."""
    cause = getattr(exc, "orig", None) or exc
    text = ""
    for line in (" ".join(line.split()) for line in str(cause).splitlines()):
        if line:  # psycopg puts a hint on a line of its own: it becomes a sentence of its own
            text = f"{text}{'.' if text[-1:].isalnum() else ''} {line}" if text else line
    text = text or type(cause).__name__
    try:
        password = make_url(url).password
    except Exception:  # noqa: BLE001 - not a URL: nothing to hide beyond what shown_url masks
        password = None
    if password:
        text = text.replace(str(password), "***")
    return text


def what_to_check(url: str | URL, exc: BaseException) -> str:
    """What the user should check after connecting to ``url`` failed with ``exc`` (the server, the
    host name, the password, the database), read from the driver's message."""
    text = str(getattr(exc, "orig", None) or exc).lower()
    try:
        parsed = engine_url(url)
    except Exception:  # noqa: BLE001
        return "check the URL"
    unknown = unknown_dialect(parsed)
    if unknown is not None:  # no server was asked: advice about one would mislead
        return unknown
    if parsed.get_backend_name() == "sqlite":
        if "not a database" in text or "malformed" in text:
            return "the file is damaged: restore it from a copy, or move it away to start over"
        if "locked" in text:
            return "check that no other process holds the file"
        return "check that the file's directory exists and can be written"
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    if "password" in text or "authentication" in text:
        return "check the user name and password in the URL"
    if "database" in text and "does not exist" in text:
        return f"check that the database exists (createdb {parsed.database})"
    if "role" in text and "does not exist" in text:
        return f"check the user name in the URL (no role {parsed.username!r} on the server)"
    if "resolve" in text or "name or service not known" in text:
        return f"check the host name in the URL ({parsed.host!r} is not known)"
    if "refused" in text or "timeout" in text or "timed out" in text or "no route" in text:
        return f"check that the server is running and accepts connections at {where}"
    return (f"check that the server at {where} is running, that the user name and password are "
            "right and that the database exists")
