"""``jdbc`` tables: read with SQLAlchemy, written through gyreflow's exactly-once table sink."""

from __future__ import annotations

from gyreflow.api.dsl.parsing import DslError

URL = "gyreflow.dsl.jdbc.url"  # an SQLAlchemy URL that takes the place of the script's JDBC URL


def sqlalchemy_url(table, settings: dict) -> str:
    """The table's database as an SQLAlchemy URL: ``gyreflow.dsl.jdbc.url`` when set, else the
    script's ``geaflow.dsl.jdbc.url`` (``jdbc:postgresql://...`` and ``jdbc:sqlite:...`` are
    translated; an SQLAlchemy URL is taken as it is)."""
    url = settings.get(URL) or table.options.get(URL) or table.options.get("geaflow.dsl.jdbc.url", "")
    if url.startswith("jdbc:postgresql://"):
        user = table.options.get("geaflow.dsl.jdbc.username")
        password = table.options.get("geaflow.dsl.jdbc.password")
        login = f"{user}:{password}@" if user and password else f"{user}@" if user else ""
        return "postgresql+psycopg://" + login + url[len("jdbc:postgresql://"):]
    if url.startswith("jdbc:sqlite:"):
        return "sqlite:///" + url[len("jdbc:sqlite:"):]
    if url.startswith("jdbc:"):
        raise DslError(f"table {table.name}: {url.split(';')[0]} is a JDBC URL gyreflow cannot open",
                       hint=f"give an SQLAlchemy URL (sqlite:///FILE, postgresql://...) in {URL}")
    return url


def _table_name(table) -> str:
    return table.options.get("geaflow.dsl.jdbc.table.name", table.name)


def read_jdbc(table, settings: dict) -> list[tuple]:
    """Every row of the database table, all of its columns by position (as GeaFlow's scan reads)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(sqlalchemy_url(table, settings))
    try:
        with engine.connect() as connection:
            quoted = engine.dialect.identifier_preparer.quote(_table_name(table))
            return [tuple(row) for row in connection.execute(sqlalchemy.text(f"SELECT * FROM {quoted}"))]
    finally:
        engine.dispose()


def column_names(table, settings: dict) -> list[str]:
    """The database table's columns, in order."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(sqlalchemy_url(table, settings))
    try:
        return [c["name"] for c in sqlalchemy.inspect(engine).get_columns(_table_name(table))]
    finally:
        engine.dispose()


def _as_dict(names: tuple, row: tuple) -> dict:
    return dict(zip(names, row, strict=False))


def jdbc_sink(table, settings: dict):
    """``(map function, sink)``: rows become dicts of the database's columns, by position."""
    import functools

    from gyreflow.api.connectors.postgres import PostgresSink

    url = sqlalchemy_url(table, settings)
    names = tuple(column_names(table, settings))
    return functools.partial(_as_dict, names), PostgresSink(url, _table_name(table), window_column=None)


def prepare_test_database(folder, statements: list[str]) -> str:
    """An SQLite database in ``folder`` holding the tables GeaFlow's JDBC tests create first."""
    import sqlite3

    path = folder / "jdbc.sqlite"
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement.rstrip(";"))
    return f"sqlite:///{path}"
