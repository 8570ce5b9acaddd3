"""Window functions over a SELECT's rows: ``ROW_NUMBER()``, ``RANK()``, ``DENSE_RANK()`` and the
aggregates ``OVER (PARTITION BY ... ORDER BY ... [ROWS|RANGE BETWEEN ...])``, computed per partition.

A window function sees every row of its SELECT (after WHERE and GROUP BY), so it runs where the query
operator does, over the rows so far. Its value per row is made once for all rows (``over_values``)
and read back by position when the SELECT list is evaluated (``Scope.over``)."""

from __future__ import annotations

from sqlglot import exp

from gyreflow.api.dsl.errors import QueryError
from gyreflow.api.dsl.grouping import same_key
from gyreflow.api.dsl.queries import _sort_key, ordering

RANKING = ("row_number", "rank", "dense_rank")


def _name(node: exp.Expression) -> str:
    return node.name.lower() if isinstance(node, exp.Anonymous) else node.sql_name().lower()


def _bound(value, side: str | None, current: int, size: int) -> int:
    """A frame bound of ROWS as a position within the partition (clamped to it)."""
    if isinstance(value, str) and value.upper() == "CURRENT ROW":
        return current
    if isinstance(value, str) and value.upper() == "UNBOUNDED":
        return 0 if (side or "").upper() == "PRECEDING" else size - 1
    offset = int(value.this) if isinstance(value, exp.Literal) else int(value)
    return current - offset if (side or "").upper() == "PRECEDING" else current + offset


def _frames(spec, members: list, peers: list) -> list[tuple[int, int]]:
    """``(first, last)`` positions in the partition of each row's frame. Without a spec: the rows up
    to the row and its peers (with ORDER BY), else the whole partition, as SQL says."""
    size = len(members)
    if spec is None:
        return [(0, peers[i]) for i in range(size)]
    kind = (spec.args.get("kind") or "").upper()
    start, end = spec.args.get("start"), spec.args.get("end")
    if kind == "RANGE":
        if str(start).upper() == "UNBOUNDED" and (end is None or str(end).upper() == "CURRENT ROW"):
            return [(0, peers[i]) for i in range(size)]
        if str(start).upper() == "UNBOUNDED" and str(end).upper() == "UNBOUNDED":
            return [(0, size - 1)] * size
        raise QueryError("a RANGE frame other than UNBOUNDED PRECEDING to CURRENT ROW is not supported")
    frames = []
    for i in range(size):
        first = _bound(start, spec.args.get("start_side"), i, size)
        last = i if end is None else _bound(end, spec.args.get("end_side"), i, size)
        frames.append((max(first, 0), min(last, size - 1)))
    return frames


def over_values(node: exp.Window, contexts: list, scope, grouped: bool) -> list:
    """The value of one window function for each of ``contexts`` (``(row, group rows, position)``)."""
    function = node.this
    name = _name(function)
    partition = [scope.compile(p) for p in node.args.get("partition_by") or []]
    order = node.args.get("order")
    keys = [(scope.compile(o.this), bool(o.args.get("desc"))) for o in order.expressions] if order else []
    if name not in RANKING and (grouped or not scope.is_aggregate(function)):
        raise QueryError(f"{name.upper()} OVER (...): a window function is ROW_NUMBER, RANK, "
                         "DENSE_RANK or an aggregate over the rows of a query without GROUP BY")
    if name in RANKING and not keys:
        raise QueryError(f"{name.upper()}() OVER (...) needs an ORDER BY")
    aggregate = scope.compile(function) if name not in RANKING else None
    partitions: dict[tuple, list] = {}
    for ctx in contexts:
        partitions.setdefault(same_key(tuple(p(ctx) for p in partition)), []).append(ctx)  # NaN: one
    values = [None] * len(contexts)
    for members in partitions.values():
        members.sort(key=ordering(keys))
        ordered = [tuple(_sort_key(fn(ctx)) for fn, _ in keys) for ctx in members]
        peers = list(range(len(members)))  # the last position of each row's peers
        for i in range(len(members) - 2, -1, -1):
            if ordered[i] == ordered[i + 1]:
                peers[i] = peers[i + 1]
        if name == "row_number":
            for i, ctx in enumerate(members):
                values[ctx[2]] = i + 1
        elif name in ("rank", "dense_rank"):
            rank = dense = 0
            for i, ctx in enumerate(members):
                if i == 0 or ordered[i] != ordered[i - 1]:
                    rank, dense = i + 1, dense + 1
                values[ctx[2]] = rank if name == "rank" else dense
        else:
            rows = [ctx[0] for ctx in members]
            for ctx, (first, last) in zip(members, _frames(node.args.get("spec"), members, peers),
                                          strict=True):
                values[ctx[2]] = aggregate((ctx[0], rows[first:last + 1]))
    return values
