"""gyreflow against its peers (Bytewax, PyFlink, Pathway, Spark) and a plain-Python loop: every
engine runs as a whole process (start-up included) on the same seeded input; its output is checked
against the plain loop's before its time counts."""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    DEFAULT_SEED,
    ROOT,
    command_line,
    format_ratio,
    format_seconds,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)

BENCHMARKS = Path(__file__).resolve().parent
JOBS = BENCHMARKS / "_peers_jobs.py"
PEER_PACKAGES = {"bytewax": "bytewax==0.21.*", "pyflink": "apache-flink==2.3.*",
                 "pathway": "pathway==0.33.*"}
DISTRIBUTIONS = {"bytewax": "bytewax", "pyflink": "apache-flink", "pathway": "pathway",
                 "spark": "pyspark"}
ALL_PEERS = ("bytewax", "pyflink", "pathway", "spark")
LOOP, API, EXAMPLE = "plain Python loop", "gyreflow API", "gyreflow example"
LOOP2 = "plain Python loop, 2 processes (half the windows each)"
ARROW = "pyarrow alone (no engine)"
LABELS = {"bytewax": "Bytewax", "pyflink": "PyFlink Table/SQL (batch)", "pathway": "Pathway"}
# How each peer's job is written, by workload: the plainest formulation (one operator a user reaches
# for first) and, where it differs, the fastest idiomatic one (written the way gyreflow's count()
# works: a C loop per window, then running totals). A peer with one row is timed in one form.
FORMULATIONS = {
    "bytewax": {"events": "plainest: count_window per key",
                "words": "plainest: count_final per word",
                "windows": "plainest: stateful_map per word"},
    "bytewax-fast": {"words": "fastest: fold_final of lines into a Counter",
                     "windows": "fastest: fold_window of lines into a Counter, "
                                "stateful_map of running totals"},
    "spark": {"events": "one form: groupBy(window, key).count()",
              "words": "one form: explode, groupBy(word).count()",
              "windows": "one form: groupBy(window, word).count(), running sum over windows"},
    "pathway": {"events": "one form: windowby().reduce(count())",
                "words": "one form: groupby(word).reduce(count())"},
    "pyflink": {"events": "one form: TUMBLE window GROUP BY", "words": "one form: GROUP BY word"},
}
TIMEOUT_SECONDS = 1800
LAST_CPU = [0.0]  # CPU seconds of the last process run_once ran
WORKLOADS = ("events", "words", "windows")


@dataclass
class Workload:
    """One input and the query every engine answers on it."""

    name: str
    title: str
    input_path: Path
    window: int = 0
    example: list[str] | None = None  # arguments of `gyreflow run` after the script path
    parallelisms: tuple[int, ...] = ()  # run the example once per --parallelism given here
    expected: set = field(default_factory=set)


@dataclass
class Outcome:
    """Median seconds of an engine's runs, or why it has none."""

    engine: str
    seconds: float | None = None
    status: str = ""
    runs: dict[int, float] = field(default_factory=dict)  # repetition -> seconds
    # repetition -> CPU seconds (user and system) of the process and the children it waited for
    cpu: dict[int, float] = field(default_factory=dict)


# --- inputs --------------------------------------------------------------------------------------


def write_events(path: Path, count: int, seed: int) -> None:
    """``count`` events in time order, 100 per second, over 100 keys with skewed frequencies.

    Timestamps are ``i * 10 + 5`` ms: never on a window boundary, so every engine's rounding
    agrees on the window of every event.
    """
    rng = random.Random(seed)
    keys = [f"k{n:03d}" for n in range(100)]
    picks = rng.choices(keys, weights=[1 / (rank + 1) for rank in range(100)], k=count)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for i, key in enumerate(picks):
            ts = (i * 10 + 5) / 1000
            out.write(json.dumps({"key": key, "ts": ts, "value": rng.randrange(100)}) + "\n")


def write_words(path: Path, count: int, seed: int) -> None:
    path.write_text("\n".join(word_lines(count, seed=seed)) + "\n", encoding="utf-8")


# --- peers' virtual environment ------------------------------------------------------------------


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def peer_python(root: Path, peer: str) -> Path:
    """The interpreter that runs ``peer``: gyreflow's own when the peer is installed there (pyspark,
    and Bytewax from the ``bench`` extra), else a virtual environment of its own under ``root``
    (their pins conflict: PyFlink holds protobuf below 6, Pathway needs 6.33 or later)."""
    if peer == "spark" or installed_version(Path(sys.executable), peer):
        return Path(sys.executable)
    return venv_python(root / peer)


def install_peers(root: Path, peers: list[str]) -> dict[str, str]:
    """Create each peer's virtual environment under ``root`` if needed and install the peer there;
    return {peer: why not} for failures."""
    failures: dict[str, str] = {}
    for peer in peers:
        python = peer_python(root, peer)
        if python == Path(sys.executable):
            continue
        if not python.exists():
            made = subprocess.run([sys.executable, "-m", "venv", str(python.parents[1])],
                                  capture_output=True, text=True, check=False)
            if made.returncode != 0:
                failures[peer] = f"python -m venv {python.parents[1]} failed: {last_line(made.stderr)}"
                continue
        if installed_version(python, peer):
            continue
        print(f"installing {PEER_PACKAGES[peer]} into {python.parents[1]} ...", file=sys.stderr)
        done = subprocess.run([str(python), "-m", "pip", "install", "-q", PEER_PACKAGES[peer]],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            failures[peer] = f"pip install {PEER_PACKAGES[peer]} failed: {last_line(done.stderr)}"
    return failures


def installed_version(python: Path, peer: str) -> str:
    code = ("import importlib.metadata as m, sys\n"
            "try: print(m.version(sys.argv[1]))\nexcept m.PackageNotFoundError: pass")
    done = subprocess.run([str(python), "-c", code, DISTRIBUTIONS[peer]], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip()


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else "no message"


# --- running and checking ------------------------------------------------------------------------


def normalize(rows) -> set:
    """Rows as a set of tuples, integral floats as ints (10.0 and 10 are the same window)."""
    def plain(value):
        return int(value) if isinstance(value, float) and value.is_integer() else value
    return {tuple(plain(value) for value in row) for row in rows}


def read_rows(path: Path) -> set:
    with path.open(encoding="utf-8") as lines:
        return normalize(json.loads(line) for line in lines)


def read_example_rows(workload: Workload, directory: Path) -> set:
    rows = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if workload.name == "events":
                if path.name.startswith("results"):
                    rows.append((record["key"], record["start"], record["value"]))
            elif workload.name == "words":
                rows.append((record["word"], record["count"]))
            else:
                rows.append((record["window"], record["word"], record["count"]))
    return normalize(rows)


def run_once(command: list[str], read) -> tuple[float, set | str]:
    """Run ``command`` as a process; return (seconds, rows read by ``read()``) or (0, why not).
    ``LAST_CPU[0]`` is then its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=TIMEOUT_SECONDS, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return 0.0, f"not run: no result after {TIMEOUT_SECONDS} s"
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        return 0.0, f"not run: {last_line(done.stderr)}"
    return seconds, read()


def engine_commands(workload: Workload, engines: dict[str, Path], scratch: Path):
    """{engine label: (command, read output)} for every engine of ``workload``."""
    commands = {}
    for engine, python in formulations(engines, workload.name):
        if engine == "loop2" and not workload.parallelisms:
            continue  # what two processes give is measured where parallelism 2 is
        output = scratch / f"{workload.name}-{engine}.jsonl"
        label = engine_label(engine, workload.name)
        command = [str(python), str(JOBS), engine, workload.name, str(workload.input_path),
                   str(output), str(workload.window)]
        commands[label] = (command, lambda output=output: read_rows(output))
    if workload.example is not None:
        script, *arguments = workload.example
        for parallelism in workload.parallelisms or (None,):
            directory = scratch / f"{workload.name}-example-{parallelism}"
            extra = [] if parallelism is None else ["--parallelism", str(parallelism)]
            command = [sys.executable, "-m", "gyreflow", "run", "--env", "local", "-q",
                       str(ROOT / script), "--", *arguments, *extra, "--output", str(directory)]

            def read(directory=directory):
                return read_example_rows(workload, directory)

            commands[example_label(script, parallelism)] = (command, read, directory)
    return commands


def example_label(script: str, parallelism: int | None = None) -> str:
    return EXAMPLE + f" ({script}" + ("" if parallelism is None else
                                      f", parallelism {parallelism}") + ")"


def formulations(engines: dict[str, Path], workload: str) -> list[tuple[str, Path]]:
    """(job name in _peers_jobs.py, interpreter) of every formulation of every engine."""
    jobs = []
    for engine, python in engines.items():
        jobs.append((engine, python))
        if f"{engine}-fast" in FORMULATIONS and workload in FORMULATIONS[f"{engine}-fast"]:
            jobs.append((f"{engine}-fast", python))
    return jobs


def engine_label(engine: str, workload: str) -> str:
    """The table's name of a job: the engine, and how its job is written when it is a peer."""
    fixed = {"loop": LOOP, "loop2": LOOP2, "gyreflow": API, "pyarrow": ARROW}
    if engine in fixed:
        return fixed[engine]
    peer = engine.removesuffix("-fast")
    name = LABELS.get(peer, peer)
    if peer == "spark":
        name = "Spark Structured Streaming" if workload == "events" else "Spark DataFrame"
    how = FORMULATIONS.get(engine, {}).get(workload)
    return f"{name} ({how})" if how else name


def measure(workload: Workload, commands: dict, repeat: int, skipped: dict[str, str]) -> list:
    """Median seconds of ``repeat`` interleaved runs of every engine whose output is right."""
    outcomes = {label: Outcome(label) for label in commands}
    for rep in range(repeat):
        labels = list(commands)
        shift = rep % len(labels)
        for label in labels[shift:] + labels[:shift]:
            if outcomes[label].status:
                continue
            command, read, *directories = commands[label]
            for directory in directories:
                clear(directory)
            seconds, rows = run_once(command, read)
            if isinstance(rows, str):
                outcomes[label].status = rows
            elif rows != workload.expected:
                outcomes[label].status = (f"wrong output: {len(rows ^ workload.expected)} rows "
                                          f"differ of {len(workload.expected)}")
            else:
                outcomes[label].runs[rep] = seconds
                outcomes[label].cpu[rep] = LAST_CPU[0]
            print(f"  {workload.name} #{rep + 1} {label}: "
                  f"{outcomes[label].status or format_seconds(seconds)}", file=sys.stderr)
    for outcome in outcomes.values():
        if not outcome.status:
            outcome.seconds = statistics.median(outcome.runs.values())
    return list(outcomes.values()) + [Outcome(label, status=f"not run: {reason}")
                                      for label, reason in skipped.items()]


def clear(directory: Path) -> None:
    if directory.exists():
        for path in directory.iterdir():
            path.unlink()


def table(workload: Workload, outcomes: list[Outcome]) -> str:
    loop = next((o.seconds for o in outcomes if o.engine == LOOP), None)
    api = next((o.seconds for o in outcomes if o.engine == API), None)
    rows = []
    for outcome in outcomes:
        if outcome.seconds is None:
            rows.append([outcome.engine, outcome.status, "", "", ""])
            continue
        rows.append([outcome.engine, format_seconds(outcome.seconds),
                     format_ratio(outcome.seconds / loop) if loop else "",
                     format_ratio(outcome.seconds / api) if api else "",
                     format_seconds(statistics.median(outcome.cpu.values()))])
    return print_table(workload.title, ["engine", "seconds (median)", "vs plain loop",
                                        "vs gyreflow API", "CPU s (median)"], rows)


# --- targets -------------------------------------------------------------------------------------

WORD_COUNT, EVENT_TIME = "examples/word_count.py", "examples/event_time.py"
# (workload, job, reference, least speed): the job's speed is the reference's seconds divided by
# the job's, taken per repetition (both ran in it, one after the other) and then the median.
TARGETS = [
    ("windows", example_label(WORD_COUNT, 1), engine_label("bytewax-fast", "windows"), 1.2),
    ("windows", example_label(WORD_COUNT, 1), LOOP, 0.5),
    ("windows", example_label(WORD_COUNT, 2), example_label(WORD_COUNT, 1), 1.0),
    ("windows", LOOP2, LOOP, None),  # not a target: what a second process gives any job here
    ("events", example_label(EVENT_TIME), LOOP, 1.5),
    ("words", API, LOOP, 0.8),
]


def target_lines(workload: str, outcomes: list[Outcome]) -> list[str]:
    """One line per target of ``workload``: the median speed over repetitions and its spread."""
    by_label = {outcome.engine: outcome for outcome in outcomes}
    lines = []
    for name, job, reference, least in TARGETS:
        if name != workload:
            continue
        mine, theirs = by_label.get(job), by_label.get(reference)
        reps = sorted(set(mine.runs) & set(theirs.runs)) if mine and theirs else []
        if not reps:
            what = "for comparison" if least is None else f">= {least}x"
            lines.append(f"- {job} {what} the speed of {reference}: not measured")
            continue
        speeds = [theirs.runs[rep] / mine.runs[rep] for rep in reps]
        median = statistics.median(speeds)
        by_cpu = statistics.median(theirs.cpu[rep] / mine.cpu[rep] for rep in reps)
        spread = (f"(repetitions {min(speeds):.2f}x to {max(speeds):.2f}x; by CPU seconds "
                  f"{by_cpu:.2f}x)")
        if least is None:
            lines.append(f"- the machine, for comparison: {job}: {median:.2f}x the speed of "
                         f"{reference} {spread}")
            continue
        lines.append(f"- {job} >= {least}x the speed of {reference}: {median:.2f}x {spread} -> "
                     + ("met" if median >= least else "not met"))
    return lines


# --- main ----------------------------------------------------------------------------------------


def workloads(scratch: Path, small: bool, seed: int) -> list[Workload]:
    events, words = (20_000, 40_000) if small else (1_000_000, 2_000_000)
    event_path = scratch / "events" / "events.jsonl"   # alone in its directory (Spark reads it)
    write_events(event_path, events, seed)
    word_path = scratch / "words.txt"
    write_words(word_path, words, seed)
    lines = -(-words // 10)
    window = lines // 100
    return [
        Workload("events", f"event-time 10 s tumbling count per key, {events:,} JSON events",
                 event_path, example=["examples/event_time.py", "--input", str(event_path),
                                      "--window", f"tumbling:{10}", "--agg", "count"]),
        Workload("words", f"word count, {words:,} words in one window", word_path,
                 example=["examples/word_count.py", "--input", str(word_path),
                          "--window", str(lines)]),
        Workload("windows", f"cumulative word count, {words:,} words in 100 windows "
                 f"of {window:,} lines (the main job)", word_path, window=window,
                 example=["examples/word_count.py", "--input", str(word_path),
                          "--window", str(window)], parallelisms=(1, 2)),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peers", default=",".join(ALL_PEERS),
                        help=f"comma-separated subset of {','.join(ALL_PEERS)}")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated subset of {','.join(WORKLOADS)}")
    parser.add_argument("--small", action="store_true", help="small inputs for a quick check")
    parser.add_argument("--repeat", type=int, default=3, help="median of N runs per engine")
    parser.add_argument("--venvs", default=str(ROOT / ".cache" / "peers"),
                        help="folder of the peers' virtual environments (one each)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--write-docs", action="store_true",
                        help="write the tables to the Peers section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    peers = [peer.strip() for peer in args.peers.split(",") if peer.strip()]
    unknown = sorted(set(peers) - set(ALL_PEERS))
    if unknown or args.repeat < 1:
        parser.error(f"unknown peers {unknown}" if unknown else "--repeat must be >= 1")
    chosen = [name.strip() for name in args.workloads.split(",") if name.strip()]
    if not chosen or set(chosen) - set(WORKLOADS):
        parser.error(f"--workloads: choose from {', '.join(WORKLOADS)}")
    root = Path(args.venvs)
    failures = install_peers(root, peers)
    versions = {peer: installed_version(peer_python(root, peer), peer)
                for peer in peers if peer not in failures}
    engines = {"loop": Path(sys.executable), "loop2": Path(sys.executable),
               "pyarrow": Path(sys.executable),
               "gyreflow": Path(sys.executable)}
    engines.update({peer: peer_python(root, peer) for peer in peers if peer not in failures})
    header = "peers: " + ", ".join(f"{DISTRIBUTIONS[p]} {versions.get(p) or 'not installed'}"
                                   for p in peers)
    print(machine_line(), header, sep="\n")
    sections = [f"`{command_line()}`", "", machine_line() + "; " + header]
    with tempfile.TemporaryDirectory(prefix="gyreflow-peers-") as tmp:
        scratch = Path(tmp)
        for workload in workloads(scratch, args.small, args.seed):
            if workload.name not in chosen:
                continue
            from _peers_jobs import run_loop

            workload.expected = normalize(run_loop(workload.name, str(workload.input_path),
                                                   workload.window))
            skipped = {LABELS.get(peer, peer): reason for peer, reason in failures.items()}
            outcomes = measure(workload, engine_commands(workload, engines, scratch),
                               args.repeat, skipped)
            sections += ["", f"**{workload.title}**", "", table(workload, outcomes)]
            goals = target_lines(workload.name, outcomes)
            if goals:
                print("\n".join(goals))
                sections += ["", "Targets (speed = the reference's seconds / the job's, per "
                             "repetition; median and spread):", "", *goals]
    if args.write_docs:
        notes = ("Every engine runs as its own process, start-up and input reading included; its "
                 "output is checked against the plain loop's before its time counts. Seconds are "
                 f"the median of {args.repeat} runs. A peer appears in its plainest formulation "
                 "and, where it has a faster idiomatic one, in that one too (each row says which). "
                 "CPU s is the user and system seconds of the process and of the processes it "
                 "waited for (forked workers; not a JVM it leaves running): on this machine, "
                 "shared with other work, it moves less from run to run than the wall time, and "
                 "each target line gives the speed by CPU seconds too (the targets are on wall "
                 "time).")
        update_docs_section("peers", "## Peers\n\n" + notes + "\n\n" + "\n".join(sections))


if __name__ == "__main__":
    main()
