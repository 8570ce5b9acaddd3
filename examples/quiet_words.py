"""Words that went quiet: a progress notification fires when a word has not been seen for N windows.

Each word's state is the last window it was seen in and its count so far. Seeing a word asks for a
notification N windows later; when that window's input is complete and the word was not seen since,
one line is written: ``{"word": w, "count": c, "last_seen": s, "quiet_at": s + N}``. The request is
keyed state, so after a crash and ``--resume`` every alert is written exactly once.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource, ProcessFunction, SizeTumblingWindow

DEFAULT_INPUT = Path(__file__).parent / "data" / "sample.txt"


class QuietWords(ProcessFunction):
    """Alert once a word has been absent for ``quiet`` windows."""

    def __init__(self, quiet: int) -> None:
        self.quiet = quiet

    def process(self, word, ctx) -> None:
        _, count = ctx.get_state((0, 0))
        ctx.set_state((ctx.window, count + 1))
        ctx.notify_at(ctx.window + self.quiet)

    def on_notify(self, window, ctx) -> None:
        last_seen, count = ctx.get_state()
        if last_seen + self.quiet == window:  # not seen since: a later sighting asked again
            ctx.emit({"word": ctx.key, "count": count, "last_seen": last_seen, "quiet_at": window})


def format_alert(window: int, alert: dict) -> str:
    return json.dumps(alert, ensure_ascii=False, sort_keys=True)


def build(pipeline, input_path: str, window: int, quiet: int, output: str,
          parallelism: int | None = None):
    """Add the quiet-words task to ``pipeline``."""

    @pipeline.task(name="quiet_words")
    def quiet_words(ctx):
        lines = (ctx.source(FileSource(input_path), SizeTumblingWindow(window))
                 .with_name("lines").with_parallelism(1))
        alerts = (lines.flat_map(str.split).with_name("split")
                  .key_by().process(QuietWords(quiet)).with_name("quiet"))
        if parallelism is not None:
            alerts.with_parallelism(parallelism)
        alerts.sink(FileSink(output, format=format_alert)).with_name("alerts")

    return pipeline


def main(argv: list[str] | None = None):
    """Parse arguments and run the job."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", default=str(DEFAULT_INPUT), help="text file, words per line")
    parser.add_argument("--window", type=int, default=200, help="lines per window")
    parser.add_argument("--quiet", type=int, default=3, help="windows without the word")
    parser.add_argument("--output", default="out/quiet-words", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the quiet step")
    args = parser.parse_args(argv)
    if args.quiet < 1 or args.window < 1:
        parser.error("--quiet and --window must be at least 1")
    env = Environment.from_config()
    return build(env.pipeline("quiet-words"), args.input, args.window, args.quiet, args.output,
                 args.parallelism).execute()


if __name__ == "__main__":
    main()
