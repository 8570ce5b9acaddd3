"""PostgresSource over a column whose values repeat (a timestamp shared by several rows) or are
NULL: a batch that would end among rows of one value never loses the rest of them, a resume inside
such a group reads each row once, windows keep their size, and NULL rows (which have no place in
the order) are never read, nor read again and again by a followed table. Checked against a Counter
of the table's rows and a plain sort on the real server the test command starts."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pytest
import sqlalchemy as sa

from gyreflow.api import PostgresSource, SizeTumblingWindow


@pytest.fixture
def database(postgres_database):
    """A new database on the test server, dropped afterwards."""
    return postgres_database


def make_events(engine, rows: list[tuple[int, int | None]]) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text("create table events (id integer, ts integer, note text)"))
        conn.execute(sa.text("insert into events values (:id, :ts, :note)"),
                     [{"id": i, "ts": ts, "note": f"n{i % 3}"} for i, ts in rows])


def seeded_rows(count: int = 61, seed: int = 7) -> list[tuple[int, int | None]]:
    """Ids 1..count with timestamps from a small range (long runs of equal values), every seventh
    one NULL, in shuffled insertion order."""
    chooser = random.Random(seed)
    rows = [(i, None if i % 7 == 0 else chooser.choice([1, 1, 1, 2, 5, 5, 8, 9, 9, 9, 9, 12]))
            for i in range(1, count + 1)]
    chooser.shuffle(rows)
    return rows


def assert_read_once_in_order(read: list[dict], rows: list[tuple[int, int | None]]) -> None:
    expected = Counter((i, ts) for i, ts in rows if ts is not None)
    assert Counter((r["id"], r["ts"]) for r in read) == expected
    stamps = [r["ts"] for r in read]
    assert stamps == sorted(stamps)


def test_windows_never_split_a_run_of_equal_values_apart(make_env, database):
    url, engine = database
    rows = seeded_rows()
    make_events(engine, rows)
    pipeline = make_env(1).pipeline("groups")
    pipeline.task(lambda ctx: ctx.source(PostgresSource(url, "events", "ts", columns=["id", "ts"]),
                                         SizeTumblingWindow(4)).collect("rows"), name="read")
    by_window = pipeline.execute()["read"].by_window("rows")
    windows = [by_window[w] for w in sorted(by_window)]
    assert_read_once_in_order([r for window in windows for r in window], rows)
    readable = sum(ts is not None for _, ts in rows)
    assert [len(w) for w in windows] == [4] * (readable // 4) + ([readable % 4] if readable % 4 else [])


@pytest.mark.parametrize("batch", [1, 2, 3, 5])
def test_a_reader_resumed_after_every_batch_reads_each_row_once(database, batch):
    """Each batch is read by a new reader from the offset the one before left (pickled, as a
    snapshot keeps it): resumes land inside runs of equal values."""
    url, engine = database
    rows = seeded_rows()
    make_events(engine, rows)
    source = PostgresSource(url, "events", "ts")  # the order column among the columns read
    read, offset = [], None
    while True:
        reader = source.create_reader(0, 1)
        reader.seek(offset)
        got = reader.read(batch)
        offset = pickle.loads(pickle.dumps(reader.offset()))
        reader.close()
        read.extend(got)
        if len(got) < batch:  # a short batch is the end of the table
            break
        assert len(got) == batch
    assert_read_once_in_order(read, rows)
    assert all(set(r) == {"id", "ts", "note"} for r in read)


def test_a_followed_table_with_null_values_reads_each_row_once(database):
    url, engine = database
    rows = [(1, 1), (2, None), (3, 2), (4, 2), (5, None)]
    make_events(engine, rows)
    source = PostgresSource(url, "events", "ts", columns=["id"], follow=True, poll_interval=0.05,
                            until_idle=None)
    reader = source.create_reader(0, 1)
    try:
        first = reader.poll(100, 0.3)
        assert first[0] == {"id": 1} and sorted(r["id"] for r in first) == [1, 3, 4]
        assert reader.poll(100, 0.3) == []  # nothing new: nothing again
        with engine.begin() as conn:
            conn.execute(sa.text("insert into events values (6, 3, 'x'), (7, null, 'x'), (8, 3, 'x')"))
        later = reader.poll(100, 0.5)
        assert sorted(r["id"] for r in later) == [6, 8]
        assert reader.poll(100, 0.3) == []
    finally:
        reader.close()
