"""Word count into PostgreSQL: running totals upserted by word, and every window's counts appended.

    python -m gyreflow run examples/postgres_sink.py -- --url postgresql://user@host/db

Each window is written in one transaction together with its window id, so a job killed at any
moment and run again with ``--resume`` leaves every row exactly once.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import sqlalchemy as sa

from gyreflow.api import ConfigError, Environment, FileSource, PostgresSink, SizeTumblingWindow
from gyreflow.api.connectors.postgres import check_database
from gyreflow.state.stores.sql_urls import driver_message, engine_url, shown_url

DEFAULT_INPUT = Path(__file__).parent / "data" / "sample.txt"


def create_tables(url: str, totals: str, by_window: str) -> None:
    """The tables the job writes into (kept when they exist); a database that refuses to create
    them stops the run in one line (exit status 2), its URL's password masked."""
    engine = sa.create_engine(engine_url(url))
    metadata = sa.MetaData()
    sa.Table(totals, metadata, sa.Column("word", sa.Text, primary_key=True),
             sa.Column("count", sa.BigInteger, nullable=False))
    sa.Table(by_window, metadata, sa.Column("window_id", sa.BigInteger, nullable=False),
             sa.Column("word", sa.Text, nullable=False),
             sa.Column("count", sa.BigInteger, nullable=False))
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
    except sa.exc.SQLAlchemyError as exc:
        msg = f"--url: cannot create the tables in {shown_url(url)}: {driver_message(url, exc)}"
        raise ConfigError(msg) from exc
    finally:
        engine.dispose()


def build(pipeline, input_path: str, window: int, url: str, totals: str, by_window: str):
    """Add the word count task to ``pipeline``."""

    @pipeline.task(name="word_count")
    def word_count(ctx):
        counts = (
            ctx.source(FileSource(input_path), SizeTumblingWindow(window))
            .with_name("lines").with_parallelism(1)
            .flat_map(str.split).with_name("split")
            .key_by().count().with_name("count")
            .map(lambda pair: {"word": pair[0], "count": pair[1]}).with_name("row")
        )
        counts.sink(PostgresSink(url, totals, key="word")).with_name("totals")
        counts.sink(PostgresSink(url, by_window, window_column="window_id")).with_name("windows")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments, create the tables and run the word count."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=str(DEFAULT_INPUT), help="text file, one record per line")
    parser.add_argument("--window", type=int, default=500, help="lines per window")
    parser.add_argument("--url", default=os.environ.get("GYREFLOW_EXAMPLE_POSTGRES_URL"),
                        help="database URL (default: $GYREFLOW_EXAMPLE_POSTGRES_URL)")
    parser.add_argument("--totals", default="word_totals", help="table of running totals")
    parser.add_argument("--by-window", default="word_counts", help="table of counts by window")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url is required (or set GYREFLOW_EXAMPLE_POSTGRES_URL)")
    env = Environment.from_config(args.config)
    check_database(args.url, "--url")  # a missing driver or a server that refuses: one line
    create_tables(args.url, args.totals, args.by_window)
    pipeline = build(env.pipeline("postgres-sink"), args.input, args.window, args.url,
                     args.totals, args.by_window)
    return pipeline.execute()


if __name__ == "__main__":
    main()
