"""Word count: gyreflow batch and stream against a plain Counter loop, PySpark RDDs and Bytewax;
with --main-job, the shipped examples against the API and a plain loop writing the same files."""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from operator import add
from pathlib import Path

from _common import (
    DEFAULT_SEED,
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
from rich.console import Console

from gyreflow.api import AllWindow, Environment, SizeTumblingWindow, Window

VOCABULARY_SIZE = 1000
WORDS_PER_LINE = 10
STREAM_WINDOW_WORDS = 100_000
STREAM_WINDOW_LINES = STREAM_WINDOW_WORDS // WORDS_PER_LINE
SPARK_MASTER = "local[2]"

LOOP = "plain Counter loop"
BATCH = "gyreflow batch, key_by().count()"
STREAM = "gyreflow stream, key_by().count()"
BATCH_LAMBDAS = "gyreflow batch, map + reduce lambdas"
STREAM_LAMBDAS = "gyreflow stream, map + reduce lambdas"
SPARK = f"PySpark RDD {SPARK_MASTER}"
BYTEWAX = "Bytewax"

# (engine, minimum share of the plain loop's words/s) and (engine, minimum multiple of Bytewax's)
# Both pipeline styles are held to the targets; the built-in count is the like-for-like peer of
# Bytewax's count_final, the lambda style shows the cost of three Python calls per word.
LOOP_TARGETS = ((BATCH, 0.40), (STREAM, 0.30), (BATCH_LAMBDAS, 0.40), (STREAM_LAMBDAS, 0.30))
BYTEWAX_TARGETS = ((BATCH, 2.0), (STREAM, 2.0), (BATCH_LAMBDAS, 2.0), (STREAM_LAMBDAS, 2.0))

err = Console(stderr=True)


class CountMismatchError(Exception):
    """An engine's word counts differ from the Counter oracle."""


@dataclass
class Engine:
    """An engine: ``run()`` is timed; ``counts(result)`` (untimed) extracts its word counts."""

    name: str
    run: Callable[[], object]
    counts: Callable[[object], dict[str, int]]


# ---------------------------------------------------------------------------------------------
# The engines


def counter_loop(lines: list[str]) -> Engine:
    """The reference: ``collections.Counter`` updated line by line."""

    def run() -> Counter:
        counter: Counter = Counter()
        for line in lines:
            counter.update(line.split())
        return counter

    return Engine(LOOP, run, dict)


def gyreflow_engine(name: str, lines: list[str], window: Window,
                    expected_windows: int | None = None, lambdas: bool = False) -> Engine:
    """gyreflow on the local environment: split, then the built-in keyed count, or (``lambdas``)
    map to (word, 1) pairs, key by word and reduce with a lambda."""

    def run():
        env = Environment.local(progress=False)
        pipeline = env.pipeline("wordcount")

        @pipeline.task
        def wordcount(ctx):
            words = ctx.source(lines, window).flat_map(str.split)
            if lambdas:
                counts = (words.map(lambda w: (w, 1))
                          .key_by(lambda kv: kv[0])
                          .reduce(lambda a, b: (a[0], a[1] + b[1])))
            else:
                counts = words.key_by().count()
            counts.collect("counts")

        return pipeline.execute()

    def counts(result) -> dict[str, int]:
        windows = result["wordcount"].window_count
        if expected_windows is not None and windows != expected_windows:
            msg = f"{name}: ran {windows} windows, expected {expected_windows}"
            raise CountMismatchError(msg)
        # Each window emits the new cumulative count of every word it updated: keep the last.
        return dict(result.output("counts"))

    return Engine(name, run, counts)


def start_spark():
    """Start a SparkSession on ``local[2]`` without UI and warm it up with a tiny job.

    Returns (session, session start-up seconds, warm-up job seconds).
    """
    # Python workers must run the interpreter (and site-packages) this script runs in.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    start = time.perf_counter()
    spark = (SparkSession.builder.master(SPARK_MASTER).appName("gyreflow-wordcount-benchmark")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    started = time.perf_counter()
    # A tiny job launches the Python workers, which the timed jobs then reuse.
    spark.sparkContext.parallelize(range(2), 2).map(lambda x: x).collect()
    return spark, started - start, time.perf_counter() - started


def spark_engine(spark, lines: list[str]) -> Engine:
    """A hand-written RDD word count (the SparkSession is already running)."""
    sc = spark.sparkContext

    def run() -> list:
        return (sc.parallelize(lines, 2).flatMap(str.split).map(lambda w: (w, 1))
                .reduceByKey(add).collect())

    return Engine(SPARK, run, dict)


def bytewax_engine(lines: list[str], batch_size: int) -> Engine:
    """A Bytewax 0.21 dataflow: TestingSource -> flat_map split -> count_final -> TestingSink."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    def run() -> list:
        out: list = []
        flow = Dataflow("wordcount")
        words = op.flat_map("split", op.input("lines", flow, TestingSource(lines, batch_size)),
                            str.split)
        op.output("out", op.count_final("count", words, lambda w: w), TestingSink(out))
        run_main(flow)
        return out

    return Engine(BYTEWAX, run, dict)


# ---------------------------------------------------------------------------------------------
# Checks and report


def check_counts(engine: str, got: dict[str, int], expected: dict[str, int]) -> None:
    """Raise CountMismatchError describing how ``got`` differs from ``expected``."""
    if got == expected:
        return
    missing = sorted(expected.keys() - got.keys())
    extra = sorted(got.keys() - expected.keys())
    wrong = sorted(w for w in expected.keys() & got.keys() if got[w] != expected[w])
    parts = [f"{engine}: word counts differ from the Counter oracle"]
    if missing:
        parts.append(f"{len(missing)} words missing, e.g. {missing[:5]}")
    if extra:
        parts.append(f"{len(extra)} unexpected words, e.g. {extra[:5]}")
    if wrong:
        examples = ", ".join(f"{w!r}: {got[w]} != {expected[w]}" for w in wrong[:5])
        parts.append(f"{len(wrong)} wrong counts, e.g. {examples}")
    raise CountMismatchError("; ".join(parts))


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


# ---------------------------------------------------------------------------------------------
# The main job: the shipped example against the same job through the API and a plain loop

MAIN_WINDOWS = 100
MAIN_VOCABULARY = 10_000
EVENTS = 200_000
EVENT_KEYS = 1_000
EXAMPLE = "examples/word_count.py"
EXAMPLE_API = "the same job through the API (key_by().count())"
PLAIN = "plain loop writing the same files"
EVENT_EXAMPLE = "examples/event_time.py"
EVENT_API = "the same job through the API"
# (case, reference, minimum reference seconds / case seconds)
MAIN_TARGETS = ((EXAMPLE, PLAIN, 0.8), (EVENT_EXAMPLE, EVENT_API, 1 / 1.2))
ROOT = Path(__file__).resolve().parents[1]


def load_example(name: str):
    """The module of ``examples/<name>.py``."""
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main_config(work: Path) -> str:
    """A config file for the main job: local, no progress display, memory state every window."""
    path = work / "local.toml"
    path.write_text('[environment]\ntype = "local"\n[progress]\nenabled = false\n'
                    '[state]\nbackend = "memory"\nsnapshot_every = 1\n', encoding="utf-8")
    return str(path)


def fresh(work: Path, name: str) -> str:
    path = work / name
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


def api_word_count(config: str, source: str, window: int, output: str):
    """The word count as a user writes it with the API's built-ins (what the example should cost)."""
    from json.encoder import encode_basestring

    from gyreflow.api import FileSink, FileSource

    def line(window: int, record: tuple[str, int]) -> str:
        return f'{{"window": {window}, "word": {encode_basestring(record[0])}, "count": {record[1]}}}'

    pipeline = Environment.from_config(config).pipeline("word-count")

    @pipeline.task(name="word_count")
    def word_count(ctx):
        (ctx.source(FileSource(source), SizeTumblingWindow(window)).with_parallelism(1)
         .flat_map(str.split).key_by().count().sink(FileSink(output, format=line)))

    return pipeline.execute()


def plain_word_count(source: str, window: int, output: str) -> None:
    """A plain loop: cumulative counts, one JSON-lines file per window of ``window`` lines."""
    os.makedirs(output, exist_ok=True)
    totals: Counter = Counter()
    with open(source, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    for index, start in enumerate(range(0, len(lines), window), 1):
        seen: Counter = Counter()
        for line in lines[start:start + window]:
            seen.update(line.split())
        totals.update(seen)
        text = "".join(json.dumps({"window": index, "word": w, "count": totals[w]},
                                  ensure_ascii=False) + "\n" for w in seen)
        with open(os.path.join(output, f"window-{index:06d}.jsonl"), "w", encoding="utf-8") as out:
            out.write(text)


def same_files(output: str, expected: str) -> None:
    """Raise unless ``output`` holds the files of ``expected`` with the same lines (in any order)."""
    names = sorted(n for n in os.listdir(expected))
    got = sorted(n for n in os.listdir(output) if not n.startswith("."))
    if names != got:
        msg = f"{output}: files {got[:3]}... differ from the plain loop's {names[:3]}..."
        raise CountMismatchError(msg)
    for name in names:
        mine = sorted(Path(output, name).read_text(encoding="utf-8").splitlines())
        theirs = sorted(Path(expected, name).read_text(encoding="utf-8").splitlines())
        if mine != theirs:
            msg = f"{output}/{name} differs from the plain loop's"
            raise CountMismatchError(msg)


def write_events(path: Path, count: int, keys: int, seed: int = DEFAULT_SEED) -> None:
    """JSON lines ``{"ts", "key", "value"}``, mostly in order, some late."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(count):
        t += rng.choice([0, 0.5, 1, 1.5])
        ts = t - rng.choice([0, 0, 1, 2.5]) if rng.random() < 0.4 else t
        if rng.random() < 0.03:
            ts = t - 30
        out.append(json.dumps({"ts": ts, "key": f"user-{rng.randrange(keys)}",
                               "value": rng.randrange(1000)}) + "\n")
    path.write_text("".join(out), encoding="utf-8")


def api_event_time(config: str, source: str, output: str):
    """``examples/event_time.py --window tumbling:60 --agg sum --max-delay 5`` through the API."""
    from gyreflow.api import DirectorySource, FileSink, Tumbling

    example = load_example("event_time")
    pipeline = Environment.from_config(config).pipeline("event-time")
    folder, name = os.path.split(source)

    @pipeline.task(name="event_time")
    def event_time(ctx):
        events = ctx.source(DirectorySource(folder, name, format="jsonl", columnar=True),
                            SizeTumblingWindow(example.LINES_PER_WINDOW)).with_parallelism(1)
        results = (events.with_timestamps("ts", max_delay=5.0).with_parallelism(1)
                   .key_by("key").window(Tumbling(60)).sum("value"))
        results.sink(FileSink(output, format=example.format_result, prefix="results"))
        results.late().sink(FileSink(output, format=example.format_late, prefix="late"))

    return pipeline.execute()


def run_main_job(args) -> int:
    """Time the main job three ways and the event-time example against the API; print ratios."""
    work = Path(tempfile.mkdtemp(prefix="gyreflow-main-job-"))
    try:
        config = main_config(work)
        source = work / "words.txt"
        lines = word_lines(args.words, vocabulary_size=MAIN_VOCABULARY,
                           words_per_line=WORDS_PER_LINE, seed=DEFAULT_SEED)
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        window = math.ceil(len(lines) / MAIN_WINDOWS)
        events = work / "events.jsonl"
        write_events(events, EVENTS, EVENT_KEYS)
        word_count = load_example("word_count")
        event_time = load_example("event_time")
        plain_word_count(str(source), window, str(work / "expected"))
        flags = ["--input", str(source), "--window", str(window), "--config", config]
        cases = {
            EXAMPLE: lambda: word_count.main([*flags, "--output", fresh(work, "example")]),
            EXAMPLE_API: lambda: api_word_count(config, str(source), window, fresh(work, "api")),
            PLAIN: lambda: plain_word_count(str(source), window, fresh(work, "plain")),
            EVENT_EXAMPLE: lambda: event_time.main([
                "--input", str(events), "--window", "tumbling:60", "--agg", "sum",
                "--max-delay", "5", "--config", config, "--output", fresh(work, "events-example")]),
            EVENT_API: lambda: api_event_time(config, str(events), fresh(work, "events-api")),
        }
        outputs = {EXAMPLE: "example", EXAMPLE_API: "api", PLAIN: "plain"}

        def check(name: str) -> Callable[[object], None]:
            def run(_result) -> None:
                if name in outputs:
                    same_files(str(work / outputs[name]), str(work / "expected"))
                elif name == EVENT_API:
                    same_files(str(work / "events-api"), str(work / "events-example"))
            return run

        def progress(rep: int, name: str, seconds: float) -> None:
            err.print(f"[dim]repetition {rep}/{args.repeat}: {name}: {seconds:.3f} s[/dim]")

        try:
            timings = interleaved_best_of(cases, args.repeat, rotate=False,
                                          check={name: check(name) for name in cases},
                                          on_run=progress)
        except CountMismatchError as exc:
            err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
            return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = {name: t.best for name, t in timings.items()}
    rows = [[EXAMPLE, format_seconds(best[EXAMPLE]), format_ratio(best[PLAIN] / best[EXAMPLE])],
            [EXAMPLE_API, format_seconds(best[EXAMPLE_API]),
             format_ratio(best[PLAIN] / best[EXAMPLE_API])],
            [PLAIN, format_seconds(best[PLAIN]), format_ratio(1.0)],
            [EVENT_EXAMPLE, format_seconds(best[EVENT_EXAMPLE]),
             format_ratio(best[EVENT_API] / best[EVENT_EXAMPLE])],
            [EVENT_API, format_seconds(best[EVENT_API]), format_ratio(1.0)]]
    print()
    table = print_table(f"The main job, {args.words:,} words in {MAIN_WINDOWS} windows",
                        ["job", "seconds", "speed vs its reference"], rows)
    notes = [
        f"Machine: {machine_line()}.",
        f"Word count: {args.words:,} words in {len(lines):,} lines of {WORDS_PER_LINE} (vocabulary "
        f"{MAIN_VOCABULARY:,} words, Zipf frequencies, seed {DEFAULT_SEED}), {MAIN_WINDOWS} "
        f"windows of {window:,} lines; cumulative counts of the words of each window, one "
        "JSON-lines file per window; local environment, memory state snapshotted every window. "
        "Reference: the plain loop (Counter per window, json.dumps per line, one file per window, "
        "no staging or fsync). Every run's files were checked against the plain loop's.",
        f"Event time: {EVENTS:,} JSON-lines events over {EVENT_KEYS:,} keys, --window tumbling:60 "
        "--agg sum --max-delay 5; reference: the same job through the API (JSON lines read as "
        "columns, as the example reads them); the API's files were checked against the example's.",
        f"Best of {args.repeat} interleaved repetitions.",
    ]
    print()
    for note in notes:
        print(note)
    targets = []
    for case, reference, least in MAIN_TARGETS:
        ratio = best[reference] / best[case]
        targets.append(f"{case} >= {least:.2f}x the speed of {reference}: {ratio:.2f}x -> "
                       f"{'met' if ratio >= least else 'NOT met'}")
    print("\nTargets:")
    for line in targets:
        print(f"  {line}")
    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## The main job", "",
            "The shipped word count example (`examples/word_count.py`) against the same job written "
            "with the API's built-ins and a plain Python loop writing the same files, and the "
            "event-time example against the same job through the API. \"speed vs its reference\" "
            "is the reference's seconds divided by the job's.", "",
            f"Run on {today} with `{command_line()}`.", "",
            table, "", *(f"- {note}" for note in notes), "", "Targets:", "",
            *(f"- {line}" for line in targets)])
        path = update_docs_section("main-job", section)
        print(f"\nUpdated the 'main-job' section of {path}.")
    return 0


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
