"""Crash recovery of a columnar job: ``examples/columnar_word_count.py`` (Parquet read as Arrow
columns, ``key_by("word").count()``) killed at crash points and by SIGKILL mid-run, in one process
and in two worker processes, then ``--resume``d: the window files equal a ``Counter`` oracle of the
words as written, with nothing lost and nothing counted twice.

The column batches' state is the same keyed count as the row path's, and the source's offset is the
Parquet position (file, row group, row): a crash in the middle of a row group resumes inside it.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from _recovery_jobs import crash, run_job

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "columnar_word_count.py"
WINDOW = 700  # words; row groups of 256 rows, so windows end inside row groups
FILES = (2_100, 0, 1_900, 2_000)  # words per Parquet file (an empty one between)


def oracle(words: list, window: int) -> dict[str, list[str]]:
    """The files the job writes: window w -> each word of the window with its count so far."""
    totals: Counter = Counter()
    files = {}
    for number, start in enumerate(range(0, len(words), window), start=1):
        chunk = words[start:start + window]
        totals.update(chunk)
        files[f"window-{number:06d}.jsonl"] = sorted(
            json.dumps({"window": number, "word": w, "count": totals[w]}, ensure_ascii=False)
            for w in set(chunk))
    return files


@pytest.fixture(scope="module")
def parquet_words(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    folder = tmp_path_factory.mktemp("columnar-words")
    rng = random.Random(20261127)
    vocabulary = [f"w{i:03d}" for i in range(300)] + ["café", "naïve", ""]
    words = []
    for index, count in enumerate(FILES):
        part = [rng.choice(vocabulary) for _ in range(count)]
        words += part
        pq.write_table(pa.table({"word": pa.array(part, pa.string())}),
                       folder / f"part-{index}.parquet", row_group_size=256)
    return folder, oracle(words, WINDOW)


def read_sorted(directory: Path) -> dict[str, list[str]]:
    return {path.name: sorted(path.read_text(encoding="utf-8").splitlines())
            for path in sorted(directory.iterdir())}


def args(folder: Path, out: Path) -> list[str]:
    return ["--input", str(folder), "--output", str(out), "--window", str(WINDOW)]


def test_an_uninterrupted_columnar_run_equals_the_counter(parquet_words, tmp_path):
    folder, expected = parquet_words
    out = tmp_path / "out"
    done = run_job(EXAMPLE, args(folder, out), {"GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    assert done.returncode == 0, done.stderr
    assert read_sorted(out) == expected


@pytest.mark.parametrize(("backend", "workers", "moments"), [
    ("rocksdb", "1", ("after-commit:3", "kill@0.5")),
    # A publish lags behind the commits, which may reach the last window before it: a crash
    # while publishing comes last, so that the run it ends still has windows to commit before it.
    ("jdbc", "2", ("before-commit:4", "mid-publish:7")),
])
def test_a_columnar_job_crashes_then_resumes_exactly(parquet_words, tmp_path, backend, workers,
                                                     moments):
    folder, expected = parquet_words
    out = tmp_path / "out"
    env = {"GYREFLOW_STATE__PATH": str(tmp_path / "state"), "GYREFLOW_STATE__BACKEND": backend,
           "GYREFLOW_ENVIRONMENT__WORKERS": workers, "GYREFLOW_ENVIRONMENT__PARALLELISM": "2"}
    # The crash moments land in window order: each run resumes the one before it, then crashes.
    for number, moment in enumerate(moments):
        flags = ("--resume",) if number else ()
        crash(EXAMPLE, args(folder, out), env, moment, reference=expected, flags=flags)
    resume_and_compare(folder, out, env, expected)


def resume_and_compare(folder: Path, out: Path, env: dict[str, str],
                       expected: dict[str, list[str]]) -> None:
    done = run_job(EXAMPLE, args(folder, out), env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert read_sorted(out) == expected

