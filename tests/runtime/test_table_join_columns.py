"""The stream-table join with ``merged=True`` (runtime/dataflow/columns/table_join.py): a record
with the table value's fields added, on rows and, keyed by columns, on column batches joined whole.

Oracle: a plain loop over the windows that keeps the latest table row per key and merges dicts.
On every environment, for columns and rows, inner and outer; a hypothesis property over random
keys (nulls among them), clashing fields and batch sizes.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import ArrowSource, Environment, SizeTumblingWindow

pa = pytest.importorskip("pyarrow")


def oracle(orders: list[dict], updates: list[dict], per_window: int, inner: bool) -> list[dict]:
    """Window by window: the window's table updates first, then its orders, each merged with the
    latest update of its key (the order's own fields win)."""
    table: dict = {}
    out = []
    windows = max(len(orders), len(updates)) // per_window + 1
    for w in range(windows):
        for update in updates[w * per_window:(w + 1) * per_window]:
            table[update["id"]] = update
        for order in orders[w * per_window:(w + 1) * per_window]:
            value = table.get(order["user"])
            if value is None:
                if not inner:
                    out.append(dict(order))
                continue
            merged = dict(order)
            for field, field_value in value.items():
                merged.setdefault(field, field_value)
            out.append(merged)
    return out


def comparable(rows: list[dict]) -> list:
    """Rows with their None fields dropped (a column batch has every column in every row)."""
    return sorted(repr(sorted((k, v) for k, v in row.items() if v is not None)) for row in rows)


def make_data(seed: int, orders: int, updates: int, keys: int = 12):
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(keys)]
    order_rows = [{"user": rng.choice([*users, None]), "amount": rng.randrange(100),
                   "n": i} for i in range(orders)]
    update_rows = [{"id": rng.choice(users), "city": rng.choice(["Oslo", "Rome", "Åre"]),
                    "amount": -1, "version": i} for i in range(updates)]
    return order_rows, update_rows


def run(environment, order_rows, update_rows, per_window, inner, columns, rows_per_batch=37):
    pipeline = environment.pipeline("enrich")

    def source(rows):
        if columns:
            return ArrowSource(pa.Table.from_pylist(rows), rows_per_batch=rows_per_batch)
        return rows

    @pipeline.task
    def job(ctx):
        orders = ctx.source(source(order_rows), SizeTumblingWindow(per_window)).with_parallelism(1)
        updates = ctx.source(source(update_rows), SizeTumblingWindow(per_window)).with_parallelism(1)
        orders.key_by("user").join_table(updates.key_by("id"), merged=True, inner=inner) \
            .collect("out")

    return pipeline.execute()["job"].output("out")


@pytest.mark.parametrize("inner", [True, False])
@pytest.mark.parametrize("columns", [True, False])
def test_merged_records_equal_a_plain_loop(make_env, inner, columns):
    order_rows, update_rows = make_data(4, 600, 90)
    got = run(make_env(3), order_rows, update_rows, 100, inner, columns)
    assert comparable(got) == comparable(oracle(order_rows, update_rows, 100, inner))


def test_merged_needs_no_function_and_dict_values():
    environment = Environment.local(progress=False)
    pipeline = environment.pipeline("refused")

    @pipeline.task
    def job(ctx):
        orders = ctx.source([{"user": "a"}]).key_by("user")
        with pytest.raises(ValueError, match="give no fn"):
            orders.join_table(ctx.source([]).key_by("id"), lambda r, v: r, merged=True)
        orders.join_table(ctx.source([("a", 1)]).key_by(lambda t: t[0]), merged=True) \
            .collect("out")

    from gyreflow.api import UserFunctionError

    with pytest.raises(UserFunctionError, match="joins dicts"):
        pipeline.execute()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), orders=st.integers(0, 200), updates=st.integers(0, 60),
       per_window=st.integers(1, 80), rows_per_batch=st.integers(1, 50), inner=st.booleans())
def test_any_keys_and_batches_merge_as_the_loop_does(seed, orders, updates, per_window,
                                                     rows_per_batch, inner):
    order_rows, update_rows = make_data(seed, orders, updates, keys=5)
    if not order_rows or not update_rows:
        return  # a source needs a schema to be columns
    got = run(Environment.local(progress=False), order_rows, update_rows, per_window, inner,
              True, rows_per_batch)
    assert comparable(got) == comparable(oracle(order_rows, update_rows, per_window, inner))
