"""Directory sources (text, JSON lines, CSV, Parquet, .gz, globs, followed directories, dead letters)
and CSV/Parquet sinks, in every environment, against the csv module, json and pyarrow as oracles."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from gyreflow.api import (
    CsvSink,
    DirectorySource,
    ParquetSink,
    SizeTumblingWindow,
    TimeTumblingWindow,
)
from gyreflow.api.config import ConfigError
from gyreflow.api.connectors.directory_source import owner_task
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def run(env, build, name: str = "job"):
    pipeline = env.pipeline("connectors")
    pipeline.task(build, name=name)
    return pipeline.execute()[name]


def frozen(record):
    """A hashable form of a record, for Counter."""
    if isinstance(record, dict):
        return tuple(sorted((k, frozen(v)) for k, v in record.items()))
    if isinstance(record, list):
        return tuple(frozen(v) for v in record)
    return record


def bag(records) -> Counter:
    return Counter(frozen(r) for r in records)


# --- oracles: the standard library and pyarrow reading the same files ----------------------------


def csv_oracle(paths: list[Path], types: dict) -> list[dict]:
    out = []
    for path in paths:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                out.append({k: (types[k](v) if k in types and v != "" else
                                (None if k in types else v)) for k, v in row.items()})
    return out


def write_csv(path: Path, rows: list[dict], compress: bool = False) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    data = buffer.getvalue().encode("utf-8")
    path.write_bytes(gzip.compress(data) if compress else data)


def sales(count: int, start: int = 0) -> list[dict]:
    cities = ["Oslo", "Lima", 'Quote "Q"', "Comma, City", "Multi\nLine"]
    return [{"id": str(i), "city": cities[i % len(cities)], "amount": str(round(i * 1.25, 2)),
             "note": "" if i % 4 == 0 else f"n{i}"} for i in range(start, start + count)]


@pytest.fixture
def csv_dir(tmp_path) -> tuple[Path, list[Path]]:
    folder = tmp_path / "in"
    (folder / "2026" / "11").mkdir(parents=True)
    files = [folder / "a.csv", folder / "b.csv.gz", folder / "2026" / "11" / "c.csv"]
    write_csv(files[0], sales(23))
    write_csv(files[1], sales(17, 100), compress=True)
    write_csv(files[2], sales(9, 200))
    (folder / "_incoming.csv").write_text("id,city\n999,hidden\n", encoding="utf-8")
    (folder / ".partial.csv").write_text("id,city\n998,hidden\n", encoding="utf-8")
    (folder / "readme.txt").write_text("not a csv file\n", encoding="utf-8")
    return folder, files


TYPES = {"id": int, "amount": float}


@pytest.mark.parametrize("parallelism", [1, 3])
def test_csv_files_are_read_once_each_with_types_globs_and_gzip(make_env, csv_dir, parallelism):
    folder, files = csv_dir
    source = DirectorySource(folder, "**/*.csv*", format="csv", types=TYPES)
    assert source.files() == ["2026/11/c.csv", "a.csv", "b.csv.gz"]  # by name, hidden skipped
    env = make_env(parallelism, **{"runtime.batch_size": 4})
    result = run(env, lambda ctx: ctx.source(source, SizeTumblingWindow(10)).collect("rows"))
    expected = csv_oracle(files, TYPES)
    assert bag(result.output("rows")) == bag(expected)
    # Each source task reads its own files and cuts them into windows of 10 records.
    per_task = Counter()
    for path in files:
        per_task[owner_task(str(path.relative_to(folder)), parallelism)] += len(
            csv_oracle([path], TYPES))
    assert len(result.by_window("rows")) == max(-(-n // 10) for n in per_task.values())


def test_one_task_reads_files_in_name_order_and_rows_in_file_order(make_env, csv_dir):
    folder, files = csv_dir
    source = DirectorySource(folder, "**/*.csv*", format="csv", types=TYPES)
    result = run(make_env(1), lambda ctx: ctx.source(source, SizeTumblingWindow(7)).collect("rows"))
    ordered = [files[2], files[0], files[1]]
    assert [r for w in sorted(result.by_window("rows")) for r in result.by_window("rows")[w]] == \
        csv_oracle(ordered, TYPES)


def test_mtime_order_reads_the_oldest_file_first(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for index, name in enumerate(["z.txt", "m.txt", "a.txt"]):
        (folder / name).write_text(f"{name}\n", encoding="utf-8")
        os.utime(folder / name, ns=(10**18 + index * 10**9, 10**18 + index * 10**9))
    assert DirectorySource(folder, order="mtime").files() == ["z.txt", "m.txt", "a.txt"]
    assert DirectorySource(folder, order="name").files() == ["a.txt", "m.txt", "z.txt"]


def test_files_are_spread_over_the_source_tasks(tmp_path):
    names = [f"part-{i:03d}.jsonl" for i in range(60)]
    owners = Counter(owner_task(name, 3) for name in names)
    assert set(owners) == {0, 1, 2} and min(owners.values()) >= 10


def test_json_lines_and_text_lines(make_env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    events = [{"user": f"u{i % 4}", "clicks": i, "tags": ["x"] * (i % 3)} for i in range(25)]
    (folder / "one.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:12]) + "\n",
                                      encoding="utf-8")
    (folder / "two.jsonl.gz").write_bytes(gzip.compress(
        "".join(json.dumps(e) + "\n" for e in events[12:]).encode()))
    result = run(make_env(2), lambda ctx: [
        ctx.source(DirectorySource(folder, "*.jsonl*", format="jsonl")).collect("events"),
        ctx.source(DirectorySource(folder, "one.jsonl")).collect("lines"),
    ])
    assert bag(result.output("events")) == bag(events)
    text = (folder / "one.jsonl").read_text(encoding="utf-8")
    assert Counter(result.output("lines")) == Counter(text.splitlines())


def write_parquet(path: Path, rows: list[dict], row_group_size: int) -> None:
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_parquet_row_groups_and_column_selection(make_env, tmp_path, parallelism):
    folder = tmp_path / "in"
    folder.mkdir()
    rows = [{"id": i, "city": f"c{i % 5}", "amount": i * 0.5, "big": "x" * 50} for i in range(90)]
    write_parquet(folder / "first.parquet", rows[:50], 16)
    write_parquet(folder / "second.parquet", rows[50:], 7)
    source = DirectorySource(folder, "*.parquet", format="parquet", columns=["id", "amount"])
    env = make_env(parallelism, **{"runtime.batch_size": 5})
    result = run(env, lambda ctx: ctx.source(source, SizeTumblingWindow(20)).collect("rows"))
    expected = []
    for name in ("first.parquet", "second.parquet"):
        expected += pq.read_table(folder / name, columns=["id", "amount"]).to_pylist()
    assert bag(result.output("rows")) == bag(expected)


def test_a_malformed_row_names_the_file_and_line(make_env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("id,amount\n1,2.5\n2,oops\n3,1\n", encoding="utf-8")
    pipeline = make_env(1).pipeline("bad")
    source = DirectorySource(folder, format="csv", types=TYPES)
    pipeline.task(lambda ctx: ctx.source(source).collect("rows"), name="job")
    with pytest.raises(DataError) as caught:
        pipeline.execute()
    message = str(caught.value)
    assert f"{folder / 'a.csv'}, line 3" in message and "'oops'" in message
    assert "amount" in message and "dead_letters" in message


def test_malformed_records_go_to_dead_letters_once(make_env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    good = [{"n": i} for i in range(10)]
    lines = [json.dumps(r) for r in good]
    lines.insert(3, "{not json")
    lines.insert(8, '{"n": ')
    (folder / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "b.parquet").write_bytes(b"PAR1 but not really a parquet file PAR1")
    letters = tmp_path / "dead"
    result = run(make_env(1, **{"runtime.batch_size": 2}), lambda ctx: [
        ctx.source(DirectorySource(folder, "*.jsonl", format="jsonl", dead_letters=letters),
                   SizeTumblingWindow(3)).collect("rows"),
        ctx.source(DirectorySource(folder, "*.parquet", format="parquet",
                                   dead_letters=letters / "pq")).collect("pq"),
    ])
    assert bag(result.output("rows")) == bag(good)
    dead = [json.loads(line) for line in (letters / "dead-letters-0000.jsonl").read_text().splitlines()]
    assert [(d["file"], d["where"], d["text"]) for d in dead] == [
        ("a.jsonl", "line 4", "{not json"), ("a.jsonl", "line 9", '{"n": ')]
    assert result.output("pq") == []
    (parquet_letter,) = (letters / "pq" / "dead-letters-0000.jsonl").read_text().splitlines()
    assert json.loads(parquet_letter)["file"] == "b.parquet"


def test_bad_settings_fail_before_any_data_moves(tmp_path):
    with pytest.raises(ConfigError, match="format 'xml' is not one of text, jsonl, csv, parquet"):
        DirectorySource(tmp_path, format="xml")
    with pytest.raises(ConfigError, match="order 'size' is not one of name, mtime"):
        DirectorySource(tmp_path, order="size")
    with pytest.raises(ConfigError, match="does not exist"):
        DirectorySource(tmp_path / "missing")


def test_a_followed_directory_reads_files_that_appear_later_then_ends_when_idle(make_env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_csv(folder / "000.csv", sales(5))
    batches = [sales(6, 10 * (i + 1)) for i in range(3)]

    def land():
        for index, rows in enumerate(batches, start=1):
            time.sleep(0.6)
            staged = folder / f"_{index:03d}.csv"  # written under a hidden name, then renamed
            write_csv(staged, rows)
            os.replace(staged, folder / f"{index:03d}.csv")

    source = DirectorySource(folder, format="csv", types=TYPES, follow=True, poll_interval=0.1,
                             until_idle=2.5)
    writer = threading.Thread(target=land)
    writer.start()
    started = time.monotonic()
    try:
        result = run(make_env(1), lambda ctx: ctx.source(source, TimeTumblingWindow(0.5))
                     .collect("rows"))
    finally:
        writer.join()
    assert bag(result.output("rows")) == bag(csv_oracle(sorted(folder.glob("*.csv")), TYPES))
    assert len(result.output("rows")) == 23
    assert time.monotonic() - started >= 1.8 + 2.5  # the last file, then the idle time


# --- sinks -----------------------------------------------------------------------------------------


def window_chunks(records: list, size: int) -> dict[int, list]:
    return {n // size + 1: records[n:n + size] for n in range(0, len(records), size)}


def test_csv_sink_writes_one_file_per_window_that_the_csv_module_reads_back(make_env, tmp_path):
    rows = [{"id": i, "city": ["Oslo", "Comma, City", 'Q "x"'][i % 3], "note": None if i % 2 else "n"}
            for i in range(11)]
    out = tmp_path / "out"
    run(make_env(1), lambda ctx: ctx.source(rows, SizeTumblingWindow(4)).sink(CsvSink(out)))
    assert sorted(os.listdir(out)) == [f"window-{w:06d}.csv" for w in (1, 2, 3)]
    for window, chunk in window_chunks(rows, 4).items():
        with open(out / f"window-{window:06d}.csv", encoding="utf-8", newline="") as handle:
            read = list(csv.DictReader(handle))
        assert read == [{"id": str(r["id"]), "city": r["city"], "note": r["note"] or ""}
                        for r in chunk]


@pytest.mark.parametrize("parallelism", [1, 2])
def test_parquet_sink_files_read_back_with_pyarrow(make_env, tmp_path, parallelism):
    rows = [{"id": i, "score": i / 4, "name": f"n{i}"} for i in range(30)]
    out = tmp_path / "out"
    run(make_env(1), lambda ctx: ctx.source(rows, SizeTumblingWindow(8))
        .sink(ParquetSink(out, columns=["name", "id"])).with_parallelism(parallelism))
    names = sorted(os.listdir(out))
    assert all(name.endswith(".parquet") for name in names)
    by_window: dict[int, list] = {}
    for name in names:
        window = int(name.split("-")[1].split(".")[0])
        table = pq.read_table(out / name)
        assert table.column_names == ["name", "id"]
        by_window.setdefault(window, []).extend(table.to_pylist())
    assert {w: bag(r) for w, r in by_window.items()} == {
        w: bag({"name": r["name"], "id": r["id"]} for r in chunk)
        for w, chunk in window_chunks(rows, 8).items()}
