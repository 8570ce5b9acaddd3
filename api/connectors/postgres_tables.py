"""The PostgreSQL connectors' connections and tables: checks before data moves, errors named."""

from __future__ import annotations

import contextlib

from gyreflow.api.config.loading import ConfigError
from gyreflow.runtime.errors import DataError
from gyreflow.state.stores.sql_urls import (
    connect_args,
    connection_failure,
    driver_message,
    engine_url,
    missing_driver,
    shown_url,
    what_to_check,
)


def tuple_of(value) -> tuple[str, ...] | None:
    """A column name or names as a tuple (None stays None)."""
    if value is None:
        return None
    return (value,) if isinstance(value, str) else tuple(value)


def check_database(url: str, what: str) -> None:
    """Refuse before any data moves (``ConfigError``, one line naming ``what``): a URL that is not
    one, a driver that is not installed, a database server that cannot be reached or refuses the
    connection (a wrong password, a database that does not exist), with the password masked. An
    SQLite file has no server to ask."""
    problem = missing_driver(url, what)
    if problem is not None:
        raise ConfigError(problem)
    if engine_url(url).get_backend_name() == "sqlite":
        return
    engine = engine_for(url)
    try:
        engine.connect().close()
    except Exception as exc:  # whatever the driver raises, the user fixes the URL
        msg = f"{what}: {connection_failure(url, exc)}"
        raise ConfigError(msg) from exc
    finally:
        engine.dispose()


def check_table(url: str, name: str, what: str, check) -> None:
    """Refuse before any data moves (``ConfigError``) what ``check(engine, table)`` finds wrong
    with the table ``name`` as it is now (a message, or None); a table that does not exist yet is
    told once the job runs."""
    import sqlalchemy as sa

    engine = engine_for(url)
    try:
        try:
            table = reflected_table(engine, name)
        except MissingTableError:
            return
        problem = check(engine, table)
    except sa.exc.SQLAlchemyError as exc:
        msg = f"{what}: {shown_url(url)}: {driver_message(url, exc)}"
        raise ConfigError(msg) from exc
    finally:
        engine.dispose()
    if problem is not None:
        msg = f"{what}: {problem}"
        raise ConfigError(msg)


class MissingTableError(DataError):
    """The table a source or sink names does not exist (the message names the table and URL)."""


@contextlib.contextmanager
def database_errors(what: str, url: str, window: int | None = None):
    """The database's errors while the job runs (a server that went away, a value the table
    refuses, a missing table) as one-line ``DataError``s naming ``what``, the window (when there
    is one) and the URL (password masked); completed windows stay completed."""
    import sqlalchemy as sa

    where = f"{what}: window {window}" if window is not None else what
    try:
        yield
    except MissingTableError as exc:
        msg = f"{where}: {exc}"
        raise DataError(msg, window) from exc
    except sa.exc.OperationalError as exc:
        msg = f"{where}: {shown_url(url)}: {driver_message(url, exc)}; {what_to_check(url, exc)}"
        raise DataError(msg, window) from exc
    except sa.exc.SQLAlchemyError as exc:
        msg = f"{where}: {shown_url(url)}: {driver_message(url, exc)}"
        raise DataError(msg, window) from exc


def engine_for(url: str):
    """An engine for ``url``, with the driver's connection arguments."""
    import sqlalchemy as sa

    return sa.create_engine(engine_url(url), future=True, connect_args=connect_args(url))


def reflected_table(engine, name: str):
    """The table ``name`` (``schema.table`` allowed) as the database describes it."""
    import sqlalchemy as sa

    schema, _, table = name.rpartition(".")
    try:
        return sa.Table(table, sa.MetaData(), autoload_with=engine, schema=schema or None)
    except sa.exc.NoSuchTableError:
        msg = f"table {name!r} does not exist in {engine.url.render_as_string(hide_password=True)}"
        raise MissingTableError(msg) from None
