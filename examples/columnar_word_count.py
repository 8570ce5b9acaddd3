"""Columnar word count: Parquet files of words counted as Arrow columns, one JSON-lines file per window.

The words stay Arrow columns from the files to the count (``DirectorySource(..., columnar=True)``,
``key_by("word").count()``): no Python call per word. Give ``--input`` a directory of Parquet files
with a ``word`` column; with a text file instead (the default, the word count's sample) its words
are first written to ``OUTPUT-input/words.parquet``.
"""

from __future__ import annotations

import argparse
from json.encoder import encode_basestring
from pathlib import Path

from gyreflow.api import DirectorySource, Environment, FileSink, SizeTumblingWindow

DEFAULT_INPUT = Path(__file__).parent / "data" / "sample.txt"


def format_count(window: int, record: tuple[str, int]) -> str:
    """One output line: ``{"window": w, "word": ..., "count": n}`` (the count over windows 1..w)."""
    word, count = record
    return f'{{"window": {window}, "word": {encode_basestring(word)}, "count": {count}}}'


def words_as_parquet(text: Path, folder: Path) -> Path:
    """The words of a text file, in order, as one Parquet file with a ``word`` column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    words = text.read_text(encoding="utf-8").split()
    pq.write_table(pa.table({"word": pa.array(words, pa.string())}), folder / "words.parquet",
                   row_group_size=4096)
    return folder


def build(pipeline, input_dir: str, window: int, output: str, parallelism: int | None = None):
    """Add the columnar word count task to ``pipeline``."""

    @pipeline.task(name="columnar_word_count")
    def columnar_word_count(ctx):
        words = ctx.source(DirectorySource(input_dir, "*.parquet", format="parquet", columnar=True),
                           SizeTumblingWindow(window)).with_name("words").with_parallelism(1)
        counts = words.key_by("word").count().with_name("count")
        if parallelism is not None:
            counts.with_parallelism(parallelism)
        counts.sink(FileSink(output, format=format_count)).with_name("files")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run the columnar word count."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", default=str(DEFAULT_INPUT),
                        help="directory of Parquet files with a 'word' column, or a text file")
    parser.add_argument("--window", type=int, default=2000, help="words per window")
    parser.add_argument("--output", default="out/columnar-word-count", help="window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the count")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    source = Path(args.input)
    if source.is_file():
        source = words_as_parquet(source, Path(f"{args.output.rstrip('/')}-input"))
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("columnar-word-count"), str(source), args.window, args.output,
                     args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
