"""Word count benchmark --main-job: the shipped examples against the API and a plain loop."""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import os
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from _common import (
    DEFAULT_SEED,
    CountMismatchError,
    command_line,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)
from _wordcount_engines import WORDS_PER_LINE
from rich.console import Console

from gyreflow.api import Environment, SizeTumblingWindow

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

err = Console(stderr=True)


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
