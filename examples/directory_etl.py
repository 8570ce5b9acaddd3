"""Directory ETL: read (or follow) a folder where CSV files of orders land, clean the rows, total each
window's orders and revenue per city, and write one Parquet file per window.

    python -m gyreflow run examples/directory_etl.py -- --input landing/ --output out/revenue
    python -m gyreflow run --until-idle 30 examples/directory_etl.py -- --input landing/ --follow

Rows the CSV reader cannot read (a price that is no number, a missing cell) are set aside in
``--dead-letters`` instead of stopping the job. Files are read once each, across crashes and resumes.
"""

from __future__ import annotations

import argparse
from operator import itemgetter

from gyreflow.api import DirectorySource, Environment, ParquetSink, SizeTumblingWindow

TYPES = {"order_id": int, "quantity": int, "price": float}
COLUMNS = ["city", "orders", "revenue"]


def is_valid(row: dict) -> bool:
    """A row worth counting: a city, a positive quantity and a price."""
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
        (orders.filter(is_valid).with_name("valid").map(clean).with_name("clean")
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
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("directory-etl"), args.input, args.output, args.window,
                     args.follow, args.dead_letters, args.readers)
    return pipeline.execute()


if __name__ == "__main__":
    main()
