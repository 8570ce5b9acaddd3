"""Process functions with progress notifications (``KeyedStream.process``), on every environment.

Oracles are plain-Python loops over the same windows: per-window sums, and "quiet words" (a word
not seen for N windows). A notification fires once, after every record of its window; after a
SIGKILL at a crash point and ``--resume`` (also with another parallelism, which moves the pending
requests with their key groups) the alerts equal the loop's, each written once.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from _recovery_data import write_lines
from _recovery_jobs import crash, run_job

from gyreflow.api import ProcessFunction, SizeTumblingWindow

ROOT = Path(__file__).resolve().parents[2]
QUIET_WORDS = ROOT / "examples" / "quiet_words.py"
WINDOW = 20
QUIET = 3


def example():
    """``examples/quiet_words.py`` as a module, sent to Spark executors by value."""
    from pyspark import cloudpickle

    if "quiet_words" not in sys.modules:
        spec = importlib.util.spec_from_file_location("quiet_words", QUIET_WORDS)
        module = importlib.util.module_from_spec(spec)
        sys.modules["quiet_words"] = module
        spec.loader.exec_module(module)
        cloudpickle.register_pickle_by_value(module)
    return sys.modules["quiet_words"]


def make_lines(count: int = 600, seed: int = 7) -> list[str]:
    """Lines of a few words from a skewed vocabulary: common words never go quiet, rare ones do."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(120)]
    weights = [1 / (i + 1) ** 1.3 for i in range(len(vocabulary))]
    return [" ".join(rng.choices(vocabulary, weights, k=rng.randint(1, 5))) for _ in range(count)]


def windows_of(lines: list[str], size: int) -> list[list[str]]:
    return [lines[i:i + size] for i in range(0, len(lines), size)]


def quiet_oracle(lines: list[str], size: int, quiet: int) -> dict[int, list[dict]]:
    """Per window: the words whose last sighting was exactly ``quiet`` windows before its end."""
    last: dict[str, int] = {}
    counts: Counter = Counter()
    alerts: dict[int, list[dict]] = defaultdict(list)
    for window, chunk in enumerate(windows_of(lines, size), start=1):
        for line in chunk:
            for word in line.split():
                last[word] = window
                counts[word] += 1
        for word, seen in last.items():
            if seen + quiet == window:
                alerts[window].append({"word": word, "count": counts[word], "last_seen": seen,
                                       "quiet_at": window})
    return {w: sorted(a, key=lambda r: r["word"]) for w, a in alerts.items()}


class SumPerWindow(ProcessFunction):
    """Each key's sum within each window, emitted by the window's notification."""

    def process(self, record, ctx):
        ctx.set_state(ctx.get_state(0) + record[1])
        ctx.notify_at(ctx.window)

    def on_notify(self, window, ctx):
        ctx.emit((ctx.key, window, ctx.get_state()))
        ctx.clear_state()


@pytest.mark.parametrize("parallelism", [1, 3])
def test_a_window_notification_sees_every_record_of_its_window(make_env, parallelism):
    # One source task: a window is 40 consecutive pairs (each source task cuts its own input)
    rng = random.Random(parallelism)
    pairs = [(rng.choice("abcdefg"), rng.randint(1, 9)) for _ in range(300)]
    pipeline = make_env(parallelism).pipeline("sums")

    @pipeline.task
    def sums(ctx):
        (ctx.source(pairs, SizeTumblingWindow(40)).with_parallelism(1).key_by(lambda r: r[0])
         .process(SumPerWindow()).collect("sums"))

    got = pipeline.execute()["sums"].by_window("sums")
    expected = {}
    for window, chunk in enumerate(windows_of(pairs, 40), start=1):
        totals: Counter = Counter()
        for key, value in chunk:
            totals[key] += value
        expected[window] = sorted((k, window, v) for k, v in totals.items())
    assert {w: sorted(rows) for w, rows in got.items()} == expected


@pytest.mark.parametrize("parallelism", [1, 2])
def test_notifications_for_later_windows_fire_once_at_that_window(make_env, parallelism, tmp_path):
    lines = make_lines()
    pipeline = make_env(parallelism).pipeline("quiet")

    @pipeline.task
    def quiet(ctx):
        (ctx.source(lines, SizeTumblingWindow(WINDOW)).with_parallelism(1)
         .flat_map(str.split).key_by()
         .process(example().QuietWords(QUIET)).collect("alerts"))

    got = pipeline.execute()["quiet"].by_window("alerts")
    expected = quiet_oracle(lines, WINDOW, QUIET)
    assert sum(map(len, expected.values())) > 20  # the input makes words go quiet
    assert {w: sorted(a, key=lambda r: r["word"]) for w, a in got.items() if a} == expected


class AsksForThePast(ProcessFunction):
    def process(self, record, ctx):
        ctx.notify_at(ctx.window - 1)

    def on_notify(self, window, ctx):
        pass


class AsksAgainForItsOwnWindow(ProcessFunction):
    def process(self, record, ctx):
        ctx.notify_at(ctx.window)

    def on_notify(self, window, ctx):
        ctx.notify_at(window)


@pytest.mark.parametrize(("function", "words"), [
    (AsksForThePast(), "notify_at(0) in window 1: a notification is for the current window"),
    (AsksAgainForItsOwnWindow(), "notify_at(1) in window 1: a notification is for a later window"),
])
def test_a_notification_that_cannot_fire_is_refused_naming_the_operator(make_env, function, words):
    pipeline = make_env(1).pipeline("bad")

    @pipeline.task
    def bad(ctx):
        ctx.source(["a", "b"], SizeTumblingWindow(2)).key_by().process(function).with_name(
            "asker").collect()

    with pytest.raises(Exception, match="asker") as caught:
        pipeline.execute()
    assert words in str(caught.value)


def test_process_needs_a_process_function(make_env):
    pipeline = make_env(1).pipeline("bad")

    @pipeline.task
    def bad(ctx):
        ctx.source(["a"], SizeTumblingWindow(1)).key_by().process(object()).collect()

    with pytest.raises(TypeError, match="ProcessFunction"):
        pipeline.execute()


# The example, killed and resumed ----------------------------------------------------------------


def read_alerts(out: Path) -> dict[int, list[dict]]:
    found = {}
    for path in sorted(out.iterdir()):
        assert not path.name.startswith("."), f"a staged file was left: {path.name}"
        window = int(path.stem.split("-")[1])  # window-W.jsonl, or window-W-part-N.jsonl
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        if rows:
            found.setdefault(window, []).extend(rows)
    return {w: sorted(rows, key=lambda r: r["word"]) for w, rows in sorted(found.items())}


@pytest.fixture(scope="module")
def quiet_input(tmp_path_factory):
    lines = make_lines(900, seed=11)
    path = write_lines(tmp_path_factory.mktemp("quiet") / "words.txt", lines)
    return path, quiet_oracle(lines, WINDOW, QUIET)


def test_the_example_uninterrupted_matches_the_loop(quiet_input, tmp_path):
    path, expected = quiet_input
    out = tmp_path / "out"
    done = run_job(QUIET_WORDS, ["--input", str(path), "--window", str(WINDOW), "--quiet",
                                 str(QUIET), "--output", str(out)], {})
    assert done.returncode == 0, done.stderr
    assert read_alerts(out) == expected


@pytest.mark.parametrize(("moment", "parallelism", "resumed_with"), [
    ("mid-window:12", 2, 2),
    ("before-commit:20", 1, 3),  # the pending requests move with their key groups
    ("after-commit:33", 3, 1),
])
def test_killed_then_resumed_every_alert_is_written_once(quiet_input, tmp_path, moment,
                                                          parallelism, resumed_with):
    path, expected = quiet_input
    out = tmp_path / "out"
    env = {"GYREFLOW_STATE__BACKEND": "rocksdb", "GYREFLOW_STATE__PATH": str(tmp_path / "state")}

    def args(tasks: int) -> list[str]:
        return ["--input", str(path), "--window", str(WINDOW), "--quiet", str(QUIET), "--output",
                str(out), "--parallelism", str(tasks)]

    crash(QUIET_WORDS, args(parallelism), env, moment, reference={})
    windows = -(-900 // WINDOW)  # one file per window, alerts or not
    done = run_job(QUIET_WORDS, args(resumed_with), env, ("--resume",))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"window-{w:06d}.jsonl"
                                                      for w in range(1, windows + 1)]
    assert read_alerts(out) == expected
