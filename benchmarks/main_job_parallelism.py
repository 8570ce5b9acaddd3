"""The main job at parallelism 1 and 2 in one process, checked against a Counter, and a plain loop.

``gyreflow run --env local examples/word_count.py`` with ``--parallelism 1`` and ``2``, their runs
alternated. On a machine of 2 cores or fewer the local environment runs a job's tasks in this
process, so parallelism 2 does the work of 1 plus what splitting the count costs (routing each
window's distinct keys to two tasks, weighing key groups for a rebalance, the window ends of two
more tasks: the second count task and the file sink, which then runs apart). Wall time on a shared
machine moves from run to run; CPU seconds (user and system of the run's process) move less; the
ratios are taken per repetition (p1 and p2 adjacent in time), then their median.

    python benchmarks/main_job_parallelism.py --words 8000000 --repeat 7
    python benchmarks/main_job_parallelism.py --instructions   # one run each under valgrind
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import DEFAULT_SEED, ROOT, format_seconds, machine_line, print_table, word_lines

JOBS = Path(__file__).resolve().parent / "_peers_jobs.py"
EXAMPLE = ROOT / "examples" / "word_count.py"
WINDOWS = 100


def expected_rows(path: Path, window: int) -> set:
    """(window, word, count so far) of every word of every window: a Counter over the lines."""
    totals: Counter = Counter()
    rows = set()
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, start in enumerate(range(0, len(lines), window), 1):
        seen: Counter = Counter()
        for line in lines[start:start + window]:
            seen.update(line.split())
        totals.update(seen)
        rows.update((number, word, totals[word]) for word in seen)
    return rows


def example_rows(directory: Path) -> set:
    rows = set()
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            rows.add((record["window"], record["word"], record["count"]))
    return rows


def loop_rows(path: Path) -> set:
    with path.open(encoding="utf-8") as lines:
        return {tuple(json.loads(line)) for line in lines}


def timed(command: list[str], env: dict | None = None) -> tuple[float, float, str]:
    """Run ``command``; (wall seconds, CPU seconds of it and the processes it waited for, its
    standard error)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        msg = f"{' '.join(command[:6])}...: exit {done.returncode}: {done.stderr.strip()[-400:]}"
        raise SystemExit(msg)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stderr


def instructions(command: list[str]) -> int:
    """Instructions ``command`` executes, counted by valgrind (the same from run to run, where
    times on a shared machine are not; fixed string hashes, so that dicts are laid out alike)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    counted = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    *_, report = timed(counted + command, env)
    found = re.search(r"I\s+refs:\s+([\d,]+)", report)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's report: {report.strip()[-300:]}")
    return int(found.group(1).replace(",", ""))


def write_input(scratch: Path, args) -> tuple[Path, int]:
    """The seeded words file and the lines of a window (``WINDOWS`` windows)."""
    source = scratch / "words.txt"
    lines = word_lines(args.words, vocabulary_size=args.vocabulary, seed=args.seed)
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return source, -(-len(lines) // WINDOWS)


def job_cases(scratch: Path, source: Path, window: int) -> dict:
    """{case: (command, output, read rows)} of the example at parallelism 1 and 2 and the loop."""
    cases = {}
    for parallelism in (1, 2):
        out = scratch / f"p{parallelism}"
        command = [sys.executable, "-m", "gyreflow", "run", "--env", "local", "-q",
                   str(EXAMPLE), "--", "--input", str(source), "--window", str(window),
                   "--parallelism", str(parallelism), "--output", str(out)]
        cases[f"p{parallelism}"] = (command, out, example_rows)
    loop_out = scratch / "loop.jsonl"
    cases["loop"] = ([sys.executable, str(JOBS), "loop", "windows", str(source), str(loop_out),
                      str(window)], loop_out, loop_rows)
    return cases


def run_case(cases: dict, name: str, expected: set, measure) -> object:
    """``measure(command)`` of case ``name``; its rows must equal ``expected``."""
    command, out, read = cases[name]
    if out.is_dir():
        for path in out.iterdir():
            path.unlink()
    measured = measure(command)
    if read(out) != expected:
        raise SystemExit(f"error: {name}'s rows differ from the Counter's")
    return measured


LABELS = {"p1": "examples/word_count.py --parallelism 1",
          "p2": "examples/word_count.py --parallelism 2",
          "loop": "plain loop (Counter per window)"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, default=2_000_000, help="words of input (10 a line)")
    parser.add_argument("--vocabulary", type=int, default=1000, help="distinct words (Zipf)")
    parser.add_argument("--repeat", type=int, default=5, help="alternated repetitions")
    parser.add_argument("--instructions", action="store_true",
                        help="count the instructions of one run of each under valgrind instead")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gyreflow-parallelism-") as tmp:
        scratch = Path(tmp)
        source, window = write_input(scratch, args)
        expected = expected_rows(source, window)
        cases = job_cases(scratch, source, window)
        title = (f"The main job, {args.words:,} words (vocabulary {args.vocabulary:,}) in "
                 f"{WINDOWS} windows of {window:,} lines")
        if args.instructions:
            counts = {name: run_case(cases, name, expected, instructions) for name in cases}
            print_table(title + ", instructions of one run", ["job", "instructions (M)"],
                        [[LABELS[name], f"{n / 1e6:,.1f}"] for name, n in counts.items()])
            print(machine_line())
            print(f"p2/p1: {counts['p2'] / counts['p1']:.4f}")
            return 0
        wall: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for rep in range(args.repeat):
            order = names[rep % 2:] + names[:rep % 2]  # p1 first in one repetition, p2 in the next
            for name in order:
                seconds, cpu_seconds, _ = run_case(cases, name, expected, timed)
                wall[name].append(seconds)
                cpu[name].append(cpu_seconds)
                print(f"  #{rep + 1} {name}: {seconds:.3f} s wall, {cpu_seconds:.3f} s CPU",
                      file=sys.stderr)
    wall_ratio = statistics.median(b / a for a, b in zip(wall["p1"], wall["p2"], strict=True))
    cpu_ratio = statistics.median(b / a for a, b in zip(cpu["p1"], cpu["p2"], strict=True))
    rows = [[LABELS[name], format_seconds(statistics.median(wall[name])),
             format_seconds(statistics.median(cpu[name]))] for name in names]
    print_table(f"{title}, median of {args.repeat}", ["job", "wall s", "CPU s"], rows)
    print(machine_line())
    print(f"p2/p1, median of the repetitions' ratios: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
