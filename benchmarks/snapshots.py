"""Snapshots: throughput cost, snapshot time vs state size, and recovery time of 1M keys.

What per-window state snapshots cost in throughput, how snapshot time grows with the size of the
state, and how long a job with 1M keys of state takes to recover."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from _common import (
    DEFAULT_SEED,
    command_line,
    format_rate,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)
from _snapshot_jobs import (
    DEFAULT_WORDS,
    DIRECT_WRITES,
    FIXED_CHANGE,
    MEMORY,
    NEVER,
    NONE,
    PARTS,
    PG_STATEMENT_TIMEOUT,
    POSTGRES,
    QUICK_RECOVERY_KEYS,
    QUICK_STATE_SIZES,
    RECOVERY_KEYS,
    RECOVERY_TARGET,
    ROCKSDB,
    ROCKSDB_FINAL,
    SIZE_GROWTH_TARGET,
    SQLITE,
    SQLITE_MAX_KEYS,
    STATE_SIZES,
    THROUGHPUT_TARGET,
    VOCABULARY_SIZE,
    WINDOW_LINES,
    WINDOW_WORDS,
    WORDS_PER_LINE,
    CheckError,
    Failed,
    WordCountCase,
    err,
    fresh_dir,
    ms,
    out,
    percent,
    postgres_server,
    short_error,
    with_options,
)
from _snapshot_recovery import run_recovery
from _snapshot_sizes import SizeResult, run_sizes


def run_throughput(args, lines: list[str], expected: dict[str, int], work: Path,
                   postgres_url: str | None) -> tuple[str, list[str], dict[str, float]]:
    windows = math.ceil(len(lines) / WINDOW_LINES)
    jobs = iter(range(1, 1 << 30))

    def path_config(backend: str, **extra) -> Callable[[], dict]:
        return lambda: {"state.backend": backend, "state.path": fresh_dir(work, "wc-"), **extra}

    cases = [
        WordCountCase(NONE, path_config("memory", **{"state.snapshot_every": NEVER})),
        WordCountCase(MEMORY, path_config("memory")),
        WordCountCase(ROCKSDB, path_config("rocksdb")),
        WordCountCase(ROCKSDB_FINAL, path_config("rocksdb", **{"state.snapshot_every": NEVER})),
        WordCountCase(SQLITE, path_config("jdbc")),
    ]
    guarded = set()
    if postgres_url:
        timeout = f"statement_timeout={args.pg_timeout}s"
        url = with_options(postgres_url, timeout)
        cases.append(WordCountCase(POSTGRES, path_config(
            "jdbc", **{"state.url": url, "state.secret": "benchmark-secret"})))
        guarded = {POSTGRES}

    def runner(case: WordCountCase) -> Callable[[], object]:
        # A new job name per run: no earlier state to find or delete (PostgreSQL is shared).
        def run():
            if case.name not in guarded:
                return case.run(lines, f"wc-{next(jobs)}")
            if case.failure is not None:
                return Failed(0.0)
            start = time.perf_counter()
            try:
                return case.run(lines, f"wc-{next(jobs)}")
            except Exception as exc:  # noqa: BLE001 - reported in the table, the others go on
                case.failure = short_error(exc, args.pg_timeout)
                return Failed(time.perf_counter() - start)
        return run

    def checker(case: WordCountCase) -> Callable[[object], None]:
        def check(result) -> None:
            if isinstance(result, Failed):
                if result.seconds:
                    err.print(f"[yellow]{case.name} failed after {result.seconds:.1f} s: "
                              f"{case.failure}[/yellow]")
                    case.failure += f" (the job failed after {result.seconds:.0f} s)"
                return
            task = result["wordcount"]
            if task.window_count != windows:
                msg = f"{case.name}: ran {task.window_count} windows, expected {windows}"
                raise CheckError(msg)
            got = dict(result.output("counts"))
            if got != expected:
                wrong = sorted(w for w in expected.keys() | got.keys()
                               if got.get(w) != expected.get(w))
                msg = (f"{case.name}: {len(wrong)} word counts differ from the Counter oracle, "
                       f"e.g. {wrong[:5]}")
                raise CheckError(msg)
            case.window_medians.append(statistics.median(w.seconds for w in task.windows))
        return check

    def progress(rep: int, name: str, seconds: float) -> None:
        err.print(f"[dim]throughput, repetition {rep}/{args.repeat}: {name}: {seconds:.3f} s[/dim]")

    timings = interleaved_best_of({c.name: runner(c) for c in cases}, args.repeat,
                                  check={c.name: checker(c) for c in cases}, on_run=progress)
    base = timings[NONE].best
    base_cpu = min(cases[0].cpu)
    rows = []
    costs = {}
    for case in cases:
        if case.failure is not None:
            rows.append([case.name, "failed", "-", "-", "-", "-", "-"])
            continue
        timing = timings[case.name]
        best = timing.best
        median_window = case.window_medians[timing.runs.index(best)]
        costs[case.name] = 1 - base / best
        cpu = min(case.cpu)
        costs[f"{case.name} (CPU)"] = 1 - base_cpu / cpu
        rows.append([case.name, format_seconds(best), format_rate(args.words / best),
                     "-" if case.name == NONE else percent(costs[case.name]), ms(median_window),
                     format_seconds(cpu),
                     "-" if case.name == NONE else percent(costs[f"{case.name} (CPU)"])])
    if not postgres_url:
        rows.append([POSTGRES, "skipped", "-", "-", "-", "-", "-"])
    table = print_table(
        f"Windowed word count, {args.words:,} words, snapshots every window",
        ["backend", "seconds", "words/s", "cost vs no snapshots", "median window ms",
         "job process CPU s", "CPU cost"], rows, console=out)
    notes = [
        f"Input: {args.words:,} words in {len(lines):,} lines of {WORDS_PER_LINE} (vocabulary "
        f"{VOCABULARY_SIZE:,} words, Zipf frequencies, seed {DEFAULT_SEED}); {windows} "
        f"SizeTumblingWindow({WINDOW_LINES:,}) windows of {WINDOW_WORDS:,} words; split, key "
        f"by word, keyed reduce, collect; local environment, parallelism 1. Every window "
        f"updates ~{len(expected):,} keys, all of which are snapshotted.",
        f"\"{NONE}\": there is no snapshot-free backend, so this is the memory backend with "
        f"state.snapshot_every={NEVER:,} (larger than the window count): only the final flush "
        "at the end of the input is written. "
        f"\"{ROCKSDB_FINAL}\" (a diagnostic row) does the same with rocksdb: it shows the fixed "
        "cost of starting and stopping the snapshot writer process.",
        "Every other row snapshots every window (state.snapshot_every=1, 2 retained). memory "
        "writes inline; rocksdb and jdbc (SQLite file under state.path, or PostgreSQL) are "
        "written by a child process while the next windows compute.",
        "cost vs no snapshots = 1 - (words/s with snapshots) / (words/s without): the share "
        "of throughput lost. median window ms: launch-to-finish time of the median window of "
        "the best run (TaskResult.windows); it leaves out fixed start-up and end costs, and "
        "counts time shared with the other window in flight (scheduler.max_flying_windows=2).",
        f"Best of {args.repeat} interleaved repetitions per backend; every run's final counts "
        "and window count were checked against a Counter oracle.",
        "job process CPU s: the least CPU time (user + system, time.process_time) the job's "
        "own process used in a run; the snapshot writer process is not included (it runs on "
        "the other core). CPU cost = 1 - (CPU without snapshots) / (CPU with): what snapshots "
        "cost the computing process, which the wall-clock ratio shows only when no other work "
        "shares the CPUs.",
    ]
    if ROCKSDB in costs and ROCKSDB_FINAL in costs:
        every, final = timings[ROCKSDB].best, timings[ROCKSDB_FINAL].best
        if final > base:
            fixed = (f"starting and stopping the writer process and the final flush cost "
                     f"{final - base:.2f} s ({costs[ROCKSDB_FINAL]:.1%}, the final-flush-only row)")
        else:
            fixed = (f"starting and stopping the writer process and the final flush cost nothing "
                     f"measurable (the final-flush-only row took {final:.2f} s, no snapshots "
                     f"{base:.2f} s: within the noise)")
        notes.append(
            f"Where rocksdb's {costs[ROCKSDB]:.1%} goes: {fixed}; snapshotting every window "
            f"adds {every - final:.2f} s, {(every - final) / windows * 1000:.0f} ms per window "
            f"of ~{len(expected):,} changed keys.")
    if postgres_url:
        notes.append(
            "PostgreSQL: a throwaway PostgreSQL server on this machine (scripts/postgres.sh), "
            f"every job's connections with statement_timeout={args.pg_timeout}s so that a "
            "stalled statement fails the run instead of hanging it.")
        for case in cases:
            if case.failure is not None:
                notes.append(f"{case.name} FAILED: {case.failure}.")
    else:
        notes.append("PostgreSQL skipped (--no-postgres, or the server did not start).")
    return table, notes, costs


# ---------------------------------------------------------------------------------------------
# Report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--words", type=int, default=None,
                        help=f"word count input words (default {DEFAULT_WORDS:,}; 300,000 with "
                             "--quick)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="repetitions; the best run counts (default 3; 1 with --quick)")
    parser.add_argument("--no-postgres", action="store_true",
                        help="skip the PostgreSQL row (no server is started)")
    parser.add_argument("--quick", action="store_true",
                        help="a small smoke run: fewer words, 10k/50k state sizes, recovery of "
                             f"{QUICK_RECOVERY_KEYS:,} keys, one repetition")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run (default: all of {', '.join(PARTS)})")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'snapshots' section of docs/benchmarks.md (all parts)")
    args = parser.parse_args(argv)
    if args.words is None:
        args.words = 300_000 if args.quick else DEFAULT_WORDS
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    args.pg_timeout = 3 if args.quick else PG_STATEMENT_TIMEOUT
    args.sqlite_max_keys = 10_000 if args.quick else SQLITE_MAX_KEYS
    args.direct_writes = 5 if args.quick else DIRECT_WRITES
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown --parts {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    if args.write_docs and set(args.parts) != set(PARTS):
        parser.error("--write-docs runs every part")
    for flag in ("words", "repeat"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    return args


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def target_lines(costs: dict[str, float], sizes: list[SizeResult], smallest: int, largest: int,
                 recovery: float | None, recovery_keys: int) -> list[str]:
    lines = []
    name, limit = THROUGHPUT_TARGET
    if name in costs:
        cost = costs[name]
        lines.append(f"{name} snapshots every window cost <= {limit:.0%} of word count "
                     f"throughput: {cost:.1%} -> {verdict(cost <= limit)} (CPU of the job "
                     f"process: {costs[f'{name} (CPU)']:.1%})")
    fixed = {r.case.keys: r for r in sizes if r.backend == ROCKSDB and r.phase == "fixed"}
    if smallest in fixed and largest in fixed:
        ratio = fixed[largest].write / fixed[smallest].write
        extra_small, extra_large = fixed[smallest].interval - fixed[smallest].baseline, \
            fixed[largest].interval - fixed[largest].baseline
        lines.append(
            f"rocksdb incremental snapshot time within {SIZE_GROWTH_TARGET:g}x from {smallest:,} "
            f"to {largest:,} keys ({FIXED_CHANGE:,} changed keys per window): store.write "
            f"{ms(fixed[smallest].write)} -> {ms(fixed[largest].write)} ms = {ratio:.2f}x -> "
            f"{verdict(ratio <= SIZE_GROWTH_TARGET)} (pipeline extra per window: "
            f"{ms(extra_small)} -> {ms(extra_large)} ms)")
    pct = {r.case.keys: r for r in sizes if r.backend == ROCKSDB and r.phase == "1%"}
    if smallest in pct and largest in pct:
        ratio = pct[largest].write / pct[smallest].write
        per_key = [pct[k].write / pct[k].changed * 1e6 for k in (smallest, largest)]
        lines.append(
            f"for reference, at 1% change ({pct[smallest].changed:,} -> {pct[largest].changed:,} "
            f"changed keys) rocksdb store.write grows {ratio:.1f}x, "
            f"{per_key[0]:.1f} -> {per_key[1]:.1f} µs per changed key (not a target: the change "
            "grows 100x)")
    if recovery is not None:
        lines.append(f"recovery of {recovery_keys:,} keys (rocksdb), process start to first new "
                     f"window completed <= {RECOVERY_TARGET:g} s: {recovery:.2f} s -> "
                     f"{verdict(recovery <= RECOVERY_TARGET)}"
                     + ("" if recovery_keys == RECOVERY_KEYS else " (quick run: fewer keys)"))
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK_STATE_SIZES if args.quick else STATE_SIZES
    recovery_keys = QUICK_RECOVERY_KEYS if args.quick else RECOVERY_KEYS
    lines = [] if "throughput" not in args.parts else word_lines(args.words, vocabulary_size=VOCABULARY_SIZE,
                       words_per_line=WORDS_PER_LINE, seed=DEFAULT_SEED)
    expected = dict(Counter(w for line in lines for w in line.split()))
    started = time.perf_counter()
    load_start = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="gyreflow-bench-snapshots."))
    try:
        with contextlib.ExitStack() as stack:
            postgres_url = None
            if not args.no_postgres and "throughput" in args.parts:
                err.print("[dim]starting a throwaway PostgreSQL server...[/dim]")
                try:
                    postgres_url = stack.enter_context(postgres_server())
                except RuntimeError as exc:
                    err.print(f"[yellow]PostgreSQL skipped: {exc}[/yellow]")
            throughput_md, throughput_notes, costs = "", [], {}
            if "throughput" in args.parts:
                throughput_md, throughput_notes, costs = run_throughput(
                    args, lines, expected, work, postgres_url)
                print()
                err.print(f"[dim]throughput done after {time.perf_counter() - started:.0f} s[/dim]")
        sizes_md, sizes_notes, size_results = "", [], []
        if "sizes" in args.parts:
            sizes_md, sizes_notes, size_results = run_sizes(args, work, sizes, (ROCKSDB, SQLITE))
            err.print(f"[dim]state sizes done after {time.perf_counter() - started:.0f} s[/dim]")
            print()
        recovery_md, recovery_notes, recovery = "", [], None
        if "recovery" in args.parts:
            recovery_md, recovery_notes, recovery = run_recovery(args, work, recovery_keys)
    except CheckError as exc:
        err.print(f"[bold red]error:[/bold red] {exc} (aborting the benchmark)")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    machine = (f"{machine_line()}; 1-minute load average {load_start:.1f} at the start and "
               f"{os.getloadavg()[0]:.1f} at the end (the CPUs were shared with other work "
               "when above the CPU count)")
    targets = target_lines(costs, size_results, sizes[0], sizes[-1], recovery, recovery_keys)
    print()
    print(f"Machine: {machine}. Benchmark wall time: {elapsed:.0f} s.")
    for title, notes in (("Throughput", throughput_notes), ("State size", sizes_notes),
                         ("Recovery", recovery_notes)):
        print(f"\n{title}:")
        for note in notes:
            print(f"  - {note}")
    print("\nTargets:")
    for line in targets:
        print(f"  {line}")

    if args.write_docs:
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        section = "\n".join([
            "## Snapshots",
            "",
            "What per-window state snapshots cost: word count throughput with snapshots every "
            "window on each backend, snapshot time as the keyed state grows, and how long a job "
            "with 1M keys of rocksdb state takes to recover after being killed.",
            "",
            f"Run on {today} with `{command_line()}` ({elapsed:.0f} s in all).  ",
            f"Machine: {machine}.",
            "",
            "### Throughput with snapshots every window",
            "",
            throughput_md,
            "",
            *(f"- {note}" for note in throughput_notes),
            "",
            "### Snapshot time vs state size",
            "",
            sizes_md,
            "",
            *(f"- {note}" for note in sizes_notes),
            "",
            "### Recovery",
            "",
            recovery_md,
            "",
            *(f"- {note}" for note in recovery_notes),
            "",
            "### Targets",
            "",
            *(f"- {line}" for line in targets),
        ])
        path = update_docs_section("snapshots", section)
        print(f"\nUpdated the 'snapshots' section of {path}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
