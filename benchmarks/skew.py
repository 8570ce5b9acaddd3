"""Skew: automatic rebalance of a hot key group against the fixed key-group assignment.

The stream: ``--records`` events ``(key, payload)``, half of them of one hot key and the other half
drawn uniformly from ``--keys`` cold keys, shuffled (seeded), in ``--windows`` size windows. A keyed
operator's 128 key groups belong to its 2 tasks in ranges (task 0 owns groups 0-63, task 1 groups
64-127); the hot key is the first ``hot-<i>`` whose group lies in the middle half of a task's range
(printed: group 90, task 1), so with the fixed assignment that task receives half the records plus
its half of the cold ones, 75% of the stream, and the other task 25%. With
``control.auto_rebalance`` the driver counts the records per key group, and once a window is skewed
(a task over ``control.rebalance_skew`` times the median task, 1.3 by default; with two tasks the
median is their mean, so that means over 65% of the records on one task) it restarts the
tasks from the last completed snapshot with the hot group alone on one task and the other groups on
the other, about 50/50. The keyed stage's ideal speed-up is therefore 0.75 / 0.50 = 1.5x; the
target for the whole job is 1.3x.

The per-record work is on the keyed stage, as in the skewed jobs skew handling exists for: a keyed
``ProcessFunction`` scores every event with ``--work`` rounds of a pure-Python multiply-and-mask
loop (1,200 rounds: about 130-220 µs per record on the 2-core VM, what scoring an event with a
small model costs in Python) and keeps each key's running count and score total, emitted at the end
of every window in which the key was updated. A ``process`` function, unlike ``count`` and
``aggregate``, never pre-combines on the sending side (on Spark those fold records before the
shuffle), so every record's work runs on the task that owns its key. The engine's own cost per
record (reading the source, routing and pickling records between the workers, the process
function's state and notifications, snapshots, collecting the output in the driver: about 20 µs
of CPU here) is split evenly whatever the assignment, so it dilutes the gain, and so does the
driver sharing the two cores. Measured here (docs/benchmarks.md, the same scoring per run each
time): 300 rounds (400,000 records) 1.06-1.18x, 600 rounds (200,000 records) 1.26x, 1,200 rounds
1.12-1.49x (best of a run; 1.24x the median of 19 adjacent pairs): the target is met in some runs,
not in all.

Both cases run in 2 worker processes (``environment.workers``), parallelism 2 for the source and
the keyed operator, the memory state backend (the default: a snapshot every window, which a restart
resumes from), many windows so that the one restart (the worker processes start again from the last
snapshot) is paid once, and ``control.rebalance_min_records`` = 100 (the default, 1,000, is exactly
a default window's records); timed interleaved, best of ``--repeat``. The speed-up is the fixed
assignment's time over the rebalanced time, for the whole run and for the steady state (the windows
after the first fifth, from the driver's window-finished times, once the rebalance is done). Every
run's output (each key's last count and total) is checked against a plain-Python oracle before its
time counts; a wrong output exits with 2, a missed target with 1. Also printed: the rebalances of
each run (``JobListener.on_restart``) and the key groups and records per task after them, the CPU
other processes used during each run (``/proc/stat``), and the per-record work alone in one and in
two busy processes (on a shared VM each core's speed varies, and a balanced job waits for the
slower core). With ``--spark``, the same on Spark ``local[2]`` in workers mode (the session and its
Python workers started before the timings).

    python benchmarks/skew.py [--records 100000] [--keys 10000] [--work 1200] [--windows 100]
                              [--repeat 3] [--spark]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import resource
import statistics
import sys
import time
from collections import Counter
from operator import itemgetter

from _common import (
    DEFAULT_SEED,
    command_line,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
)
from rich.console import Console

from gyreflow.api import Environment, JobListener, ProcessFunction, SizeTumblingWindow
from gyreflow.state.keys.keygroups import key_group_of, key_group_range, owner_table

PARALLELISM = 2
WORKERS = 2
KEY_GROUPS = 128  # state.max_parallelism, the default
PAYLOADS = 1000  # distinct payload values: the oracle scores each once
TARGET = 1.3
MIN_RECORDS = 100  # control.rebalance_min_records: the default 1,000 is exactly one default window
SPARK_MASTER = "local[2]"
MASK = 0x7FFFFFFF

err = Console(stderr=True)


# ---------------------------------------------------------------------------------------------
# The input


def hot_key() -> tuple[str, int, int]:
    """The first key ``hot-<i>`` whose key group lies in the middle half of a task's range (not at
    its edge, where a range split would move it): (key, key group, owning task)."""
    for i in range(10_000):
        key = f"hot-{i}"
        group = key_group_of(key, KEY_GROUPS)
        for task in range(PARALLELISM):
            owned = key_group_range(task, PARALLELISM, KEY_GROUPS)
            quarter = len(owned) // 4
            if owned.start + quarter <= group < owned.stop - quarter:
                return key, group, task
    msg = "no hot key in the middle of a task's key groups"
    raise RuntimeError(msg)


def skewed_events(count: int, keys: int, hot: str, seed: int = DEFAULT_SEED) -> list[tuple[str, int]]:
    """``count`` events ``(key, payload)``: half of them of key ``hot``, the rest of ``keys``
    cold keys drawn uniformly, in random order (every window is skewed alike)."""
    rng = random.Random(seed)
    cold = [f"key-{i:05d}" for i in range(keys)]
    hot_count = count // 2
    names = [hot] * hot_count + [rng.choice(cold) for _ in range(count - hot_count)]
    rng.shuffle(names)
    return [(name, rng.randrange(PAYLOADS)) for name in names]


# ---------------------------------------------------------------------------------------------
# The keyed stage


def score(payload: int, rounds: int) -> int:
    """The per-record work: ``rounds`` rounds of a linear-congruential mix of the payload."""
    h = payload
    for _ in range(rounds):
        h = (h * 1103515245 + 12345) & MASK
    return h % 1000


class ScoreEvents(ProcessFunction):
    """Scores every event and keeps each key's (count, score total); emits ``(key, count, total)``
    at the end of every window in which the key was updated."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def process(self, record, ctx) -> None:
        count, total = ctx.get_state((0, 0))
        ctx.set_state((count + 1, total + score(record[1], self.rounds)))
        ctx.notify_at(ctx.window)  # one callback per key and window, however many records

    def on_notify(self, window, ctx) -> None:
        ctx.emit((ctx.key, *ctx.get_state()))


class Rebalances(JobListener):
    """Counts restarts (each is a rebalance here: nothing else restarts these jobs), keeps the
    keyed operator's key-group assignment after the last one and when each window finished."""

    def __init__(self) -> None:
        self.windows: list[int] = []  # the window each restart went on after
        self.assignment: tuple[int, ...] | None = None  # the task of each key group
        self.finished: dict[int, float] = {}  # window -> perf_counter when it last finished
        self.cpu = 0.0  # CPU seconds of this process and its worker processes during the run
        self.machine_cpu: float | None = None  # CPU seconds of every process on the machine

    def on_window(self, metrics) -> None:
        self.finished[metrics.window] = time.perf_counter()

    def on_restart(self, name, graph, window) -> None:
        self.windows.append(window)
        for vertex in graph.pipeline.vertices:
            if getattr(vertex, "assignment", None) is not None:
                self.assignment = tuple(vertex.assignment)

    def seconds_between(self, first: int, last: int) -> float:
        """Wall time from window ``first`` finishing to window ``last`` finishing."""
        return self.finished[last] - self.finished[first]


def environment(spark: bool, rebalance: bool) -> Environment:
    """Local worker processes or Spark workers mode, with or without automatic rebalance."""
    config = {"control.enabled": False, "control.auto_rebalance": rebalance,
              "control.rebalance_min_records": MIN_RECORDS}
    if spark:
        return Environment.spark(SPARK_MASTER, PARALLELISM, progress=False,
                                 config={**config, "spark.mode": "workers",
                                         "spark.workers": WORKERS})
    return Environment.local(PARALLELISM, progress=False,
                             config={**config, "environment.workers": WORKERS})


def machine_busy() -> float | None:
    """CPU seconds every process on the machine has used since boot (Linux ``/proc/stat``)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # not idle, iowait


def own_cpu() -> float:
    """CPU seconds of this process and its finished children (the local worker processes)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def skew_job(events: list, windows: int, rounds: int, spark: bool, rebalance: bool,
             listeners: list[Rebalances]):
    per_task = -(-len(events) // (windows * PARALLELISM))

    def run():
        listener = Rebalances()
        listeners.append(listener)
        pipeline = environment(spark, rebalance).pipeline("skew")

        @pipeline.task(name="skew")
        def skew(ctx):
            (ctx.source(events, SizeTumblingWindow(per_task), parallelism=PARALLELISM)
             .key_by(itemgetter(0)).process(ScoreEvents(rounds)).collect("scores"))

        busy, own = machine_busy(), own_cpu()
        result = pipeline.execute(fresh=True, listener=listener)
        listener.cpu = own_cpu() - own
        if busy is not None:
            listener.machine_cpu = machine_busy() - busy
        return result

    return run


def expected_scores(events: list, rounds: int) -> dict[str, tuple[int, int]]:
    """The oracle: each key's count and score total, by a plain loop (each payload scored once)."""
    scores = [score(payload, rounds) for payload in range(PAYLOADS)]
    counts: Counter = Counter()
    totals: Counter = Counter()
    for key, payload in events:
        counts[key] += 1
        totals[key] += scores[payload]
    return {key: (counts[key], totals[key]) for key in counts}


def check_scores(expected: dict, windows: int, name: str):
    def check(result) -> None:
        task = result["skew"]
        got = {}
        for _window, rows in sorted(task.by_window("scores").items()):
            for key, count, total in rows:
                got[key] = (count, total)
        if task.window_count != windows or got != expected:
            wrong = sum(1 for key in expected.keys() | got.keys() if got.get(key) != expected.get(key))
            msg = (f"{name}: {task.window_count} windows (expected {windows}), "
                   f"{wrong} keys with a wrong count or total")
            raise AssertionError(msg)

    return check


def scoring_loop(calls: int, rounds: int) -> float:
    """``calls`` scores and nothing else, in a pool process: the seconds they took there."""
    start = time.perf_counter()
    for i in range(calls):
        score(i % PAYLOADS, rounds)
    return time.perf_counter() - start


class MachineProbe:
    """The keyed stage's work without the engine, in one pool process and in two at once (each
    doing as many calls): how fast a core scores alone, and how fast each of two busy cores does.
    The fixed assignment runs mostly one busy task, a rebalance two, which wait for each other at
    every window: where the cores' speeds differ or drop when both are busy (a shared VM), the
    rebalanced job goes at the slower one's pace."""

    def __init__(self, pool, calls: int, rounds: int) -> None:
        self.pool, self.calls, self.rounds = pool, calls, rounds
        self.alone: list[float] = []  # µs per call, one process busy
        self.fast: list[float] = []  # µs per call, two busy: the faster process
        self.slow: list[float] = []  # and the slower

    def cases(self) -> dict:
        args = (self.calls, self.rounds)
        return {"machine|1 process": lambda: [self.pool.apply(scoring_loop, args)],
                "machine|2 processes": lambda: self.pool.starmap(scoring_loop, [args] * 2,
                                                                 chunksize=1)}

    def checks(self) -> dict:
        def alone(seconds: list[float]) -> None:
            self.alone.append(seconds[0] / self.calls * 1e6)

        def both(seconds: list[float]) -> None:
            self.fast.append(min(seconds) / self.calls * 1e6)
            self.slow.append(max(seconds) / self.calls * 1e6)

        return {"machine|1 process": alone, "machine|2 processes": both}

    def table(self) -> None:
        alone, fast, slow = (statistics.median(x) for x in (self.alone, self.fast, self.slow))
        print_table("This machine: the per-record work alone, no engine (µs per call, median of "
                    f"{len(self.alone)} runs of {self.calls:,} calls)",
                    ["case", "µs per call", "vs one process alone"],
                    [["one process busy", f"{alone:.1f}", "1.00x"],
                     ["two processes busy at once: the faster", f"{fast:.1f}",
                      format_ratio(alone / fast)],
                     ["two processes busy at once: the slower", f"{slow:.1f}",
                      format_ratio(alone / slow)]])


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="events in the stream")
    parser.add_argument("--keys", type=int, default=10_000, help="cold keys (the other half)")
    parser.add_argument("--work", type=int, default=1200,
                        help="rounds of the per-record scoring loop in the keyed stage")
    parser.add_argument("--windows", type=int, default=100, help="windows over the whole stream")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best of)")
    parser.add_argument("--spark", action="store_true",
                        help=f"also run both cases on Spark {SPARK_MASTER} in workers mode")
    return parser.parse_args(argv)


def shares(events: list, assignment: tuple[int, ...] | None) -> str:
    """The share of the records each task of the keyed operator receives: ``"25.1%/74.9%"``."""
    owners = owner_table(PARALLELISM, KEY_GROUPS, assignment)
    per_task: Counter = Counter()
    for key, n in Counter(key for key, _ in events).items():
        per_task[owners[key_group_of(key, KEY_GROUPS)]] += n
    return "/".join(f"{100 * per_task[t] / len(events):.1f}%" for t in range(PARALLELISM))


def run_note(listener: Rebalances, local: bool) -> str:
    """Restarts and CPU of one run: the job's own (local: driver and workers) and, from /proc/stat,
    the rest of the machine's (on Spark the JVM and its Python workers count as the rest)."""
    note = f"restarts after windows {listener.windows or '-'}"
    if local:
        note += f", job CPU {listener.cpu:.2f} s"
        if listener.machine_cpu is not None:
            note += f", other processes' CPU {max(0.0, listener.machine_cpu - listener.cpu):.2f} s"
    elif listener.machine_cpu is not None:
        note += f", machine CPU {listener.machine_cpu:.2f} s"
    return note


def load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def report(host: str, timings: dict, listeners: dict, events: list, args: argparse.Namespace,
           steady: int) -> bool:
    """Print one host's table (fixed assignment against auto rebalance); whether the target is met."""
    fixed_runs, balanced_runs = listeners[f"{host}|fixed"], listeners[f"{host}|rebalance"]
    if any(run.windows for run in fixed_runs):
        err.print(f"[red]{host}: a run with the fixed assignment restarted[/red]")
        return False
    late = [run.windows for run in balanced_runs if not run.windows or max(run.windows) >= steady]
    if late:
        err.print(f"[yellow]{host}: runs with auto_rebalance that did not rebalance before window "
                  f"{steady}: restarts after {late}[/yellow]")
    fixed, balanced = timings[f"{host}|fixed"], timings[f"{host}|rebalance"]
    ratio = fixed.best / balanced.best
    # The two runs of one repetition ran next to each other: on a busy machine their ratio is
    # steadier than the ratio of two best times picked from different moments.
    paired = statistics.median(a / b for a, b in zip(fixed.runs, balanced.runs, strict=True))
    last = args.windows

    def steady_seconds(runs: list[Rebalances]) -> list[float]:
        return [run.seconds_between(steady, last) for run in runs]

    fixed_steady, balanced_steady = steady_seconds(fixed_runs), steady_seconds(balanced_runs)
    steady_paired = statistics.median(a / b for a, b in zip(fixed_steady, balanced_steady, strict=True))

    def restarts(runs: list[Rebalances]) -> str:
        counts = sorted({len(run.windows) for run in runs})
        after = sorted({w for run in runs for w in run.windows})
        text = "/".join(map(str, counts))
        return f"{text} (after window {', '.join(map(str, after))})" if after else text

    def assignments(runs: list[Rebalances]) -> list[tuple[int, ...] | None]:
        return sorted({run.assignment for run in runs}, key=lambda a: a or ())

    def groups(assignment: tuple[int, ...] | None) -> str:
        owners = owner_table(PARALLELISM, KEY_GROUPS, assignment)
        return "/".join(str(owners.count(t)) for t in range(PARALLELISM))

    def others(runs: list[Rebalances]) -> str:
        if host != "local" or any(run.machine_cpu is None for run in runs):
            return "-"
        return " / ".join(f"{max(0.0, run.machine_cpu - run.cpu):.1f}" for run in runs)

    fixed_after, balanced_after = assignments(fixed_runs), assignments(balanced_runs)
    label = "local, 2 worker processes" if host == "local" else f"Spark {SPARK_MASTER}, workers mode"
    rows = [
        [f"whole run, s (best of {args.repeat})", format_seconds(fixed.best),
         format_seconds(balanced.best), format_ratio(ratio)],
        ["whole run, median of the pairs' speed-ups", "", "", format_ratio(paired)],
        [f"windows {steady + 1}-{last} (steady state), s (best)", format_seconds(min(fixed_steady)),
         format_seconds(min(balanced_steady)),
         format_ratio(min(fixed_steady) / min(balanced_steady))],
        [f"windows {steady + 1}-{last}, median of the pairs' speed-ups", "", "",
         format_ratio(steady_paired)],
        ["rebalances per run", restarts(fixed_runs), restarts(balanced_runs), ""],
        ["key groups per task (task 0/task 1)", "; ".join(map(groups, fixed_after)),
         "; ".join(map(groups, balanced_after)), ""],
        ["records per task (task 0/task 1)", "; ".join(shares(events, a) for a in fixed_after),
         "; ".join(shares(events, a) for a in balanced_after), ""],
        ["other processes' CPU s, each run", others(fixed_runs), others(balanced_runs), ""],
    ]
    print_table(f"Skew, {label}: {args.records:,} events, half of them one key, {args.windows} "
                f"windows, {args.work} rounds of scoring per record",
                ["", "fixed assignment", "auto rebalance", "speed-up"], rows)
    met = ratio >= TARGET
    print(f"target: auto rebalance >= {format_ratio(TARGET)} the throughput of the fixed assignment "
          f"({host}, whole run, best of {args.repeat}): {format_ratio(ratio)} -> "
          f"{'met' if met else 'NOT met'}")
    return met


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    hot, group, owner = hot_key()
    owned = key_group_range(owner, PARALLELISM, KEY_GROUPS)
    events = skewed_events(args.records, args.keys, hot)
    expected = expected_scores(events, args.work)
    err.print(f"{machine_line()}; 1-minute load average {load_average()} at the start")
    err.print(f"hot key {hot!r}: key group {group}, in the middle of task {owner}'s groups "
              f"{owned.start}-{owned.stop - 1}; records per task with the fixed assignment "
              f"{shares(events, None)}")

    pool = multiprocessing.get_context("fork").Pool(2)  # before Spark: no JVM in the forks
    hosts = ["local"]
    if args.spark:
        environment(True, False).session()  # started once, before the timings
        skew_job(events[:4000], 2, 1, True, False, [])()  # and its Python workers, untimed
        hosts.append("spark")
    cases, checks, listeners = {}, {}, {}
    for host in hosts:
        for mode, rebalance in (("fixed", False), ("rebalance", True)):
            name = f"{host}|{mode}"
            listeners[name] = []
            cases[name] = skew_job(events, args.windows, args.work, host == "spark", rebalance,
                                   listeners[name])
            checks[name] = check_scores(expected, args.windows, name)
    probe = MachineProbe(pool, max(1000, args.records // 8), args.work)
    cases.update(probe.cases())
    checks.update(probe.checks())

    def on_run(rep: int, name: str, seconds: float) -> None:
        if name.startswith("machine"):
            err.print(f"  run {rep}: {name} {seconds:.2f} s")
        else:
            err.print(f"  run {rep}: {name} {seconds:.2f} s, output checked; "
                      f"{run_note(listeners[name][-1], name.startswith('local'))}")

    try:
        timings = interleaved_best_of(cases, args.repeat, check=checks, on_run=on_run)
    except AssertionError as exc:
        err.print(f"[red]wrong output: {exc}[/red]")
        return 2
    finally:
        pool.terminate()
    err.print(f"1-minute load average {load_average()} at the end")

    steady = args.windows // 5  # the steady state: windows after this one, in both modes
    met = True
    for host in hosts:
        met = report(host, timings, listeners, events, args, steady) and met
    probe.table()
    print(f"command: {command_line()}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
