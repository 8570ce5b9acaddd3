"""What PostgresSource and PostgresSink check against their table: columns, keys and record values."""

from __future__ import annotations

# The integers each integer column type holds on PostgreSQL (SQLite holds 64 bits in any column).
_INTEGER_RANGES = {"SMALLINT": 16, "INTEGER": 32, "BIGINT": 64}


def missing_columns(table, names) -> str | None:
    """A message when ``table`` (a reflected ``sa.Table``) lacks one of ``names``, else None."""
    unknown = [name for name in names if name not in table.c]
    if not unknown:
        return None
    return (f"table {table.fullname!r} has no column {', '.join(map(repr, unknown))}; its columns: "
            f"{', '.join(table.c.keys())}")


def key_problem(engine, table, key: tuple[str, ...]) -> str | None:
    """Why ``key`` cannot be upserted by in ``table``, else None: a column the table lacks, or no
    primary key, unique constraint or unique index (not a partial one) on exactly those columns,
    which ``INSERT ... ON CONFLICT (key)`` needs."""
    import sqlalchemy as sa

    problem = missing_columns(table, key)
    if problem is not None:
        return f"key {', '.join(key)}: {problem}"
    inspector = sa.inspect(engine)
    name, schema = table.name, table.schema
    unique = [inspector.get_pk_constraint(name, schema=schema).get("constrained_columns") or []]
    unique += [c["column_names"] for c in inspector.get_unique_constraints(name, schema=schema)]
    unique += [index["column_names"] for index in inspector.get_indexes(name, schema=schema)
               if index.get("unique") and not _partial(index)]
    if any(set(columns) == set(key) and None not in columns for columns in unique):
        return None
    return (f"key {', '.join(key)}: table {table.fullname!r} has no primary key, unique constraint "
            f"or unique index on exactly ({', '.join(key)}), which an upsert needs (ON CONFLICT)")


def _partial(index: dict) -> bool:
    return any(option.endswith("_where") and value is not None
               for option, value in index.get("dialect_options", {}).items())


def record_problem(table, dialect: str, key: tuple[str, ...] | None, record) -> str | None:
    """Why ``table`` would refuse ``record`` (a dict of column values), as far as that is known
    exactly without asking the database, else None: a record that is no dict, a column the table
    lacks, a key column missing, a NUL character in text (PostgreSQL), an integer out of its
    column's range, text longer than its column's length (PostgreSQL), no value (None, or a column
    left out without a default) for a NOT NULL column."""
    if not isinstance(record, dict):
        return f"records must be dicts of column values, got {type(record).__name__}"
    problem = missing_columns(table, record)
    if problem is not None:
        return problem
    for name in key or ():
        if name not in record:
            return f"the record has no value of the key column {name!r}"
    for column in table.c:
        if column.name not in record:
            if not column.nullable and not _fills_itself(column, dialect):
                return f"column {column.name!r} is NOT NULL and has no default: the record has no value"
            continue
        problem = _value_problem(column, dialect, record[column.name])
        if problem is not None:
            return f"column {column.name!r}: {problem}"
    return None


def _fills_itself(column, dialect: str) -> bool:
    """Whether the database gives ``column`` a value when an INSERT leaves it out."""
    if column.server_default is not None or column.identity is not None:
        return True
    return dialect == "sqlite" and column.primary_key and _type_name(column) == "INTEGER"


def _type_name(column) -> str:
    try:
        return type(column.type).__visit_name__.upper()
    except AttributeError:
        return ""


def _value_problem(column, dialect: str, value) -> str | None:
    if value is None:
        return None if column.nullable else "NOT NULL, the record's value is None"
    if isinstance(value, str):
        if dialect == "postgresql" and "\x00" in value:
            return f"PostgreSQL text cannot hold a NUL character (\\x00): {value!r:.80}"
        length = getattr(column.type, "length", None)
        if (dialect == "postgresql" and isinstance(length, int)
                and len(value.rstrip(" ")) > length):
            return f"{length} characters at most, got {len(value)}: {value!r:.80}"
    if isinstance(value, int) and not isinstance(value, bool):
        bits = (_INTEGER_RANGES.get(_type_name(column)) if dialect == "postgresql"
                else 64 if dialect == "sqlite" else None)
        if bits is not None and not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            kind = _type_name(column).lower() if dialect == "postgresql" else "an SQLite integer"
            return f"{value} is out of the range of {kind} ({bits}-bit integers)"
    return None
