"""The catalogue of a script: tables with their connectors' options, views, functions and settings."""

from __future__ import annotations

import os

import attrs
from sqlglot import exp

import gyreflow.api.dsl.functions as fns
from gyreflow.api.dsl.parsing import DslError, Statement
from gyreflow.api.dsl.rows import iter_text_chunks, resolve_path
from gyreflow.api.dsl.sql_types import typed_columns
from gyreflow.api.dsl.windowing import window_call

TABLE_TYPES = ("file", "jdbc")
WINDOW_SIZE = "geaflow.dsl.window.size"
SEPARATOR = "geaflow.dsl.column.separator"
# the files in which a stored graph keeps the rows of the tables it was first declared `using`
USING_PREFIX = "using-"
TIME_ZONE = "gyreflow.dsl.time.zone"  # where epoch milliseconds are shown (default: this machine's)


@attrs.define
class Table:
    """A table: its columns ``(name, type)`` and its ``WITH`` options."""

    name: str
    columns: list[tuple[str, str]]
    options: dict[str, str]

    @property
    def kind(self) -> str:
        return self.options.get("type", "file").lower()

    def option(self, key: str, settings: dict, default: str | None = None) -> str | None:
        """A table option, else the script's setting of the same key, else ``default``."""
        return self.options.get(key, settings.get(key, default))

    def path(self, settings: dict, root: str) -> str:
        path = self.options.get("geaflow.dsl.file.path")
        if not path:
            raise DslError(f"table {self.name} has no geaflow.dsl.file.path")
        return resolve_path(path, root)

    def separator(self, settings: dict) -> str:
        """``geaflow.dsl.column.separator`` (default ``,``), Java's escapes read (``'\\t'`` a tab)."""
        text = self.option(SEPARATOR, settings, ",")
        return {"\\t": "\t", "\\n": "\n", "\\r": "\r", "\\\\": "\\"}.get(text, text)

    def window_size(self, settings: dict) -> int:
        return int(self.option(WINDOW_SIZE, settings, "-1"))

    def read(self, settings: dict, root: str, needed: frozenset | None = None, lazy: bool = False,
             millis: frozenset = frozenset()):
        """Every row of the table, typed by its columns: a list, or if ``lazy`` an iterator of
        lists of them. Of a file table, only the columns at positions ``needed`` are typed (the
        others are None), and the timestamps at ``millis`` stay epoch milliseconds where they are."""
        types = [t for _, t in self.columns]
        if self.kind == "graphdata":
            from gyreflow.api.dsl.rows import read_json_rows

            rows = read_json_rows(self.options["path"], types, self.options.get("exclude", ()))
            return iter([rows]) if lazy else rows
        if self.kind == "jdbc":
            from gyreflow.api.dsl.jdbc import read_jdbc

            rows = read_jdbc(self, settings)
            return iter([rows]) if lazy else rows
        path = self.path(settings, root)
        if not os.path.exists(path):
            raise DslError(f"table {self.name}: no file or folder {path}")
        separator = self.separator(settings)
        trim = str(self.option("geaflow.dsl.column.trim", settings, "true")).lower() != "false"
        chunks = iter_text_chunks(path, types, separator, trim, settings.get(TIME_ZONE) or None, needed,
                                  millis, [c for c, _ in self.columns])
        return chunks if lazy else [row for rows in chunks for row in rows]


def _absolute(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


@attrs.define
class View:
    """A named query and the names it gives its columns."""

    name: str
    query: exp.Expression
    columns: list[str] | None


class Catalog:
    """Tables, views, functions and settings, by lower-case name; rows come from ``rows`` when bound."""

    def __init__(self, settings: dict | None = None, root: str = ".") -> None:
        self.settings: dict[str, str] = dict(settings or {})
        self.root = root
        self.tables: dict[str, Table] = {}
        self.views: dict[str, View] = {}
        self.functions: dict[str, str] = {}  # name -> Java class of CREATE FUNCTION
        self.rows: dict[str, list[tuple]] | None = None
        self.graphs: dict = {}  # name -> GraphDef
        self.graph_dirs: dict[str, str] = {}  # name -> the folder its inserted rows are kept in
        self.gql: dict = {}  # __gql_N_K -> GqlQuery
        self.extra: dict = {}  # name -> Relation (a MATCH's bindings)
        self.graph_cache: dict = {}
        self.current_graph: str | None = None
        self.subquery_compiler = None  # set while a MATCH is evaluated (graphs.py)
        self.window = None  # graph_windows.Window: a window of graphs the script's inserts stream in
        # the paths the script's INSERTs into file tables write, shared by every copy: a later
        # statement may read a table whose folder does not exist until such an INSERT runs
        self.written: set[str] = set()

    def copy(self) -> Catalog:
        other = Catalog(self.settings, self.root)
        other.tables, other.views = dict(self.tables), dict(self.views)
        other.functions, other.rows = dict(self.functions), self.rows
        other.graphs, other.graph_dirs, other.gql = dict(self.graphs), dict(self.graph_dirs), dict(self.gql)
        other.extra, other.graph_cache = dict(self.extra), self.graph_cache
        other.current_graph = self.current_graph
        other.subquery_compiler, other.window = self.subquery_compiler, self.window
        other.written = self.written
        return other

    def __getstate__(self):
        state = dict(self.__dict__)
        state["graph_cache"], state["extra"], state["subquery_compiler"] = {}, {}, None
        return state

    def with_relation(self, name: str, relation) -> Catalog:
        other = self.copy()
        other.extra[name.lower()] = relation
        return other

    # ---- graphs
    def add_graph(self, definition, directory: str) -> None:
        self.graphs[definition.name.lower()] = definition
        self.graph_dirs[definition.name.lower()] = directory
        for label, element in definition.types.items():
            columns = element.columns
            if element.table:
                table = self.table(element.table)
                if table is None:
                    raise DslError(f"graph {definition.name}: no table {element.table} for {element.label}")
                columns = element.columns = list(table.columns)
            key = self.graph_table(definition, label)
            options = {"type": "graphdata", "path": os.path.join(directory, label)}
            if element.table:  # its rows come from the table: not again from what loading it kept
                options["exclude"] = (USING_PREFIX,)
            self.tables[key] = Table(key, columns, options)

    def graph_sources(self) -> set[str]:
        """The tables graphs are built from (``using``)."""
        return {e.table.lower() for g in self.graphs.values() for e in g.types.values() if e.table}

    def graph_table(self, definition, label: str) -> str:
        """The name of the table that holds the rows inserted into a label of a graph."""
        return f"__graph_{definition.name.lower()}_{label.lower()}"

    def bound(self, rows: dict[str, list[tuple]]) -> Catalog:
        """This catalogue reading its tables' rows from ``rows`` (by table name) instead of files."""
        other = self.copy()
        other.rows, other.graph_cache = rows, {}
        return other

    def child(self, ctes: dict[str, exp.Expression]) -> Catalog:
        """With ``WITH name AS (query)`` views added."""
        other = self.copy()
        for name, query in ctes.items():
            other.views[name] = View(name, query, None)
        return other

    # ---- statements
    def add_table(self, statement: Statement) -> None:
        table = Table(statement.name, statement.columns, statement.options)
        if table.kind not in TABLE_TYPES:
            raise statement.error(f"table {table.name}: type '{table.kind}' is not a connector gyreflow's "
                                  f"SQL has", hint=f"types: {', '.join(TABLE_TYPES)}")
        self.tables[statement.name.lower()] = table

    def add_view(self, statement: Statement) -> None:
        self.views[statement.name.lower()] = View(statement.name, statement.query,
                                                  statement.target_columns)

    def add_function(self, statement: Statement) -> None:
        if statement.value not in fns.JAVA_CLASSES:
            raise statement.error(f"function {statement.name}: the Java class {statement.value} is not one "
                                  "gyreflow has an equivalent of")
        self.functions[statement.name.lower()] = statement.value

    def table(self, name: str) -> Table | None:
        return self.tables.get(name.lower())

    # ---- files, checked while the script is planned
    def will_write(self, table: Table) -> None:
        """Note that an INSERT of the script writes the folder of file table ``table``."""
        self.written.add(_absolute(table.path(self.settings, self.root)))

    def check_readable(self, table: Table) -> None:
        """Refuse a file table whose path names no file or folder before any data moves, unless an
        INSERT of the script writes there (the folder appears when that statement runs).

        >>> catalog = Catalog()
        >>> catalog.check_readable(Table("t", [("a", "int")], {"geaflow.dsl.file.path": "nope.txt"}))
        Traceback (most recent call last):
        ...
        gyreflow.api.dsl.errors.DslError: table t: no file or folder nope.txt
        """
        if table.kind != "file":
            return
        path = table.path(self.settings, self.root)
        if os.path.exists(path):
            return
        wanted = _absolute(path)
        if any(wanted == written or _inside(wanted, written) or _inside(written, wanted)
               for written in self.written):
            return
        raise DslError(f"table {table.name}: no file or folder {path}")

    # ---- what queries read
    def relation(self, name: str):
        from gyreflow.api.dsl.queries import QueryError, Relation

        key = name.lower()
        if key in self.extra:
            return self.extra[key]
        if key in self.gql:
            from gyreflow.api.dsl.graph_queries import evaluate_gql

            return evaluate_gql(self.gql[key], self, key)
        if key in self.views:
            view = self.views[key]
            result = self.evaluate(view.query)
            if view.columns:
                if len(view.columns) != len(result.columns):
                    raise QueryError(f"view {view.name} names {len(view.columns)} columns for a query "
                                     f"of {len(result.columns)}")
                return Relation([(None, c.lower()) for c in view.columns], result.rows)
            return result
        table = self.tables.get(key)
        if table is None:
            raise QueryError(f"no table or view {name}")
        columns = typed_columns(None, table.columns)  # each knows its declared type (sql_types)
        rows = self.rows.get(key, []) if self.rows is not None else table.read(self.settings, self.root)
        if table.kind == "jdbc" and rows and len(rows[0]) > len(columns):  # GeaFlow scans SELECT *
            columns += [(None, f"col{i}") for i in range(len(columns), len(rows[0]))]
        return Relation(columns, rows)

    def evaluate(self, query: exp.Expression):
        """The rows of ``query`` over this catalogue's tables and views."""
        from gyreflow.api.dsl.select import evaluate

        return evaluate(query, self)

    def base_tables(self, query: exp.Expression, seen: frozenset = frozenset()) -> list[str]:
        """The tables (not views) ``query`` reads, views followed, in order of first use."""
        found = []
        ctes = {c.alias.lower() for c in query.find_all(exp.CTE)}
        for node in query.find_all(exp.Table):
            call = window_call(node)
            key = call.table if call is not None else node.name.lower()
            if key in ctes or key in seen:
                continue
            if key in self.gql:
                graph = self.graphs.get((self.gql[key].graph or "").lower())
                for label, element in (graph.types.items() if graph else ()):
                    found.append(self.graph_table(graph, label))
                    if element.table:
                        found.append(element.table.lower())
            elif key in self.views:
                found.extend(self.base_tables(self.views[key].query, seen | {key}))
            elif key in self.tables:
                found.append(key)
        return list(dict.fromkeys(found))

    def _user(self, name: str, kind: str):
        cls = self.functions.get(name)
        if cls is None:
            return None
        found_kind, target = fns.JAVA_CLASSES[cls]
        return target if found_kind == kind else None

    def scalar(self, name: str):
        target = self._user(name, "scalar")
        return fns.SCALAR.get(target or name)

    def aggregate(self, name: str):
        target = self._user(name, "aggregate")
        return fns.AGGREGATE.get(target or name)

    def algorithm(self, name: str) -> str | None:
        """The algorithm a ``CREATE FUNCTION name AS 'java.Class'`` names, by its name here."""
        return self._user(name.lower(), "algorithm")

    def aggregate_parameter(self, name: str):
        return fns.AGGREGATE_WITH_PARAMETER.get(name)

    def table_function(self, name: str):
        return self._user(name, "table") or fns.TABLE.get(name)
