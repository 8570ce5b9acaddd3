"""examples/word_count.py on the shipped sample: cumulative counts per window against a Counter."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import tempfile
from collections import Counter

import pytest
from _environments import environment_variables

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "word_count.py"
SAMPLE = ROOT / "examples" / "data" / "sample.txt"


def load_example():
    spec = importlib.util.spec_from_file_location("word_count_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample_lines() -> list[str]:
    """The sample's lines as FileSource reads them: split at newlines, without line endings."""
    data = SAMPLE.read_bytes()
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()  # the final newline ends the last line; it does not start another
    return [line.rstrip(b"\r").decode("utf-8") for line in lines]


def window_counts(windows_of_lines: list[list[str]]) -> dict[int, dict[str, int]]:
    """Oracle: for window w, every word in its lines with its count over windows 1..w."""
    totals: Counter = Counter()
    expected = {}
    for number, lines in enumerate(windows_of_lines, start=1):
        words = [word for line in lines for word in line.split()]
        totals.update(words)
        expected[number] = {word: totals[word] for word in set(words)}
    return expected


def chunks(lines: list[str], size: int) -> list[list[str]]:
    return [lines[i:i + size] for i in range(0, len(lines), size)]


def read_windows(directory: pathlib.Path) -> dict[int, dict[str, int]]:
    windows = {}
    for path in sorted(directory.iterdir()):
        window = int(path.name.removeprefix("window-").removesuffix(".jsonl"))
        counts: dict[str, int] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            assert set(record) == {"window", "word", "count"}
            assert record["window"] == window
            assert record["word"] not in counts
            counts[record["word"]] = record["count"]
        windows[window] = counts
    return windows


def check_output(directory: pathlib.Path, expected: dict[int, dict[str, int]]) -> None:
    names = sorted(os.listdir(directory))  # hidden (staging) files included
    assert names == [f"window-{w:06d}.jsonl" for w in range(1, len(expected) + 1)]
    assert read_windows(directory) == expected


@pytest.fixture
def out_dir(tmp_path):
    """A directory for window files: on a RAM disk when there is one (thousands of small files)."""
    shm = pathlib.Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        with tempfile.TemporaryDirectory(dir=shm, prefix="gyreflow-wc-") as directory:
            yield pathlib.Path(directory) / "out"
    else:
        yield tmp_path / "out"


@pytest.fixture(autouse=True)
def defaults_only(monkeypatch, tmp_path, environment_type):
    """main() reads GYREFLOW_* variables: run it on the defaults (in each environment), away from
    the repository."""
    for name in list(os.environ):
        if name.startswith("GYREFLOW_"):
            monkeypatch.delenv(name)
    for name, value in environment_variables(environment_type).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GYREFLOW_SPARK__MASTER", "local[2]")
    monkeypatch.chdir(tmp_path)


def test_sample_oracle_by_hand():
    assert window_counts([["a b", "b"], ["", "c b"], ["a"]]) == {
        1: {"a": 1, "b": 2},
        2: {"c": 1, "b": 3},
        3: {"a": 2},
    }
    lines = sample_lines()
    assert len(lines) == 5000
    assert lines[0].split()[:2] == ["pipeline", "exactly"]


@pytest.mark.parametrize("parallelism", [1, 3])
@pytest.mark.parametrize("window", [1, 7, 500])
def test_main_on_the_sample(out_dir, window, parallelism, environment_type, tmp_path):
    lines = sample_lines()
    source = SAMPLE
    # The local run reads 2,100 windows at window 1 (more than the 2 x 1,000 windows whose metrics
    # a run keeps) and the whole sample at the other windows. A window costs a round trip between
    # processes with workers and a Spark job per round on Spark: there the small-window cases
    # stop sooner.
    most_windows = {"local": 2_100, "workers": 60, "spark": 12}[environment_type]
    if most_windows is not None and len(lines) // window > most_windows:
        lines = lines[:most_windows * window]
        source = tmp_path / "sample-head.txt"
        source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    expected = window_counts(chunks(lines, window))
    result = load_example().main(["--input", str(source), "--window", str(window),
                                  "--output", str(out_dir), "--parallelism", str(parallelism)])
    check_output(out_dir, expected)
    task = result["word_count"]
    assert task.window_count == len(expected)
    kept = task.kept  # the metrics of the first and last windows are kept, the rest summed
    ids = list(range(1, len(expected) + 1))
    assert [w.window for w in task.windows] == (
        ids if len(ids) <= 2 * kept else ids[:kept] + ids[-kept:])
    assert task.summary.operators["lines"][1] == len(lines)  # every line read, over all windows
    # Each word's last written count (from the last window it appears in) is its count over the
    # whole file.
    last: dict[str, int] = {}
    for _, counts in sorted(read_windows(out_dir).items()):
        last.update(counts)
    assert last == Counter(word for line in lines for word in line.split())


def test_main_defaults_read_the_sample(out_dir):
    load_example().main(["--output", str(out_dir)])  # --input defaults to the sample, window 500
    check_output(out_dir, window_counts(chunks(sample_lines(), 500)))


@pytest.mark.parametrize(("parallelism", "window"), [(1, 700), (2, 400), (3, 1000)])
def test_windows_are_consecutive_lines_at_any_parallelism(make_env, out_dir, parallelism, window):
    """``--window N`` means N consecutive input lines per window whatever the environment's
    parallelism (the counting step runs with it; the file is read in order)."""
    env = make_env(parallelism=parallelism)
    pipeline = load_example().build(env.pipeline("word-count"), str(SAMPLE), window, str(out_dir))
    result = pipeline.execute()
    check_output(out_dir, window_counts(chunks(sample_lines(), window)))
    assert result["word_count"].window_count == -(-5000 // window)


def test_the_shipped_configs_keep_the_window_contract(out_dir):
    for config in sorted((ROOT / "conf").glob("*.toml")):
        load_example().main(["--config", str(config), "--window", "1500", "--output",
                             str(out_dir / config.stem)])
        check_output(out_dir / config.stem, window_counts(chunks(sample_lines(), 1500)))
