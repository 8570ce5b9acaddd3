"""SQL database URLs: PostgreSQL goes through psycopg (version 3) unless the URL names another driver."""

from __future__ import annotations

import importlib

from sqlalchemy.engine import URL, make_url

# The module each SQLAlchemy driver name needs, and how to install it.
_DRIVERS = {
    "psycopg": ("psycopg", "pip install 'gyreflow[postgres]'"),
    "psycopg2": ("psycopg2", "pip install psycopg2-binary"),
    "pg8000": ("pg8000", "pip install pg8000"),
}


def engine_url(url: str | URL) -> URL:
    """``url`` as SQLAlchemy should open it: ``postgresql://`` means ``postgresql+psycopg://``."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def missing_driver(url: str | URL, what: str) -> str | None:
    """A one-line message when the Python driver of ``url`` is not installed (None when it is)."""
    parsed = engine_url(url)
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
