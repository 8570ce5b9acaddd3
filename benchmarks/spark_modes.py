"""Workers mode against rounds mode on Spark (``spark.mode``), measured in one run on one session.

The per-window overhead with 1,000 windows of 10 records (workers mode; rounds mode runs 20, each a
Spark job), and the README's main job's (examples/word_count.py) median window time in both modes.
``benchmarks/spark.py`` prints this table after its own (``--modes``: only this one).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections import Counter

from _common import CountMismatchError, format_ratio, print_table
from rich.console import Console

from gyreflow.api import Environment, SizeTumblingWindow

SPARK_MASTER = "local[2]"
PARALLELISM = 2
MODE_WINDOWS = 1000  # windows of MODE_RECORDS records for workers mode's per-window overhead
MODE_ROUNDS_WINDOWS = 20  # rounds mode's share of that row (a round costs about a second)
MODE_RECORDS = 10
TARGET_WORKERS_WINDOW = 0.020  # seconds per window in workers mode
MAIN_JOB = "examples/word_count.py"

err = Console(stderr=True)



def mode_environment(mode: str) -> Environment:
    """A Spark environment of ``spark.mode = mode`` on the benchmark's session (a new one per run:
    workers mode keeps memory state in the environment, as the local environment does)."""
    return Environment.spark(master=SPARK_MASTER, parallelism=PARALLELISM, progress=False,
                             config={"spark.app_name": "gyreflow-spark-benchmark",
                                     "spark.conf": {"spark.ui.enabled": "false"},
                                     "spark.mode": mode})


def tiny_windows_run(mode: str, windows: int) -> tuple[float, list[float]]:
    """``windows`` windows of MODE_RECORDS words, counted by key: seconds and window seconds."""
    words = [f"w{(i * 7919) % 53}" for i in range(windows * MODE_RECORDS)]
    pipeline = mode_environment(mode).pipeline("tiny-windows")

    @pipeline.task(name="job")
    def job(ctx):
        (ctx.source(words, SizeTumblingWindow(MODE_RECORDS)).with_parallelism(1)
         .key_by().count().collect("counts"))

    seconds, result = timed(pipeline.execute)
    task = result["job"]
    got = dict(task.output("counts"))
    if task.window_count != windows or got != dict(Counter(words)):
        msg = f"{mode} mode, {windows} tiny windows: the counts differ from the Counter oracle"
        raise CountMismatchError(msg)
    return seconds, [w.seconds for w in task.windows]


def main_job_run(mode: str) -> list[float]:
    """The README's main job (examples/word_count.py on its sample text, 500-line windows): its
    window seconds; the published files are checked against a Counter of the text."""
    import importlib.util
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("example_word_count", root / MAIN_JOB)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    out = tempfile.mkdtemp(prefix="gyreflow-main-job-")
    try:
        pipeline = example.build(mode_environment(mode).pipeline("word-count"),
                                 str(example.DEFAULT_INPUT), 500, out)
        task = pipeline.execute()["word_count"]
        last: dict[str, int] = {}
        for name in sorted(os.listdir(out)):
            with open(os.path.join(out, name), encoding="utf-8") as handle:
                for line in handle:
                    record = json.loads(line)
                    last[record["word"]] = record["count"]
    finally:
        shutil.rmtree(out, ignore_errors=True)
    text = Path(example.DEFAULT_INPUT).read_text(encoding="utf-8")
    if last != dict(Counter(text.split())):
        msg = f"{mode} mode, the main job: its published counts differ from the Counter oracle"
        raise CountMismatchError(msg)
    return [w.seconds for w in task.windows]


def compare_modes(repeat: int) -> tuple[str, list[str]]:
    """Workers mode against rounds mode, measured in this run: the table and its notes."""
    err.print("[dim]workers mode and rounds mode...[/dim]")
    for mode in ("workers", "rounds"):  # warm-ups: the Python workers import gyreflow once
        tiny_windows_run(mode, 2)
    best: dict[tuple[str, str], float] = {}
    medians: dict[str, list[float]] = {"workers": [], "rounds": []}
    for rep in range(repeat):
        for mode, windows in (("workers", MODE_WINDOWS), ("rounds", MODE_ROUNDS_WINDOWS)):
            seconds, _ = tiny_windows_run(mode, windows)
            per_window = seconds / windows
            key = (mode, "tiny")
            best[key] = min(best.get(key, per_window), per_window)
            err.print(f"[dim]repetition {rep + 1}/{repeat}: {mode} mode, {windows} windows: "
                      f"{seconds:.2f} s[/dim]")
        for mode in ("workers", "rounds"):
            medians[mode].append(statistics.median(main_job_run(mode)))
            err.print(f"[dim]repetition {rep + 1}/{repeat}: {mode} mode, main job: median window "
                      f"{medians[mode][-1] * 1000:.0f} ms[/dim]")
    workers_tiny, rounds_tiny = best["workers", "tiny"], best["rounds", "tiny"]
    workers_main, rounds_main = min(medians["workers"]), min(medians["rounds"])
    rows = [
        [f"{MODE_RECORDS} records a window: job time / windows",
         f"{workers_tiny * 1000:.1f} ms ({MODE_WINDOWS} windows)",
         f"{rounds_tiny * 1000:.0f} ms ({MODE_ROUNDS_WINDOWS} windows)",
         format_ratio(rounds_tiny / workers_tiny)],
        ["the main job: median window",
         f"{workers_main * 1000:.1f} ms", f"{rounds_main * 1000:.0f} ms",
         format_ratio(rounds_main / workers_main)],
    ]
    print()
    table = print_table("Workers mode and rounds mode (spark.mode) on Spark " + SPARK_MASTER,
                        ["job", "workers", "rounds", "rounds / workers"], rows)
    verdict = "met" if workers_tiny <= TARGET_WORKERS_WINDOW else "NOT met"
    notes = [
        f"Workers mode against rounds mode: best of {repeat}; each run is a new environment on the "
        f"same session, counts checked against a Counter. Tiny windows: a keyed count of "
        f"{MODE_RECORDS} records a window, the whole job's time (the barrier stage's start "
        "included) divided by its windows; rounds mode runs fewer windows (each is a Spark job). "
        f"The main job: {MAIN_JOB} on its sample text, 10 windows of 500 lines, the lowest of the "
        "runs' median window times (TaskResult.windows: launch to finish, with up to "
        "scheduler.max_flying_windows windows in flight).",
        f"Target: workers mode <= {TARGET_WORKERS_WINDOW * 1000:.0f} ms per window with "
        f"{MODE_WINDOWS} windows of {MODE_RECORDS} records: {workers_tiny * 1000:.1f} ms -> "
        f"{verdict}.",
    ]
    print()
    for note in notes:
        print(note)
    return table, notes


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result
