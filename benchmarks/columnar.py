"""Columnar word count: ``key_by("word").count()`` on column batches against the row paths.

The same 2M words, read from files and counted in one window, in one run (best of N, interleaved;
every run's counts checked against a ``collections.Counter`` of the words as generated):

- the plain loop: a ``Counter`` over the text file's split lines;
- gyreflow today: ``FileSource`` lines, ``flat_map(str.split)``, ``key_by().count()``;
- gyreflow rows from Parquet: ``DirectorySource(format="parquet")`` (a dict per row),
  ``key_by("word").count()``;
- gyreflow columns from Parquet: the same with ``columnar=True``;
- the floor: pyarrow alone, ``read_table`` and ``value_counts``.

Usage: python benchmarks/columnar.py [--words N] [--repeat N] [--write-docs]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
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

from gyreflow.api import AllWindow, DirectorySource, Environment, FileSource

LOOP = "plain Counter loop over the text lines"
TODAY = "gyreflow rows: text lines, flat_map(split), key_by().count()"
ROWS = "gyreflow rows: Parquet dicts, key_by(\"word\").count()"
COLUMNS = "gyreflow columns: Parquet columnar=True, key_by(\"word\").count()"
FLOOR = "pyarrow alone: read_table + value_counts"
TARGET = 3.0  # columns against today's row word count


def write_inputs(folder: Path, lines: list[str]) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = folder / "words.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    parquet = folder / "parquet"
    parquet.mkdir()
    words = [w for line in lines for w in line.split()]
    pq.write_table(pa.table({"word": words}), parquet / "words.parquet", row_group_size=1 << 20)
    return text, parquet


def gyreflow_case(kind: str, text: Path, parquet: Path):
    def run():
        env = Environment.from_config(None, {"environment.type": "local", "progress.enabled": False,
                                             "state.backend": "memory"})
        pipeline = env.pipeline(f"columnar-bench-{kind}")

        @pipeline.task
        def count(ctx):
            if kind == "today":
                words = ctx.source(FileSource(str(text)), AllWindow()).flat_map(str.split)
                words.key_by().count().collect("counts")
            else:
                source = DirectorySource(parquet, "*.parquet", format="parquet",
                                         columnar=kind == "columns")
                ctx.source(source, AllWindow()).key_by("word").count().collect("counts")

        return dict(pipeline.execute()["count"].output("counts"))

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    lines = word_lines(args.words, vocabulary_size=1000, words_per_line=10, seed=DEFAULT_SEED)
    expected = Counter(w for line in lines for w in line.split())
    with tempfile.TemporaryDirectory() as tmp:
        text, parquet = write_inputs(Path(tmp), lines)

        def loop():
            counts: Counter = Counter()
            with open(text, encoding="utf-8") as handle:
                for line in handle:
                    counts.update(line.split())
            return counts

        def floor():
            import pyarrow.parquet as pq

            counted = pq.read_table(parquet / "words.parquet").column("word").value_counts()
            return dict(zip(counted.field("values").to_pylist(),
                            counted.field("counts").to_pylist(), strict=True))

        cases = {LOOP: loop, TODAY: gyreflow_case("today", text, parquet),
                 ROWS: gyreflow_case("rows", text, parquet),
                 COLUMNS: gyreflow_case("columns", text, parquet), FLOOR: floor}

        def check(name):
            def verify(result) -> None:
                if dict(result) != expected:
                    msg = f"{name}: counts differ from the Counter oracle"
                    raise SystemExit(msg)
            return verify

        timings = interleaved_best_of(cases, args.repeat,
                                      check={name: check(name) for name in cases},
                                      on_run=lambda rep, name, s: print(
                                          f"repetition {rep}: {name}: {s:.3f} s", file=sys.stderr))
    today = timings[TODAY].best
    rows = [[name, format_seconds(t.best), format_rate(args.words / t.best),
             format_ratio(today / t.best)] for name, t in timings.items()]
    table = print_table(f"Columnar word count, {args.words:,} words in one window",
                        ["case", "seconds", "words/s", "vs gyreflow today"], rows)
    ratio = today / timings[COLUMNS].best
    verdict = "met" if ratio >= TARGET else "NOT met"
    notes = [f"Machine: {machine_line()}.",
             f"Command: `{command_line()}`; best of {args.repeat}, interleaved; every run's "
             "counts equal a Counter of the generated words.",
             "pyarrow alone reads the word column as strings and counts them; gyreflow's columnar "
             "reader reads text columns as dictionaries (as Parquet stores them) and counts codes.",
             f"Target: columns at least {TARGET:.0f}x today's row word count: {ratio:.2f}x, "
             f"{verdict}."]
    for note in notes:
        print(note)
    if args.write_docs:
        update_docs_section("columnar", "\n".join(["## Columnar word count", "", table, "",
                                                   *[f"- {n}" for n in notes]]))
    return 0 if ratio >= TARGET else 1


if __name__ == "__main__":
    os.environ.setdefault("GYREFLOW_PROGRESS__ENABLED", "false")
    sys.exit(main())
