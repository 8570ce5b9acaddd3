"""Streaming word count: cumulative counts per window, one JSON-lines file per window."""

from __future__ import annotations

import argparse
from json.encoder import encode_basestring
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource, SizeTumblingWindow

DEFAULT_INPUT = Path(__file__).parent / "data" / "sample.txt"


def format_count(window: int, record: tuple[str, int]) -> str:
    """One output line: the window, a word seen in it and the word's count over windows 1..window.

    The text of ``json.dumps({"window": window, "word": word, "count": count}, ensure_ascii=False)``,
    written directly: the word quoted by the json module's own string encoder, the numbers as ints.
    """
    word, count = record
    return f'{{"window": {window}, "word": {encode_basestring(word)}, "count": {count}}}'


def build(pipeline, input_path: str, window: int, output: str, parallelism: int | None = None):
    """Add the word count task to ``pipeline``."""

    @pipeline.task(name="word_count")
    def word_count(ctx):
        # One source task: a window is ``window`` consecutive lines whatever the parallelism of
        # the rest (each source task cuts its own input into windows).
        lines = (ctx.source(FileSource(input_path), SizeTumblingWindow(window))
                 .with_name("lines").with_parallelism(1))
        # The built-in count keeps ``(word, count so far)`` per word; its loop runs in C.
        counts = lines.flat_map(str.split).with_name("split").key_by().count().with_name("count")
        if parallelism is not None:
            counts.with_parallelism(parallelism)
        counts.sink(FileSink(output, format=format_count)).with_name("files")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run the word count."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", default=str(DEFAULT_INPUT), help="text file, one record per line")
    parser.add_argument("--window", type=int, default=500, help="lines per window")
    parser.add_argument("--output", default="out/word-count", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the counting step")
    parser.add_argument("--config", default=None, help="TOML config file")
    args = parser.parse_args(argv)
    env = Environment.from_config(args.config)
    pipeline = build(env.pipeline("word-count"), args.input, args.window, args.output,
                     args.parallelism)
    return pipeline.execute()


if __name__ == "__main__":
    main()
