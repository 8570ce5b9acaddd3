"""Reading a CSV file and a Parquet file of the same rows: gyreflow (local and Spark) against pyarrow's
readers and PySpark's spark.read, in one run.

Every case reads the whole file and counts the rows with ``quantity == 0`` (about 1 in 100), which
each case checks against the others. gyreflow reads with ``DirectorySource`` (one file: one source
task) and keeps the matching rows; pyarrow is timed twice: its columnar reader alone, and turning the
rows into Python dicts as gyreflow does (the target, gyreflow local within 2x of pyarrow for Parquet,
is measured against the latter). ``python benchmarks/connectors.py --megabytes 20`` is a quick run.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import tempfile

from _common import (
    command_line,
    format_rate,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
)

from gyreflow.api import DirectorySource, Environment, SizeTumblingWindow

SPARK_MASTER = "local[2]"
WINDOW = 200_000
PARQUET_TARGET = 2.0  # gyreflow local at most 2x pyarrow (rows as Python dicts) for Parquet


def make_files(folder: str, megabytes: int) -> tuple[str, str, int]:
    """A CSV file of about ``megabytes`` MB and a Parquet file of the same rows."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    rows = megabytes * 1_000_000 * 10 // 254  # about 25.4 bytes a CSV line
    rng = random.Random(7)
    cities = ["Oslo", "Lima", "Paris", "Nairobi", "Quito", "Osaka", "Perth", "Porto"]
    table = pa.table({
        "order_id": pa.array(range(rows), pa.int64()),
        "city": pa.array([cities[rng.randrange(8)] for _ in range(rows)]),
        "quantity": pa.array([rng.randrange(100) for _ in range(rows)], pa.int64()),
        "price": pa.array([round(rng.random() * 500, 2) for _ in range(rows)]),
    })
    os.makedirs(os.path.join(folder, "csv"))
    os.makedirs(os.path.join(folder, "parquet"))
    csv_path = os.path.join(folder, "csv", "orders.csv")
    parquet_path = os.path.join(folder, "parquet", "orders.parquet")
    pacsv.write_csv(table, csv_path, pacsv.WriteOptions(quoting_style="needed"))
    pq.write_table(table, parquet_path, row_group_size=100_000)
    return csv_path, parquet_path, rows


def gyreflow_count(env: Environment, folder: str, fmt: str) -> int:
    source = DirectorySource(folder, "*", format=fmt,
                             types={"order_id": int, "quantity": int, "price": float})
    pipeline = env.pipeline("read")

    @pipeline.task(name="read")
    def read(ctx):
        (ctx.source(source, SizeTumblingWindow(WINDOW), parallelism=1)
         .filter(lambda row: row["quantity"] == 0).collect("zero"))

    return len(pipeline.execute(fresh=True)["read"].output("zero"))


def pyarrow_columns(path: str, fmt: str) -> int:
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    table = pacsv.read_csv(path) if fmt == "csv" else pq.read_table(path)
    return pc.sum(pc.equal(table["quantity"], 0)).as_py()


def pyarrow_rows(path: str, fmt: str) -> int:
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    batches = (pacsv.open_csv(path) if fmt == "csv"
               else pq.ParquetFile(path).iter_batches(batch_size=100_000))
    return sum(1 for batch in batches for row in batch.to_pylist() if row["quantity"] == 0)


def spark_count(spark, path: str, fmt: str) -> int:
    reader = spark.read.option("header", "true").option("inferSchema", "true")
    frame = reader.csv(path) if fmt == "csv" else spark.read.parquet(path)
    return frame.filter("quantity = 0").count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=200, help="size of the CSV file")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="gyreflow-connectors-")
    try:
        csv_path, parquet_path, rows = make_files(folder, args.megabytes)
        local = Environment.local(progress=False, config={"state.backend": "memory"})
        cases = {}
        for fmt, path in (("csv", csv_path), ("parquet", parquet_path)):
            directory = os.path.dirname(path)
            cases[f"{fmt}: pyarrow, columns"] = lambda p=path, f=fmt: pyarrow_columns(p, f)
            cases[f"{fmt}: pyarrow, Python rows"] = lambda p=path, f=fmt: pyarrow_rows(p, f)
            cases[f"{fmt}: gyreflow local"] = lambda d=directory, f=fmt: gyreflow_count(local, d, f)
        if not args.no_spark:
            from pyspark.sql import SparkSession

            spark = (SparkSession.builder.master(SPARK_MASTER).appName("connectors-benchmark")
                     .config("spark.ui.enabled", "false")
                     .config("spark.ui.showConsoleProgress", "false").getOrCreate())
            on_spark = Environment.from_config(None, {
                "environment.type": "spark", "spark.master": SPARK_MASTER,
                "progress.enabled": False, "state.backend": "memory"})
            for fmt, path in (("csv", csv_path), ("parquet", parquet_path)):
                directory = os.path.dirname(path)
                cases[f"{fmt}: PySpark spark.read"] = lambda p=path, f=fmt: spark_count(spark, p, f)
                cases[f"{fmt}: gyreflow Spark {SPARK_MASTER}"] = (
                    lambda d=directory, f=fmt: gyreflow_count(on_spark, d, f))
        expected = pyarrow_columns(parquet_path, "parquet")

        def check(result) -> None:
            if result != expected:
                msg = f"counted {result} rows with quantity 0, pyarrow counted {expected}"
                raise AssertionError(msg)

        timings = interleaved_best_of(cases, args.repeat, check=dict.fromkeys(cases, check),
                                      on_run=lambda rep, name, s: print(f"  {rep}: {name}: {s:.2f} s"))
        table_rows = []
        for name, timing in timings.items():
            fmt = name.split(":")[0]
            reference = timings[f"{fmt}: pyarrow, Python rows"].best
            table_rows.append([name, format_seconds(timing.best), format_rate(rows / timing.best),
                               format_ratio(reference / timing.best)])
        size = os.path.getsize(csv_path) / 1e6
        parquet_size = os.path.getsize(parquet_path) / 1e6
        markdown = print_table(
            f"Reading {rows:,} rows: CSV {size:.0f} MB, Parquet {parquet_size:.0f} MB",
            ["format: engine", "seconds", "rows/s", "pyarrow (Python rows) time / this"],
            table_rows)
        ratio = timings["parquet: gyreflow local"].best / timings["parquet: pyarrow, Python rows"].best
        verdict = (f"Parquet, gyreflow local / pyarrow (Python rows): {ratio:.2f}x -> target <= "
                   f"{PARQUET_TARGET}x {'met' if ratio <= PARQUET_TARGET else 'NOT met'}")
        print(verdict)
        if args.write_docs:
            note = (f"{rows:,} rows: a CSV file of {size:.0f} MB, a Parquet file of "
                    f"{parquet_size:.0f} MB. "
                    f"Every case reads the whole file and counts rows with quantity 0; gyreflow reads "
                    f"one file with one source task, windows of {WINDOW:,} rows, memory state. "
                    f"{verdict}. Best of {args.repeat}; {machine_line()}.\n\n`{command_line()}`")
            update_docs_section("connectors", "## Connectors: reading CSV and Parquet\n\n" +
                                markdown + "\n\n" + note)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
