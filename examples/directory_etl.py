"""Directory ETL: read (or follow) a folder where CSV files of orders land, clean the rows, total each
window's orders and revenue per city, and write one Parquet file per window.

    python -m gyreflow run examples/directory_etl.py -- --input landing/ --output out/revenue
    python -m gyreflow run --until-idle 30 examples/directory_etl.py -- --input landing/ --follow

Every CSV file needs a header with the columns ``city``, ``quantity`` and ``price`` (others, such
as ``order_id``, are allowed): a file without one of them is refused before anything runs, with one
line naming the file and the column and exit status 2 (a file that lands later while ``--follow``
runs stops the job at its first row, exit status 1, with an error naming the file). Rows the CSV
reader cannot read (a price that is no number, a missing cell) are set aside in ``--dead-letters``
instead of stopping the job. Files are read once each, across crashes and resumes.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import sys
from operator import itemgetter

from gyreflow.api import DirectorySource, Environment, ParquetSink, SizeTumblingWindow

TYPES = {"order_id": int, "quantity": int, "price": float}
REQUIRED = ("city", "quantity", "price")  # the columns every input file must have
COLUMNS = ["city", "orders", "revenue"]


def header_of(path: str) -> list[str] | None:
    """The column names of a CSV file (its first row that is not empty); None when it has none or
    cannot be read (the source reports such a file itself)."""
    try:
        with (gzip.open(path, "rt", encoding="utf-8", newline="") if path.endswith(".gz")
              else open(path, encoding="utf-8", newline="")) as file:
            return next((row for row in csv.reader(file) if row), None)
    except (OSError, UnicodeDecodeError, csv.Error, EOFError):
        return None


def missing_column(input_dir: str) -> str | None:
    """The first file in ``input_dir`` that lacks a column this ETL reads, named with the column."""
    for name in sorted(os.listdir(input_dir)) if os.path.isdir(input_dir) else []:
        path = os.path.join(input_dir, name)
        if name.startswith((".", "_")) or ".csv" not in name or not os.path.isfile(path):
            continue
        header = header_of(path)
        absent = [column for column in REQUIRED if header is not None and column not in header]
        if absent:
            return (f"{path}: no column {absent[0]!r} (directory_etl.py reads the columns "
                    f"{', '.join(REQUIRED)}; the file has {', '.join(header)})")
    return None


class ValidOrder:
    """The filter: a row worth counting has a city, a positive quantity and a price. A row without
    one of the columns comes from a file that landed while the job followed the folder: it stops
    the job, naming the file."""

    def __init__(self, input_dir: str) -> None:
        self.input_dir = input_dir

    def __call__(self, row: dict) -> bool:
        for column in REQUIRED:
            if column not in row:
                msg = missing_column(self.input_dir) or (
                    f"a row has no column {column!r} (directory_etl.py reads the columns "
                    f"{', '.join(REQUIRED)}): {row!r}")
                raise ValueError(msg)
        return bool((row.get("city") or "").strip()) and (row.get("quantity") or 0) > 0 \
            and row.get("price") is not None


def clean(row: dict) -> dict:
    """The city as a name (trimmed, capitalised), the row's revenue."""
    return {"city": row["city"].strip().title(), "revenue": row["quantity"] * row["price"]}


def city_totals(city: str, rows: list[dict], window) -> tuple[int, float]:
    """Orders and revenue of one city in one window."""
    return len(rows), round(sum(row["revenue"] for row in rows), 2)


def build(pipeline, input_dir: str, output: str, window: int, follow: bool = False,
          dead_letters: str | None = None, readers: int = 1):
    """Add the ETL task to ``pipeline``."""

    @pipeline.task(name="directory_etl")
    def etl(ctx):
        source = DirectorySource(input_dir, "*.csv*", format="csv", types=TYPES, follow=follow,
                                 dead_letters=dead_letters)
        orders = (ctx.source(source, SizeTumblingWindow(window), name="orders")
                  .with_parallelism(readers))
        (orders.filter(ValidOrder(input_dir)).with_name("valid").map(clean).with_name("clean")
         .key_by(itemgetter("city")).window().apply(city_totals).with_name("totals")
         .map(lambda pair: {"city": pair[0], "orders": pair[1][0], "revenue": pair[1][1]})
         .with_name("rows")
         .sink(ParquetSink(output, columns=COLUMNS)).with_name("parquet"))

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run the ETL."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True, help="folder the CSV files land in")
    parser.add_argument("--output", default="out/revenue", help="folder for the Parquet files")
    parser.add_argument("--window", type=int, default=1000, help="rows per window")
    parser.add_argument("--follow", action="store_true", help="keep reading files that land later")
    parser.add_argument("--dead-letters", default=None, help="folder for rows that cannot be read")
    parser.add_argument("--readers", type=int, default=1, help="source tasks reading files at once")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    problem = missing_column(args.input)
    if problem is not None:  # refused before anything runs: an empty output would look like success
        sys.stderr.write(f"error: {problem}\n")
        raise SystemExit(2)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("directory-etl"), args.input, args.output, args.window,
                     args.follow, args.dead_letters, args.readers)
    return pipeline.execute()


if __name__ == "__main__":
    main()
