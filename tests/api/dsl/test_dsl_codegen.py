"""Expressions compiled to one function of the row (``api/dsl/codegen.py``) give what the per-node
closures give (``Scope.compile``) on random rows; a timestamp column read only as a window's event time
(left as epoch milliseconds) gives the windows of a plain loop."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dsl_duckdb import FLOATS, INTS, TEXT, conditions

from gyreflow.api import Environment
from gyreflow.api.dsl.codegen import row_method, rows_method
from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.parsing import GeaFlowDialect
from gyreflow.api.dsl.queries import Relation, Scope

COLUMNS = [(None, "id"), (None, "s"), (None, "n"), (None, "f")]
ROWS = st.tuples(st.integers(0, 8), TEXT, INTS, FLOATS)


@st.composite
def values(draw, depth=0):
    """An expression over the row: columns, numbers, + - * / %, MOD, comparisons, CASE."""
    if depth < 2 and draw(st.booleans()):
        op = draw(st.sampled_from(["+", "-", "*", "/", "%", "MOD", "CASE", "=", "<"]))
        left, right = draw(values(depth + 1)), draw(values(depth + 1))
        if op == "MOD":
            return f"MOD({left}, {right})"
        if op == "CASE":
            return f"CASE WHEN {left} > 0 THEN {right} ELSE {left} END"
        return f"({left} {op} {right})"
    return draw(st.sampled_from(["id", "n", "f", "1", "2.5", "-3", "0"]))


def outcome(fn):
    """A value, or the error it raised (the same one either way, SQL's or Python's)."""
    try:
        return ("value", repr(fn()))  # repr: NaN equals NaN
    except QueryError as exc:
        return ("error", exc.message)
    except (ArithmeticError, ValueError, TypeError) as exc:
        return ("error", type(exc).__name__)


@settings(max_examples=100, deadline=None)
@given(st.lists(conditions(), min_size=1, max_size=2), st.lists(values(), min_size=1, max_size=3),
       st.lists(ROWS, min_size=1, max_size=5))
def test_compiled_expressions_equal_the_closures(tests, items, rows):
    scope = Scope(Relation(COLUMNS, []), None)
    nodes = [sqlglot.parse_one(f"SELECT {text}", dialect=GeaFlowDialect).expressions[0]
             for text in [*tests, *items]]
    tested = [(scope.compile(node), row_method(node, scope, test=True)) for node in nodes[:len(tests)]]
    closures = [scope.compile(n) for n in nodes[len(tests):]]
    listed = rows_method(nodes[len(tests):], scope)
    for row in rows:
        for closure, compiled in tested:
            assert outcome(lambda c=compiled, r=row: c(_Failing(), r)) == \
                outcome(lambda c=closure, r=row: c((r, None)) is True)
        want = outcome(lambda r=row: tuple(c((r, None)) for c in closures))
        assert outcome(lambda r=row: listed(_Failing(), r)) == want


class _Failing:
    """The ``self`` of a compiled method: its errors go out as they came."""

    def failed(self, exc):
        return exc


EPOCH = dt.datetime(1970, 1, 1)


def test_a_timestamp_read_only_as_the_event_time_gives_a_loops_windows(tmp_path):
    events = [(i, f"k{i % 3}", 1_700_000_000_000 + i * 700 - (i % 4) * 300, i % 5) for i in range(60)]
    (tmp_path / "ev.txt").write_text("".join(",".join(map(str, e)) + "\n" for e in events), encoding="utf-8")
    script = ("SET gyreflow.dsl.time.zone = 'UTC';\n"
              "CREATE TABLE ev (id bigint, k varchar, ts timestamp, v int, "
              "WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) "
              f"WITH (type='file', geaflow.dsl.file.path='{tmp_path / 'ev.txt'}');\n"
              "SELECT k, window_start, count(*), sum(v) FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), "
              "INTERVAL '5' SECOND)) GROUP BY window_start, window_end, k;\n"
              "SELECT k, window_start, count(*), max(ts) FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), "
              "INTERVAL '5' SECOND)) GROUP BY window_start, window_end, k;\n")
    result = Environment.local(progress=False).sql(script)
    counts, sums, latest, highest = Counter(), Counter(), {}, None
    for _, k, ms, v in events:  # nothing is later than 2 s here: every event counts
        assert highest is None or ms > highest - 2000
        highest = ms if highest is None else max(highest, ms)
        start = ms // 5000 * 5000
        counts[(k, start)] += 1
        sums[(k, start)] += v
        latest[(k, start)] = max(latest.get((k, start), ms), ms)

    def at(ms):
        return EPOCH + dt.timedelta(milliseconds=ms)

    assert Counter(result.output("rows-3")) == Counter(
        (k, at(s), n, sums[(k, s)]) for (k, s), n in counts.items())
    assert Counter(result.output("rows-4")) == Counter(
        (k, at(s), n, at(latest[(k, s)])) for (k, s), n in counts.items())


def test_a_count_per_window_by_columns_gives_a_loops_counts(tmp_path):
    # COUNT(*) by columns runs on the window operator's own count (lowering._count_slots)
    events = [(i, f"k{i % 3}", 1_700_000_000_000 + i * 700, i % 2) for i in range(60)]
    (tmp_path / "ev.txt").write_text("".join(",".join(map(str, e)) + "\n" for e in events), encoding="utf-8")
    script = ("SET gyreflow.dsl.time.zone = 'UTC';\n"
              "CREATE TABLE ev (id bigint, k varchar, ts timestamp, v int) "
              f"WITH (type='file', geaflow.dsl.file.path='{tmp_path / 'ev.txt'}');\n"
              "SELECT window_end, v, count(*) AS n, k, window_start FROM TABLE(HOP(TABLE ev, "
              "DESCRIPTOR(ts), INTERVAL '5' SECOND, INTERVAL '10' SECOND)) "
              "GROUP BY k, v, window_start, window_end;\n"
              "SELECT k, count(*) FROM TABLE(TUMBLE(TABLE ev, DESCRIPTOR(ts), INTERVAL '10' SECOND)) "
              "GROUP BY window_start, window_end, k;\n")
    result = Environment.local(progress=False).sql(script)
    hops, tumbles = Counter(), Counter()
    for _, k, ms, v in events:
        for start in (ms // 5000 * 5000 - 5000, ms // 5000 * 5000):
            hops[(k, v, start)] += 1
        tumbles[(k, ms // 10_000)] += 1

    def at(ms):
        return EPOCH + dt.timedelta(milliseconds=ms)

    assert Counter(result.output("rows-3")) == Counter(
        (at(s + 10_000), v, n, k, at(s)) for (k, v, s), n in hops.items())
    assert Counter(result.output("rows-4")) == Counter((k, n) for (k, _), n in tumbles.items())
