"""gyreflow on Spark: word count against hand-written PySpark jobs, and what a window round costs.

One run, one input, one SparkSession (the one gyreflow's Spark environment starts) for every Spark
engine: gyreflow on Spark ``local[2]`` as a batch job and as a stream of large windows, a hand-written
RDD word count, a DataFrame word count, and gyreflow's in-process engine. Then the per-window
overhead on Spark: a tiny input cut into many windows. Last, workers mode against rounds mode
(``spark.mode``): the per-window overhead with 1,000 windows of 10 records, and the README's main
job's median window time (``--modes`` runs only this part).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from operator import add

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
from _spark_engines import (
    GF_BATCH,
    GF_BATCH_ASSOCIATIVE,
    GF_BATCH_LAMBDAS,
    GF_FILE,
    GF_LOCAL,
    PARALLELISM,
    RDD,
    RDD_ALL_WORDS,
    SPARK_MASTER,
    TINY_LOCAL,
    TINY_RDD,
    TINY_SPARK,
    TINY_SPARK_ONE,
    Engine,
    dataframe_engine,
    gyreflow_engine,
    rdd_engine,
)
from _spark_measures import (
    gyreflow_import_seconds,
    plan_size,
    spark_environment,
    time_spark_jobs,
    timed,
    why_lines,
)
from rich.console import Console
from spark_modes import compare_modes

from gyreflow.api import AllWindow, Environment, FileSource, SizeTumblingWindow

VOCABULARY_SIZE = 1000
WORDS_PER_LINE = 10
WINDOW_WORDS = 500_000
TINY_WINDOWS = 20
TINY_WINDOW_LINES = 10  # lines per window over all source tasks
TARGET_VS_RDD = 1.3  # gyreflow-on-Spark batch time / hand-written RDD time

err = Console(stderr=True)


def _word_batches(lines_iter, batch_size: int):
    """Yield (target partition, words) messages the way gyreflow's emitter builds them: per
    ``batch_size`` lines read, every word routed (through a dict cache of its target) into one
    list per target."""
    targets: dict[str, int] = {}
    chunk = list(itertools.islice(lines_iter, batch_size))
    while chunk:
        parts: list[list[str]] = [[] for _ in range(PARALLELISM)]
        appends = [part.append for part in parts]
        for line in chunk:
            for word in line.split():
                try:
                    appends[targets[word]](word)
                except KeyError:
                    # Python workers share one PYTHONHASHSEED (PySpark sets it), so hash() agrees
                    # between them; the count check would catch a word split in two.
                    targets[word] = hash(word) % PARALLELISM
                    appends[targets[word]](word)
        yield from ((target, part) for target, part in enumerate(parts) if part)
        chunk = list(itertools.islice(lines_iter, batch_size))


def _count_batches(batches) -> Counter:
    counter: Counter = Counter()
    for _, words in batches:
        counter.update(words)
    return counter


def rdd_all_words_engine(sc, lines: list[str], batch_size: int) -> Engine:
    """An RDD job that moves data the way gyreflow does, without gyreflow: every word crosses the
    shuffle in gyreflow-style messages and is counted after it with ``Counter.update`` (no map-side
    combine). Nobody would write it this way: it measures that data movement alone."""

    def run() -> list:
        return (sc.parallelize(lines, PARALLELISM)
                .mapPartitions(lambda it: _word_batches(it, batch_size))
                .partitionBy(PARALLELISM, lambda target: target)
                .mapPartitions(lambda it: iter(_count_batches(it).items())).collect())

    return Engine(RDD_ALL_WORDS, run, dict)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--words", type=int, default=None,
                        help="number of input words (default 2,000,000; 200,000 with --quick)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repetitions; the best run of each engine counts (default 3; 1 with "
                             "--quick)")
    parser.add_argument("--window-words", type=int, default=None,
                        help="words per window of the windowed gyreflow run (default 500,000; "
                             "50,000 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: small input, one repetition, fewer tiny windows")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'spark' section of docs/benchmarks.md")
    parser.add_argument("--modes", action="store_true",
                        help="only compare workers mode with rounds mode (spark.mode)")
    args = parser.parse_args(argv)
    if args.quick and args.write_docs:
        parser.error("--quick is a smoke test; its numbers do not go into the docs")
    args.words = args.words or (200_000 if args.quick else 2_000_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.window_words = args.window_words or (50_000 if args.quick else WINDOW_WORDS)
    args.tiny_windows = 5 if args.quick else TINY_WINDOWS
    for flag in ("words", "repeat", "window_words"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    per_window = PARALLELISM * WORDS_PER_LINE
    if args.window_words % per_window:
        parser.error(f"--window-words must be a multiple of {per_window} "
                     f"({PARALLELISM} source tasks x {WORDS_PER_LINE} words per line)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.modes:
        _, spark, _ = spark_environment()
        try:
            compare_modes(args.repeat)
        except CountMismatchError as exc:
            err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
            return 1
        finally:
            spark.stop()
        return 0
    began = time.perf_counter()
    load_start = os.getloadavg()[0]
    lines = word_lines(args.words, vocabulary_size=VOCABULARY_SIZE,
                       words_per_line=WORDS_PER_LINE, seed=DEFAULT_SEED)
    expected = dict(Counter(word for line in lines for word in line.split()))

    # A size window counts records per source task: PARALLELISM source tasks share each window.
    window_lines = args.window_words // WORDS_PER_LINE // PARALLELISM
    windows = math.ceil(math.ceil(len(lines) / PARALLELISM) / window_lines)
    gf_windows = (f"gyreflow on Spark, {windows} windows of {args.window_words:,} words, "
                  "key_by().count()")
    tiny = word_lines(args.tiny_windows * TINY_WINDOW_LINES * WORDS_PER_LINE,
                      vocabulary_size=50, words_per_line=WORDS_PER_LINE, seed=DEFAULT_SEED)
    tiny_expected = dict(Counter(word for line in tiny for word in line.split()))
    tiny_window = SizeTumblingWindow(TINY_WINDOW_LINES // PARALLELISM)
    tiny_spark_name = TINY_SPARK.format(n=args.tiny_windows, lines=TINY_WINDOW_LINES)
    tiny_local_name = TINY_LOCAL.format(n=args.tiny_windows, lines=TINY_WINDOW_LINES)

    scratch = tempfile.mkdtemp(prefix="gyreflow-spark-benchmark-")
    text_path = os.path.join(scratch, "words.txt")
    with open(text_path, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")

    err.print(f"[dim]starting the SparkSession ({SPARK_MASTER}) through gyreflow's Spark "
              "environment...[/dim]")
    env, spark, startup = spark_environment()
    sc = spark.sparkContext
    spark_env = lambda: env  # noqa: E731 - the one Spark environment (its state is per run)
    local_env = lambda: Environment.local(progress=False)  # noqa: E731 - parallelism 1
    # The tiny windowed job runs the same plan as on Spark: PARALLELISM source tasks.
    local_env_p = lambda: Environment.local(PARALLELISM, progress=False)  # noqa: E731
    try:
        # Untimed warm-ups, each timed once for the notes: the Python workers, Spark SQL, and
        # gyreflow's first round (each Python worker imports gyreflow when it first runs a task).
        err.print("[dim]warming up...[/dim]")
        worker_warmup, _ = timed(lambda: sc.parallelize(range(100), PARALLELISM)
                                 .map(lambda x: (x % 7, 1)).reduceByKey(add).collect())
        sql_warmup, _ = timed(dataframe_engine(spark, tiny).run)
        first_job = gyreflow_engine("gyreflow warm-up", spark_env, tiny, AllWindow(), 1)
        gyreflow_first, result = timed(first_job.run)
        check_counts(first_job.name, first_job.counts(result), tiny_expected)
        plan_bytes, plan_pickle, stages = plan_size(env, lines)
        import_seconds = gyreflow_import_seconds()

        engines = [
            gyreflow_engine(GF_BATCH, spark_env, lines, AllWindow(), 1),
            gyreflow_engine(GF_BATCH_LAMBDAS, spark_env, lines, AllWindow(), 1, lambdas=True),
            gyreflow_engine(GF_BATCH_ASSOCIATIVE, spark_env, lines, AllWindow(), 1, lambdas=True,
                            associative=True),
            gyreflow_engine(gf_windows, spark_env, lines, SizeTumblingWindow(window_lines), windows),
            rdd_engine(RDD, sc, lines),
            dataframe_engine(spark, lines),
            gyreflow_engine(GF_LOCAL, local_env, lines, AllWindow(), 1),
            gyreflow_engine(GF_FILE, spark_env, FileSource(text_path), AllWindow(), 1),
            rdd_all_words_engine(sc, lines, env.config["runtime.batch_size"]),
        ]
        tiny_engines = [
            gyreflow_engine(tiny_spark_name, spark_env, tiny, tiny_window, args.tiny_windows),
            gyreflow_engine(TINY_SPARK_ONE, spark_env, tiny, AllWindow(), 1),
            gyreflow_engine(tiny_local_name, local_env_p, tiny, tiny_window, args.tiny_windows),
            rdd_engine(TINY_RDD, sc, tiny),
        ]

        def check(engine: Engine, oracle: dict[str, int]) -> Callable[[object], None]:
            return lambda result: check_counts(engine.name, engine.counts(result), oracle)

        checks = {e.name: check(e, expected) for e in engines}
        checks.update({e.name: check(e, tiny_expected) for e in tiny_engines})

        def progress(rep: int, name: str, seconds: float) -> None:
            err.print(f"[dim]repetition {rep}/{args.repeat}: {name}: {seconds:.3f} s[/dim]")

        try:
            timings = interleaved_best_of({e.name: e.run for e in engines + tiny_engines},
                                          args.repeat, check=checks, on_run=progress)
            # One more, untimed run of the tiny windowed job, splitting its time into the rounds'
            # Spark jobs and the driver's work around them.
            split_engine = gyreflow_engine("split", spark_env, tiny, tiny_window, args.tiny_windows)
            split_total, split_jobs, result = time_spark_jobs(split_engine.run)
            check_counts(split_engine.name, split_engine.counts(result), tiny_expected)
            modes_table, modes_notes = compare_modes(args.repeat)
        except CountMismatchError as exc:
            err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
            return 1
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)

    by_name = {e.name: e for e in engines + tiny_engines}

    def best(name: str) -> float:
        return timings[name].best

    def best_run(name: str) -> dict:
        runs = timings[name].runs
        return by_name[name].runs[runs.index(min(runs))]

    # --- the word count table ---
    rdd = best(RDD)
    rows = []
    for engine in engines:
        seconds = best(engine.name)
        rows.append([engine.name, format_seconds(seconds),
                     format_seconds(statistics.median(timings[engine.name].runs)),
                     format_rate(args.words / seconds), format_ratio(seconds / rdd)])
    print()
    table = print_table(f"Word count, {args.words:,} words",
                        ["engine", "seconds", "median", "words/s", "time vs RDD"], rows)

    # --- the per-window table ---
    gf_batch = best(GF_BATCH)
    tiny_spark, tiny_one, tiny_local = best(tiny_spark_name), best(TINY_SPARK_ONE), best(tiny_local_name)
    per_round = tiny_spark / args.tiny_windows
    marginal = (tiny_spark - tiny_one) / (args.tiny_windows - 1)
    windowed = best(gf_windows)
    window_marginal = (windowed - gf_batch) / (windows - 1) if windows > 1 else float("nan")
    window_rows = [
        [tiny_spark_name, format_seconds(tiny_spark), str(args.tiny_windows),
         format_seconds(per_round)],
        [TINY_SPARK_ONE, format_seconds(tiny_one), "1", format_seconds(tiny_one)],
        [tiny_local_name, format_seconds(tiny_local), str(args.tiny_windows),
         f"{tiny_local / args.tiny_windows:.4f}"],
        [TINY_RDD, format_seconds(best(TINY_RDD)), "-", "-"],
        [gf_windows, format_seconds(windowed), str(windows), format_seconds(windowed / windows)],
        [GF_BATCH, format_seconds(gf_batch), "1", format_seconds(gf_batch)],
    ]
    print()
    window_table = print_table("What a window round costs on Spark",
                               ["run", "seconds", "windows", "seconds per window"], window_rows)

    # --- notes, targets and why ---
    ratio = gf_batch / rdd
    split_driver = split_total - split_jobs
    notes = [
        f"Input: {args.words:,} words in {len(lines):,} lines of {WORDS_PER_LINE} "
        f"(vocabulary {VOCABULARY_SIZE:,} words, Zipf frequencies, seed {DEFAULT_SEED}); "
        f"{len(expected):,} distinct words occur. Every engine starts from the same in-memory "
        "Python list of lines (except the FileSource diagnostic, which reads them from a file).",
        f"Best of {args.repeat} interleaved repetitions per engine (the order rotates); every run's "
        "counts were checked against a collections.Counter oracle (windowed runs: the last "
        "emitted count of each word, and the number of windows).",
        f"gyreflow on Spark: `Environment.spark(master=\"{SPARK_MASTER}\", parallelism="
        f"{PARALLELISM}, progress=False)` (memory backend, i.e. a scratch RocksDB), the pipeline "
        "`ctx.source(lines, window).flat_map(str.split).key_by().count().collect()`; the lambda row "
        "maps to (w, 1), keys by w and reduces with a lambda. Windowed: "
        f"SizeTumblingWindow({window_lines:,}) on each of {PARALLELISM} source tasks = "
        f"{args.window_words:,} words per window, {windows} windows (one Spark job each). "
        "gyreflow local: the in-process engine, parallelism 1.",
        f"PySpark: the RDD job is `parallelize(lines, {PARALLELISM}).flatMap(str.split)"
        ".map(lambda w: (w, 1)).reduceByKey(add).collect()`; the DataFrame job builds a one-column "
        f"DataFrame from `parallelize([(line,) ...], {PARALLELISM})` (inside the timed region) "
        "and runs `select(explode(split(line, ' '))).groupBy('word').count().collect()`.",
        f"How a round runs on Spark: one stage per execution vertex ({stages} here), the keyed "
        "count pre-combines in each source task before the shuffle (at most "
        f"{PARALLELISM} x {len(expected):,} (word, count) pairs cross it, as with reduceByKey), the "
        "tasks' Done events ride with the data to the last stage and one collect per round brings "
        f"them to the driver; the plan (the in-memory input included, {plan_bytes / 1e6:.1f} MB "
        f"pickled in {plan_pickle:.2f} s) is broadcast once per run. The lambda row's reduce is not "
        "pre-combined (its function need not be associative), so every word crosses the shuffle.",
        "Diagnostic rows: the FileSource row is the batch pipeline reading the same lines from a "
        "local file (`FileSource`), so the input is not part of the plan. The last RDD row moves "
        "data the way gyreflow's reduce row does, without gyreflow: every word crosses the shuffle, "
        f"in per-target lists built per {env.config['runtime.batch_size']:,} lines read (gyreflow's "
        "runtime.batch_size), and is counted after it with Counter.update.",
        f"Set-up, excluded from the timings: SparkSession start-up {startup:.2f} s (started by "
        f"gyreflow's Spark environment, shared by every Spark engine; spark.ui.enabled=false); a "
        f"tiny RDD job with a shuffle starting the Python workers {worker_warmup:.2f} s; a tiny "
        f"DataFrame query warming up Spark SQL {sql_warmup:.2f} s; gyreflow's first job on Spark "
        f"(the {len(tiny)} tiny lines as 1 window, an untimed warm-up) {gyreflow_first:.2f} s "
        f"against {tiny_one:.2f} s for the same job later: the first round costs "
        f"{gyreflow_first - tiny_one:.2f} s more. Part of it is each Python worker importing "
        f"gyreflow (the modules a Spark task needs import in {import_seconds:.2f} s in a fresh "
        "interpreter here); the rest is code running for the first time in the workers and the JVM "
        "(the broadcast plan, the scratch RocksDB).",
        "Modes: with spark.mode = auto (the default) the windowed runs are streams and run in "
        "workers mode (one barrier stage of long-lived workers for the whole job), the one-window "
        "batch runs in rounds mode (a Spark job per window); the per-window differences below "
        "compare the two modes, so a window beyond the first can cost less than nothing, and the "
        "split into Spark jobs and driver work describes rounds.",
        f"Per-window overhead on Spark: {args.tiny_windows} windows of {TINY_WINDOW_LINES} lines "
        f"({TINY_WINDOW_LINES // PARALLELISM} per source task) take {tiny_spark:.2f} s, "
        f"{per_round:.3f} s per window round; each window beyond the first adds {marginal:.3f} s "
        f"(({tiny_spark:.2f} - {tiny_one:.2f}) / {args.tiny_windows - 1}). In one more, untimed "
        f"run of that job ({split_total:.2f} s), the rounds' Spark jobs (the collect of each "
        f"round) took {split_jobs / args.tiny_windows:.3f} s per round and the driver's work "
        f"around them (scheduler, commits, building each round's RDDs) "
        f"{split_driver / args.tiny_windows:.3f} s per round. For scale: one hand-written "
        f"Spark job with one shuffle over the same lines takes {best(TINY_RDD):.3f} s, and the "
        f"in-process engine needs {tiny_local / args.tiny_windows * 1000:.1f} ms per window for "
        f"the same job (parallelism {PARALLELISM}).",
        f"{args.window_words:,}-word windows: {windowed / windows:.2f} s per window "
        f"({windows} windows in {windowed:.2f} s); against the batch run (one window, "
        f"{gf_batch:.2f} s) each extra window costs {window_marginal:.2f} s: a round's fixed "
        "cost plus writing each window's state changes (every window on Spark).",
    ]
    machine = machine_line()
    load_end = os.getloadavg()[0]
    notes.append(f"1-minute load average {load_start:.1f} at the start and {load_end:.1f} at the "
                 f"end ({os.cpu_count()} CPUs: above that, other work shared the CPUs); the "
                 f"whole run took {time.perf_counter() - began:.0f} s.")

    verdict = "met" if ratio <= TARGET_VS_RDD else "NOT met"
    targets = [
        f"{GF_BATCH} within {TARGET_VS_RDD:g}x of the hand-written RDD job's time: "
        f"{gf_batch:.2f} s / {rdd:.2f} s = {ratio:.2f}x -> {verdict} (lambda style: "
        f"{best(GF_BATCH_LAMBDAS) / rdd:.2f}x; declared associative: "
        f"{best(GF_BATCH_ASSOCIATIVE) / rdd:.2f}x)",
        f"per-window overhead on Spark: {per_round:.3f} s per window round on a tiny input "
        f"({marginal:.3f} s per extra window); {windowed / windows:.2f} s per "
        f"{args.window_words:,}-word window ({window_marginal:.2f} s per extra window) -> measured",
    ]
    why = []
    if ratio > TARGET_VS_RDD:
        why = why_lines(gf_batch, rdd, best(RDD_ALL_WORDS), best(GF_FILE), tiny_one,
                        best(TINY_RDD), plan_bytes=plan_bytes, plan_pickle=plan_pickle)

    print()
    for note in [f"Machine: {machine}.", *notes]:
        print(note)
    print()
    print("Targets:")
    for line in targets:
        print(f"  {line}")
    if why:
        print()
        print("Why the batch target is missed:")
        for line in why:
            print(f"  {line}")

    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## gyreflow on Spark",
            "",
            "Word count of the same generated text on one SparkSession (`local[2]`): gyreflow on "
            "Spark as a batch job (`AllWindow`) and as a stream of large windows, a hand-written "
            "PySpark RDD job, a PySpark DataFrame query, and gyreflow's in-process engine, plus "
            "two diagnostic rows. seconds is the best run, median the "
            "median run; words/s is input words per second of the best run; \"time vs RDD\" is "
            "the best run's time as a multiple of the hand-written RDD job's (lower is faster). "
            "The second table measures what one window round (one Spark job) costs.",
            "",
            f"Run on {today} with `{command_line()}`.  ",
            f"Machine: {machine}.",
            "",
            table,
            "",
            window_table,
            "",
            modes_table,
            "",
            *(f"- {note}" for note in notes),
            *(f"- {note}" for note in modes_notes),
            "",
            "Targets:",
            "",
            *(f"- {line}" for line in targets),
            *(["", "Why the batch target is missed:", ""] if why else []),
            *(f"- {line}" for line in why),
        ])
        path = update_docs_section("spark", section)
        print(f"\nUpdated the 'spark' section of {path}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
