"""Planning a statement onto gyreflow's operators: table sources cut into windows, the query, a sink."""

from __future__ import annotations

import functools
import os

import attrs

from gyreflow.api.connectors.file_sink import FileSink
from gyreflow.api.connectors.sources import Source, SourceReader, _IteratorReader
from gyreflow.api.dsl.catalog import Catalog, Table
from gyreflow.api.dsl.incremental import is_incremental
from gyreflow.api.dsl.lowering import plan_shape, shape_of
from gyreflow.api.dsl.queries import QueryError, _over, own_nodes
from gyreflow.api.dsl.query_state import (
    KeptGraphs,
    apply_change,
    count_rows,
    difference,
    new_value,
    top_n,
    value_bytes,
)
from gyreflow.api.dsl.rows import format_row, json_row
from gyreflow.api.dsl.select import evaluate
from gyreflow.api.language.functions import ProcessFunction
from gyreflow.api.language.windows import AllWindow, SizeTumblingWindow
from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.keys.logged import slot_keys


@attrs.frozen(eq=False)
class TableSource(Source):
    """The rows of a table of the script, read where the source task runs."""

    table: Table
    settings: dict
    root: str
    needed: frozenset | None = None  # the positions of the columns the query reads (None: all)
    millis: frozenset = frozenset()  # timestamp columns left as epoch milliseconds where they are
    default_parallelism = 1

    def create_reader(self, task_index: int, parallelism: int):
        table, settings, root, needed, millis = self.table, self.settings, self.root, self.needed, self.millis
        if task_index:
            return _IteratorReader(lambda: iter(()))
        return ChunkReader(lambda: table.read(settings, root, needed, lazy=True, millis=millis))

    def describe(self) -> str:
        return f"TableSource({self.table.name}, {self.table.kind})"


class ChunkReader(SourceReader):
    """A reader over an iterator of lists of rows (a table read a chunk at a time): a batch is a
    slice of a chunk, not a row pulled at a time; the offset is the number of rows returned."""

    def __init__(self, make) -> None:
        self._make = make
        self._chunks, self._rows, self._at, self._consumed = make(), [], 0, 0

    def read(self, max_records: int) -> list:
        batch: list = []
        while len(batch) < max_records:
            if self._at >= len(self._rows):
                self._rows, self._at = next(self._chunks, None), 0
                if self._rows is None:
                    self._rows = []
                    break
                continue
            taken = self._rows[self._at:self._at + max_records - len(batch)]
            self._at += len(taken)
            batch = taken if not batch else batch + taken
        self._consumed += len(batch)
        return batch

    def offset(self) -> int:
        return self._consumed

    def seek(self, offset: object) -> None:
        self._chunks, self._rows, self._at, self._consumed = self._make(), [], 0, 0
        while self._consumed < int(offset):
            if not self.read(min(int(offset) - self._consumed, 65_536)):
                break

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


def _tag(name: str, row: tuple) -> tuple:
    return (name, row)


def _one_key(record) -> int:
    return 0


def _line(separator: str, window: int, row: tuple) -> str:
    return format_row(row, separator)


class QueryFunction(ProcessFunction):
    """Runs a query over the rows its tables delivered: per window, over that window's rows, or (for
    aggregates and the like) over every row so far, emitting the rows that changed. The tables of a
    graph (``graph``) grow window by window: a MATCH runs each window over the graph so far.

    The rows so far and the last result are a changelog (``query_state``): a snapshot writes the
    rows a window added and the result's difference. Over tables read in windows (``windowed``),
    the graphs are kept and grown by each window's rows, and a Top-N (``top``: ``(table, the
    query of its candidates)``) keeps only the rows that can still be in its result."""

    def __init__(self, query, catalog: Catalog, incremental: bool, graph: frozenset = frozenset(),
                 where: str = "", changes=None, windowed: bool = False, top=None) -> None:
        self.query, self.catalog, self.incremental, self.graph = query, catalog, incremental, graph
        self.where = where  # "statement N, line L": named by an error while the query runs
        self.changes = changes  # streaming.Changes of the graphs the script's inserts stream in
        self.windowed, self.top = windowed, top
        self.table = self.kept = None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["table"] = state["kept"] = None  # made again by ``open`` where the function runs
        return state

    def open(self, ctx) -> None:
        self.table = self.kept = None
        if self.incremental or self.graph:
            self.table = ctx.changelog(apply_change, value_bytes)
            groups = self.table.max_parallelism
            self.slot = slot_keys(groups)[key_group_of(_one_key(None), groups)][0]
            if self.graph and self.windowed:
                self.kept = KeptGraphs(self.catalog, self.graph)

    def process(self, record, ctx) -> None:
        name, row = record
        pending = ctx.get_state(None)  # this window's rows by table, until its notification
        if pending is None:
            pending = {}
            ctx.set_state(pending)
        rows = pending.get(ctx.window)
        if rows is None:
            rows = pending[ctx.window] = {}
            ctx.notify_at(ctx.window)
        listed = rows.get(name)
        if listed is None:
            rows[name] = [row]
        else:
            listed.append(row)

    def on_notify(self, window, ctx) -> None:
        pending = ctx.get_state(None) or {}
        rows = pending.pop(window, {})
        if pending:
            ctx.set_state(pending)
        else:
            ctx.clear_state()
        added, appended, replaced = rows, {}, {}
        value = None
        if self.table is not None:
            value = self.table.data.get(self.slot)
            if value is None:
                value = self.table.data[self.slot] = new_value()
            kept = value["all"]
            for name, new in rows.items():
                if (self.incremental or name in self.graph) and (self.top is None or name != self.top[0]):
                    kept.setdefault(name, []).extend(new)
                    appended[name] = new
            if self.top is not None and self.top[0] in rows:
                name, candidates = self.top
                replaced[name] = kept[name] = self._run(candidates, self.catalog.bound(
                    {name: kept.get(name, []) + rows[name]}), window)
            if self.incremental:
                rows = kept
            elif self.graph:
                rows = {**rows, **{name: kept.get(name, []) for name in self.graph}}
        catalog = self.catalog.bound(rows)
        if self.kept is not None:
            catalog.graph_cache.update(self.kept.grown(value, appended))
        if self.changes is not None:  # the graph so far, and what this window changed of it
            from gyreflow.api.dsl.graph_windows import Window

            catalog.window = Window(window, self.changes.touched(added), value["memory"],
                                    self.changes.calls)
        result = self._run(self.query, catalog, window)
        plus = minus = ()
        emitted = result
        if self.incremental:
            plus, minus = difference(value["last"], result)
            count_rows(value["last"], plus, minus)
            emitted = plus
        if value is not None:
            memory = value["memory"] or None
            if appended or replaced or plus or minus or memory:
                self.table.record(self.slot, (appended, replaced, plus, minus, memory))
        for row in emitted:
            ctx.emit(row)

    def _run(self, query, catalog: Catalog, window: int | None = None) -> list:
        """The rows of ``query``; an error names the statement, the window and (``RowError``) the
        expression and the row it failed on, not the operator's notification of the window."""
        try:
            return evaluate(query, catalog).rows
        except QueryError as exc:
            raise QueryError(f"{self._where(window)}: {exc.message}", hint=exc.hint) from None
        except (ArithmeticError, TypeError, LookupError) as exc:  # not one expression's on one row
            raise QueryError(f"{self._where(window)}: {type(exc).__name__}: {exc}") from exc

    def _where(self, window: int | None) -> str:
        return ", ".join(p for p in (self.where, f"window {window}" if window is not None else "") if p)


def window_of(table: Table, settings: dict):
    if table.kind == "graphdata":  # what earlier statements inserted into a graph: read whole
        return AllWindow()
    size = table.window_size(settings)
    return AllWindow() if size <= 0 else SizeTumblingWindow(size)


def plan_insert(ctx, query, catalog: Catalog, sink, number: int = 0, where: str = "",
                streamed=None) -> None:
    """Add to a pipeline task the streams of ``INSERT INTO sink query``: over one table, its own
    operators where they fit (``lowering``), else one query operator over every table it reads
    (and over the graphs the task's inserts stream in: ``streamed``, a ``streaming.Streamed``)."""
    _attach(plan_stream(ctx, query, catalog, where, streamed), sink, number)


def plan_stream(ctx, query, catalog: Catalog, where: str = "", streamed=None):
    """The stream of a query's result rows (see ``plan_insert``)."""
    shape = shape_of(query, catalog) if streamed is None else None
    if shape is not None:
        return plan_shape(shape, catalog, functools.partial(_table_rows, ctx, catalog), where)
    if streamed is None:  # joins, DISTINCT, UNION over tables read in windows: per window's rows
        from gyreflow.api.dsl.stream_queries import plan_stream_query

        planned = plan_stream_query(query, catalog, functools.partial(_table_rows, ctx, catalog), where)
        if planned is not None:
            return planned
    tables = catalog.base_tables(query)
    streams = []
    for name in tables:
        table = catalog.tables[name]
        stream = graph_rows(ctx, catalog, name, streamed).map(functools.partial(_tag, name)).with_name(
            f"rows of {table.name}")
        streams.append(stream)
    for name, changed in (streamed.calls.items() if streamed is not None else ()):
        streams.append(changed.map(functools.partial(_tag, name)).with_name(f"rows of {name}"))
    batch = all(catalog.tables[n].window_size(catalog.settings) <= 0 for n in tables)
    if not streams or (batch and _global_aggregate(query)):
        # a query of constants, or an aggregate without GROUP BY over whole tables, which gives its
        # one row even when the tables are empty: one empty trigger
        streams.append(ctx.source([("", ())], AllWindow(), name="values"))
    merged = streams[0].union(*streams[1:]) if len(streams) > 1 else streams[0]
    windowed = any(catalog.tables[n].window_size(catalog.settings) > 0 for n in tables)
    incremental = is_incremental(query) and windowed
    sources = catalog.graph_sources()
    graph = frozenset(n for n in tables if catalog.tables[n].kind == "graphdata" or n in sources)
    changes = streamed.changes if streamed is not None else None
    top = top_n(query, catalog, tables) if incremental and not graph else None
    function = QueryFunction(query, catalog.copy(), incremental, graph, where, changes,
                             windowed or streamed is not None, top)
    return merged.key_by(_one_key).process(function).with_name("query").with_parallelism(1)


def graph_rows(ctx, catalog: Catalog, name: str, streamed=None):
    """The rows of table ``name``; of a graph's label the task's inserts stream in, those of its
    folder that other jobs wrote and the inserts' rows window by window."""
    if streamed is None:
        return _table_rows(ctx, catalog, name)
    if name in streamed.made:
        return streamed.made[name]
    if name not in streamed.tables:
        streamed.made[name] = _table_rows(ctx, catalog, name)
        return streamed.made[name]
    table = catalog.tables[name]
    kept = Table(table.name, table.columns, {**table.options, "exclude": streamed.exclude[name]})
    stored = ctx.source(TableSource(kept, catalog.settings, catalog.root), AllWindow(),
                        name=f"table {table.name}").with_parallelism(1)
    streamed.made[name] = stored.union(*streamed.tables[name]).with_name(f"changes of {table.name}")
    return streamed.made[name]


def _global_aggregate(query) -> bool:
    """Whether a query is a SELECT of aggregates without GROUP BY (one row, even over no rows)."""
    from sqlglot import exp

    return (isinstance(query, exp.Select) and query.args.get("group") is None
            and any(isinstance(n, exp.AggFunc) and not _over(n)
                    for item in query.expressions for n in own_nodes(item)))


def table_rows(ctx, catalog: Catalog, name: str):
    """The rows of table ``name``, in its windows."""
    return _table_rows(ctx, catalog, name)


def _table_rows(ctx, catalog: Catalog, name: str, needed: frozenset | None = None,
                millis: frozenset = frozenset()):
    table = catalog.tables[name]
    catalog.check_readable(table)
    return ctx.source(TableSource(table, catalog.settings, catalog.root, needed, millis),
                      window_of(table, catalog.settings), name=f"table {table.name}").with_parallelism(1)


def _attach(result, sink, number: int) -> None:
    """The rows of a statement to its sink: a SELECT's collected, else a table's or a graph's sinks."""
    if sink is None:  # a SELECT: its rows are the task's result
        result.collect(f"rows-{number}")
    elif isinstance(sink, tuple):  # a table of a database: rows as dicts of its columns
        as_dict, table_sink = sink
        result.map(as_dict).with_name("columns").sink(table_sink).with_name("sink")
    elif isinstance(sink, list):  # labels of a graph: each its columns, in its type's order
        for i, (project, label_sink) in enumerate(sink):
            result.map(project).with_name(f"columns {i + 1}").sink(label_sink).with_name(f"sink {i + 1}")
    else:
        result.sink(sink).with_name("sink")


def _reorder(positions: tuple, row: tuple) -> tuple:
    return tuple(row[i] if i is not None else None for i in positions)


def graph_prefix(job: str, number: int) -> str:
    """The names of the files an INSERT of statement ``number`` of job ``job`` keeps a graph's rows
    in: a stored graph keeps the rows of every job that inserted into it, and a job run again (or
    resumed) replaces its own."""
    return f"{job}-statement{number}" if job else f"statement{number}"


def sink_of(statement, catalog: Catalog, graph_target, job: str = ""):
    """Where an INSERT's rows go: a file table, a database table, or a label of a graph (kept as
    JSON lines in the graph's folder, its columns in the type's order)."""
    if graph_target is not None:
        sinks = []
        for graph, element, columns, where in graph_target:
            order = [c.lower() for c, _ in element.columns]
            given = [c.lower() for c in columns] if columns else order
            at = where or list(range(len(given)))
            positions = tuple(at[given.index(c)] if c in given else None for c in order)
            folder = os.path.join(catalog.graph_dirs[graph.name.lower()], element.label.lower())
            sinks.append((functools.partial(_reorder, positions),
                          FileSink(folder, format=json_row, prefix=graph_prefix(job, statement.number),
                                   extension=".jsonl")))
        return sinks
    table = catalog.table(statement.name)
    if table.kind == "file":
        catalog.will_write(table)
        return file_sink(table, catalog)
    from gyreflow.api.dsl.jdbc import jdbc_sink

    return jdbc_sink(table, catalog.settings)


def file_sink(table: Table, catalog: Catalog) -> FileSink:
    """GeaFlow's file sink: lines of the row format in the folder of ``geaflow.dsl.file.path``."""
    separator = table.separator(catalog.settings)
    return FileSink(table.path(catalog.settings, catalog.root),
                    format=functools.partial(_line, separator), prefix="partition", extension="")
