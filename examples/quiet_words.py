"""Words that went quiet: a progress notification fires when a word has not been seen for N windows.

Each word's state is the last window it was seen in, its count so far and the window its alert is
due. Seeing a word in window s asks for a notification at s + N; when that window's input is complete
and the word was not seen since, one line is written:
``{"word": w, "count": c, "last_seen": s, "quiet_at": s + N}``. The request is keyed state, so after
a crash and ``--resume`` every alert is written exactly once.

With its defaults (the shipped sample text, windows of 10 lines, N = 3) it writes alerts from window
4 on, 614 in all: the sample's small vocabulary recurs in every window of 200 lines, so windows that
long leave no word quiet.

N is the operator's parameter ``quiet`` (``--quiet``, the config key ``control.parameters``
``{ "quiet.quiet" = 5 }``, or ``gyreflow control set quiet quiet 5`` while the job runs: sightings
from the window it takes effect on use the new N).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gyreflow.api import Environment, FileSink, FileSource, ProcessFunction, SizeTumblingWindow

DEFAULT_INPUT = Path(__file__).parent / "data" / "sample.txt"


class QuietWords(ProcessFunction):
    """Alert once a word has been absent for ``quiet`` windows."""

    def __init__(self, quiet: int) -> None:
        self.quiet = quiet

    def process(self, word, ctx) -> None:
        _, count, _ = ctx.get_state((0, 0, 0))
        due = ctx.window + ctx.parameter("quiet", self.quiet)
        ctx.set_state((ctx.window, count + 1, due))
        ctx.notify_at(due)

    def on_notify(self, window, ctx) -> None:
        last_seen, count, due = ctx.get_state()
        if due == window:  # not seen since: a later sighting moved the alert
            ctx.emit({"word": ctx.key, "count": count, "last_seen": last_seen, "quiet_at": window})


def format_alert(window: int, alert: dict) -> str:
    return json.dumps(alert, ensure_ascii=False, sort_keys=True)


def paced(seconds: float):
    """A line as it is, after ``seconds`` (to watch or steer a run while it goes)."""
    def wait(line: str) -> str:
        time.sleep(seconds)
        return line
    return wait


def build(pipeline, input_path: str, window: int, quiet: int, output: str,
          parallelism: int | None = None, pace: float = 0.0):
    """Add the quiet-words task to ``pipeline``."""

    @pipeline.task(name="quiet_words")
    def quiet_words(ctx):
        lines = (ctx.source(FileSource(input_path), SizeTumblingWindow(window))
                 .with_name("lines").with_parallelism(1))
        if pace:
            lines = lines.map(paced(pace)).with_name("pace")
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
    parser.add_argument("--window", type=int, default=10, help="lines per window")
    parser.add_argument("--quiet", type=int, default=3, help="windows without the word")
    parser.add_argument("--output", default="out/quiet-words", help="directory for window files")
    parser.add_argument("--parallelism", type=int, default=None, help="tasks for the quiet step")
    parser.add_argument("--pace", type=float, default=0.0, help="seconds to wait per line")
    args = parser.parse_args(argv)
    if args.quiet < 1 or args.window < 1:
        parser.error("--quiet and --window must be at least 1")
    env = Environment.from_config()
    return build(env.pipeline("quiet-words"), args.input, args.window, args.quiet, args.output,
                 args.parallelism, args.pace).execute()


if __name__ == "__main__":
    main()
