"""Word count: gyreflow batch and stream against a plain Counter loop, PySpark RDDs and Bytewax;
with --main-job, the shipped examples against the API and a plain loop writing the same files."""

from __future__ import annotations

import argparse
import datetime
import math
import sys
from collections.abc import Callable

from _common import (
    DEFAULT_SEED,
    CountMismatchError,
    check_counts,
    command_line,
    format_rate,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)
from _wordcount_engines import (
    BATCH,
    BATCH_LAMBDAS,
    BYTEWAX,
    LOOP,
    SPARK,
    SPARK_MASTER,
    STREAM,
    STREAM_LAMBDAS,
    STREAM_WINDOW_LINES,
    STREAM_WINDOW_WORDS,
    VOCABULARY_SIZE,
    WORDS_PER_LINE,
    Engine,
    bytewax_engine,
    counter_loop,
    gyreflow_engine,
    spark_engine,
    start_spark,
)
from _wordcount_main_job import run_main_job
from rich.console import Console

from gyreflow.api import AllWindow, SizeTumblingWindow

# (engine, minimum share of the plain loop's words/s) and (engine, minimum multiple of Bytewax's)
# Both pipeline styles are held to the targets; the built-in count is the like-for-like peer of
# Bytewax's count_final, the lambda style shows the cost of three Python calls per word.
LOOP_TARGETS = ((BATCH, 0.40), (STREAM, 0.30), (BATCH_LAMBDAS, 0.40), (STREAM_LAMBDAS, 0.30))
BYTEWAX_TARGETS = ((BATCH, 2.0), (STREAM, 2.0), (BATCH_LAMBDAS, 2.0), (STREAM_LAMBDAS, 2.0))

err = Console(stderr=True)


# ---------------------------------------------------------------------------------------------
# Targets


def target_lines(words_per_s: dict[str, float]) -> list[str]:
    """One line per target: what it asks, the measured value and whether it is met."""
    lines = []
    loop = words_per_s.get(LOOP)
    for name, share in LOOP_TARGETS:
        if name in words_per_s and loop:
            value = words_per_s[name] / loop
            verdict = "met" if value >= share else "NOT met"
            lines.append(f"{name} >= {share:.0%} of the plain loop's words/s: "
                         f"{value:.0%} -> {verdict}")
    bytewax = words_per_s.get(BYTEWAX)
    for name, factor in BYTEWAX_TARGETS:
        if name not in words_per_s:
            continue
        if not bytewax:
            lines.append(f"{name} >= {factor:g}x Bytewax's words/s: n/a (Bytewax not run)")
            continue
        value = words_per_s[name] / bytewax
        verdict = "met" if value >= factor else "NOT met"
        lines.append(f"{name} >= {factor:g}x Bytewax's words/s: {value:.2f}x -> {verdict}")
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--words", type=int, default=2_000_000,
                        help="number of input words (default 2,000,000)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="repetitions; the best run of each engine counts (default 3)")
    parser.add_argument("--no-spark", action="store_true", help="skip PySpark")
    parser.add_argument("--no-bytewax", action="store_true", help="skip Bytewax")
    parser.add_argument("--bytewax-batch", type=int, default=1024,
                        help="TestingSource batch_size (default 1024 = gyreflow's "
                             "runtime.batch_size; Bytewax's own default of 1 is ~5x slower)")
    parser.add_argument("--main-job", action="store_true",
                        help="time the shipped examples against the API and a plain loop instead")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'wordcount' (or 'main-job') section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    for flag in ("words", "repeat", "bytewax_batch"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.main_job:
        return run_main_job(args)
    lines = word_lines(args.words, vocabulary_size=VOCABULARY_SIZE,
                       words_per_line=WORDS_PER_LINE, seed=DEFAULT_SEED)
    oracle = counter_loop(lines)
    expected = dict(oracle.run())
    notes = [
        f"Input: {args.words:,} words in {len(lines):,} lines of {WORDS_PER_LINE} "
        f"(vocabulary {VOCABULARY_SIZE:,} words, Zipf frequencies, seed {DEFAULT_SEED}); "
        f"{len(expected):,} distinct words occur.",
        f"Best of {args.repeat} interleaved repetitions per engine; every run's counts were "
        "checked against the Counter oracle.",
    ]

    stream_windows = math.ceil(len(lines) / STREAM_WINDOW_LINES)
    engines = [
        oracle,
        gyreflow_engine(BATCH, lines, AllWindow(), expected_windows=1),
        gyreflow_engine(STREAM, lines, SizeTumblingWindow(STREAM_WINDOW_LINES), stream_windows),
        gyreflow_engine(BATCH_LAMBDAS, lines, AllWindow(), expected_windows=1, lambdas=True),
        gyreflow_engine(STREAM_LAMBDAS, lines, SizeTumblingWindow(STREAM_WINDOW_LINES),
                        stream_windows, lambdas=True),
    ]
    notes.append(f"gyreflow: local environment, parallelism 1; batch = one AllWindow; stream = "
                 f"{stream_windows} SizeTumblingWindow({STREAM_WINDOW_LINES:,}) windows "
                 f"({STREAM_WINDOW_WORDS:,} words each), emitting updated counts after each.")
    skipped: set[str] = set()

    spark = None
    if args.no_spark:
        skipped.add(SPARK)
        notes.append("PySpark skipped (--no-spark).")
    else:
        err.print(f"[dim]starting SparkSession ({SPARK_MASTER})...[/dim]")
        try:
            spark, startup, warmup = start_spark()
        except Exception as exc:  # noqa: BLE001 - report any start-up failure and go on
            skipped.add(SPARK)
            notes.append(f"PySpark skipped: SparkSession failed to start ({exc!r:.200}).")
        else:
            engines.append(spark_engine(spark, lines))
            notes.append(f"PySpark: SparkSession start-up took {startup:.2f} s and a warm-up "
                         f"job starting the Python workers {warmup:.2f} s (both excluded from "
                         "the timing); spark.ui.enabled=false, log level ERROR, 2 partitions.")

    if args.no_bytewax:
        skipped.add(BYTEWAX)
        notes.append("Bytewax skipped (--no-bytewax).")
    else:
        try:
            engines.append(bytewax_engine(lines, args.bytewax_batch))
        except ImportError as exc:
            skipped.add(BYTEWAX)
            notes.append(f"Bytewax skipped: {exc}.")
        else:
            notes.append(f"Bytewax: one worker via bytewax.testing.run_main, TestingSource "
                         f"batch_size={args.bytewax_batch}, count_final.")

    def check(engine: Engine) -> Callable[[object], None]:
        return lambda result: check_counts(engine.name, engine.counts(result), expected)

    def progress(rep: int, name: str, seconds: float) -> None:
        err.print(f"[dim]repetition {rep}/{args.repeat}: {name}: {seconds:.3f} s[/dim]")

    try:
        timings = interleaved_best_of({e.name: e.run for e in engines}, args.repeat,
                                      check={e.name: check(e) for e in engines},
                                      on_run=progress)
    except CountMismatchError as exc:
        err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
        return 1
    finally:
        if spark is not None:
            spark.stop()

    words_per_s = {name: args.words / t.best for name, t in timings.items()}
    loop_seconds = timings[LOOP].best
    rows = []
    for name in (LOOP, BATCH, STREAM, BATCH_LAMBDAS, STREAM_LAMBDAS, SPARK, BYTEWAX):
        if name in timings:
            best = timings[name].best
            rows.append([name, format_seconds(best), format_rate(words_per_s[name]),
                         format_ratio(loop_seconds / best)])
        elif name in skipped:
            rows.append([name, "skipped", "-", "-"])

    print()
    table = print_table(f"Word count, {args.words:,} words",
                        ["engine", "seconds", "words/s", "vs plain loop"], rows)
    machine = machine_line()
    targets = target_lines(words_per_s)
    print()
    for note in [f"Machine: {machine}.", *notes]:
        print(note)
    print()
    print("Targets:")
    for line in targets:
        print(f"  {line}")

    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## Word count",
            "",
            "Count the words of the same generated text with each engine: gyreflow as a batch "
            "job (`AllWindow`) and as a stream of size windows, a plain-Python "
            "`collections.Counter` loop (the reference), a hand-written PySpark RDD job and a "
            "Bytewax dataflow. words/s is input words per second of the best run; "
            "\"vs plain loop\" is that throughput as a multiple of the loop's.",
            "",
            f"Run on {today} with `{command_line()}`.  ",
            f"Machine: {machine}.",
            "",
            table,
            "",
            *(f"- {note}" for note in notes),
            "",
            "Targets:",
            "",
            *(f"- {line}" for line in targets),
        ])
        path = update_docs_section("wordcount", section)
        print(f"\nUpdated the 'wordcount' section of {path}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
