"""Sources (collections, files, generators) and sinks (FileSink, PrintSink) against oracles."""

from __future__ import annotations

import io
import json
import os
import re
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import (
    AllWindow,
    CollectionSource,
    FileSink,
    FileSource,
    GeneratorSource,
    PrintSink,
    SizeTumblingWindow,
    UserFunctionError,
)
from gyreflow.api.config import ConfigError

# --- helpers -----------------------------------------------------------------------------------


def run(env, build, name: str = "job"):
    pipeline = env.pipeline("io")
    pipeline.task(build, name=name)
    return pipeline.execute()[name]


def chunks(items: list, size: int) -> list[list]:
    out = [items[i:i + size] for i in range(0, len(items), size)]
    return out or [[]]


def lines_of(data: bytes) -> list[str]:
    """Oracle: the lines of a UTF-8 file without their line ending."""
    if not data:
        return []
    parts = data.split(b"\n")
    if data.endswith(b"\n"):
        parts.pop()
    return [p.decode("utf-8").removesuffix("\r") for p in parts]


def read_all(reader, step: int = 2) -> list:
    out = []
    while True:
        batch = reader.read(step)
        if not batch:
            return out
        assert len(batch) <= step
        out.extend(batch)


# --- collections -------------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 2, 3, 5, 8])
def test_collection_source_task_i_reads_every_pth_item(parallelism):
    items = [f"i{n}" for n in range(13)]
    source = CollectionSource(items)
    for task in range(parallelism):
        reader = source.create_reader(task, parallelism)
        expected = [items[n] for n in range(len(items)) if n % parallelism == task]
        assert read_all(reader, 3) == expected
        reader.close()


@pytest.mark.parametrize("parallelism", [1, 3])
def test_plain_iterables_are_collection_sources(make_env, parallelism):
    result = run(make_env(parallelism), lambda ctx: [
        ctx.source(range(10)).collect("range"),
        ctx.source(x for x in "abcde").collect("generator"),
        ctx.source(CollectionSource([1, 2, 3])).collect("explicit"),
        ctx.source({"k": 1, "j": 2}).collect("dict"),
    ])
    assert Counter(result.output("range")) == Counter(range(10))
    assert Counter(result.output("generator")) == Counter("abcde")
    assert Counter(result.output("explicit")) == Counter([1, 2, 3])
    assert Counter(result.output("dict")) == Counter(["k", "j"])


@pytest.mark.parametrize("bad", ["a string", b"bytes", 42, None])
def test_non_iterable_or_text_sources_are_rejected(make_env, bad):
    pipeline = make_env(1).pipeline("bad")
    pipeline.task(lambda ctx: ctx.source(bad).collect(), name="job")
    with pytest.raises(TypeError, match="Source or an iterable"):
        pipeline.execute()


def test_source_window_must_be_a_window(make_env):
    pipeline = make_env(1).pipeline("bad")
    pipeline.task(lambda ctx: ctx.source([1], 3).collect(), name="job")
    with pytest.raises(TypeError, match="window must be"):
        pipeline.execute()


# --- files -------------------------------------------------------------------------------------

FILE_CASES = {
    "trailing_newline": "alpha\nbeta\ngamma\n",
    "no_trailing_newline": "alpha\nbeta\ngamma",
    "empty_lines": "\n\nfirst\n\n\nsecond\n\n",
    "only_newlines": "\n\n\n",
    "single_line": "just one line",
    "single_char": "x",
    "unicode": "café\n日本語のテキスト\n\nemoji 😀🎉\nΩmega\nñ",
    "empty_file": "",
    "crlf": "win\r\ndows\r\nlines\r\n",
    "long_and_short": "a\n" + "b" * 300 + "\nc\n" + "é" * 50 + "\nd",
}


@pytest.mark.spark_subset(  # on Spark every case once and every parallelism twice
    lambda p: p["parallelism"] == sorted(FILE_CASES).index(p["case"]) % 5 + 1)
@pytest.mark.parametrize("case", sorted(FILE_CASES))
@pytest.mark.parametrize("parallelism", [1, 2, 3, 4, 5])
def test_file_source_reads_every_line_exactly_once(make_env, tmp_path, case, parallelism):
    path = tmp_path / "input.txt"
    data = FILE_CASES[case].encode("utf-8")
    path.write_bytes(data)
    env = make_env(parallelism, **{"runtime.batch_size": 2})
    result = run(env, lambda ctx: ctx.source(FileSource(path)).collect("lines"))
    assert Counter(result.output("lines")) == Counter(lines_of(data))
    assert list(result.by_window("lines")) == [1]


def test_file_source_single_task_keeps_order_and_windows(make_env, tmp_path):
    path = tmp_path / "input.txt"
    text = "".join(f"line {i}\n" for i in range(11))
    path.write_text(text, encoding="utf-8")
    result = run(make_env(1, **{"runtime.batch_size": 3}),
                 lambda ctx: ctx.source(FileSource(str(path)), SizeTumblingWindow(4))
                 .collect("lines"))
    expected = text.splitlines()
    assert result.by_window("lines") == {i + 1: c for i, c in enumerate(chunks(expected, 4))}


@given(
    pieces=st.lists(st.sampled_from(["a", "bc", "é", "日本", "😀", "\n", "\n", "\n\n", " "]),
                    max_size=25),
    parallelism=st.integers(1, 6),
    step=st.integers(1, 4),
)
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_file_source_splits_partition_the_lines(tmp_path, pieces, parallelism, step):
    path = tmp_path / "random.txt"
    data = "".join(pieces).encode("utf-8")
    path.write_bytes(data)
    source = FileSource(path)
    got = []
    for task in range(parallelism):
        reader = source.create_reader(task, parallelism)
        got.extend(read_all(reader, step))
        reader.close()
    assert Counter(got) == Counter(lines_of(data))


def test_file_source_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        FileSource(tmp_path / "nope.txt")
    with pytest.raises(ConfigError, match="is not a file"):
        FileSource(tmp_path)


def test_file_sink_on_a_file_is_refused_where_it_is_built(tmp_path):
    (tmp_path / "taken").write_text("x", encoding="utf-8")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        FileSink(tmp_path / "taken")
    with pytest.raises(ConfigError, match="is a file"):
        FileSink(tmp_path / "taken" / "below")


def test_file_source_other_encoding(make_env, tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes("olá\nmañana\n".encode("latin-1"))
    result = run(make_env(1), lambda ctx: ctx.source(FileSource(path, encoding="latin-1"))
                 .collect())
    assert result.output("collect") == ["olá", "mañana"]


# --- generators --------------------------------------------------------------------------------


@pytest.mark.parametrize("parallelism", [1, 3, 4])
def test_generator_source_with_task_index_and_parallelism(make_env, parallelism, call_log,
                                                         environment_type):
    calls = call_log

    def numbers(task_index, count):
        calls.append((task_index, count))
        yield from range(task_index, 30, count)

    result = run(make_env(parallelism, **{"runtime.batch_size": 4}),
                 lambda ctx: ctx.source(GeneratorSource(numbers)).collect())
    assert Counter(result.output("collect")) == Counter(range(30))
    expected = [(i, parallelism) for i in range(parallelism)]
    if environment_type == "local":
        assert sorted(calls.entries()) == expected
    else:  # a Spark task may be built on more than one worker (its control job's, its round's)
        assert sorted(set(calls.entries())) == expected


def test_generator_source_without_arguments_runs_as_one_task(make_env, call_log,
                                                             environment_type):
    calls = call_log

    def letters():
        calls.append(())
        yield from "generator"

    result = run(make_env(4, **{"runtime.batch_size": 2}),
                 lambda ctx: ctx.source(GeneratorSource(letters), SizeTumblingWindow(4)).collect())
    by_window = result.by_window("collect")
    assert {w: Counter(r) for w, r in by_window.items()} == {
        i + 1: Counter(c) for i, c in enumerate(chunks(list("generator"), 4))}
    if environment_type == "local":
        assert calls.entries() == [()]
    else:  # a task restarted in another Spark worker replays the generator from its start
        assert calls.entries() and set(calls.entries()) == {()}


@pytest.mark.parametrize("parallelism", [2, 3])
def test_generator_source_without_arguments_refuses_explicit_parallelism(make_env, parallelism):
    calls = []

    def letters():
        calls.append(())
        yield from "abc"

    pipeline = make_env(1).pipeline("gen")
    pipeline.task(lambda ctx: ctx.source(GeneratorSource(letters), parallelism=parallelism)
                  .collect(), name="job")
    with pytest.raises(Exception, match=r"letters.*parallelism 1") as info:
        pipeline.execute()
    assert "GeneratorSource" in str(info.value)
    assert calls == []


def test_generator_source_with_explicit_parallelism_one(make_env):
    result = run(make_env(3), lambda ctx: ctx.source(GeneratorSource(lambda: iter(range(7))),
                                                     parallelism=1).collect())
    assert Counter(result.output("collect")) == Counter(range(7))


# --- FileSink ----------------------------------------------------------------------------------

@pytest.mark.parametrize("parallelism", [1, 4])
@pytest.mark.parametrize("batch_size", [1, 1024])
def test_file_sink_writes_one_file_per_window(make_env, tmp_path, parallelism, batch_size):
    out = tmp_path / "out"
    data = list(range(23))

    def build(ctx):
        (ctx.source(data, SizeTumblingWindow(5), parallelism=1)
         .map(lambda x: {"n": x, "sq": x * x}).sink(FileSink(out)))

    run(make_env(parallelism, **{"runtime.batch_size": batch_size}), build)
    windows = chunks(data, 5)
    expected_names = [f"window-{w:06d}.jsonl" for w in range(1, len(windows) + 1)]
    assert sorted(os.listdir(out)) == expected_names  # nothing hidden left behind
    for w, chunk in enumerate(windows, start=1):
        text = (out / f"window-{w:06d}.jsonl").read_text(encoding="utf-8")
        assert text.endswith("\n")
        assert Counter(json.dumps(json.loads(line), sort_keys=True)
                       for line in text.splitlines()) == Counter(
            json.dumps({"n": x, "sq": x * x}, sort_keys=True) for x in chunk)


def test_file_sink_custom_format_and_default_json_is_unicode(make_env, tmp_path):
    data = ["café", "日本", "plain"]
    run(make_env(1), lambda ctx: [
        ctx.source(data, SizeTumblingWindow(2))
        .sink(FileSink(tmp_path / "custom", format=lambda w, r: f"{w}|{r}")).with_name("s1"),
        ctx.source(data, SizeTumblingWindow(2)).sink(FileSink(tmp_path / "json")).with_name("s2"),
    ])
    custom = tmp_path / "custom"
    assert sorted(os.listdir(custom)) == ["window-000001.jsonl", "window-000002.jsonl"]
    assert (custom / "window-000001.jsonl").read_text(encoding="utf-8") == "1|café\n1|日本\n"
    assert (custom / "window-000002.jsonl").read_text(encoding="utf-8") == "2|plain\n"
    first = (tmp_path / "json" / "window-000001.jsonl").read_text(encoding="utf-8")
    assert first == '"café"\n"日本"\n'


def test_file_sink_empty_input_gives_one_empty_file(make_env, tmp_path):
    out = tmp_path / "empty"
    run(make_env(2), lambda ctx: ctx.source([], SizeTumblingWindow(3)).sink(FileSink(out)))
    assert os.listdir(out) == ["window-000001.jsonl"]
    assert (out / "window-000001.jsonl").read_text() == ""


def test_file_sink_prefix_and_extension(make_env, tmp_path):
    out = tmp_path / "named"
    run(make_env(1), lambda ctx: ctx.source(range(4), SizeTumblingWindow(3))
        .sink(FileSink(out, prefix="part", extension=".txt", format=lambda w, r: str(r))))
    assert sorted(os.listdir(out)) == ["part-000001.txt", "part-000002.txt"]
    assert (out / "part-000001.txt").read_text() == "0\n1\n2\n"
    assert (out / "part-000002.txt").read_text() == "3\n"


def test_file_sink_with_parallelism_writes_parts(make_env, tmp_path):
    out = tmp_path / "parts"
    data = list(range(14))
    run(make_env(1, **{"runtime.batch_size": 1}),
        lambda ctx: ctx.source(data, SizeTumblingWindow(5)).sink(
            FileSink(out, format=lambda w, r: f"{w}:{r}")).with_parallelism(2))
    windows = chunks(data, 5)
    names = sorted(os.listdir(out))
    assert names == sorted(f"window-{w:06d}-part-{t:04d}.jsonl"
                           for w in range(1, len(windows) + 1) for t in (1, 2))
    for w, chunk in enumerate(windows, start=1):
        lines = []
        for t in (1, 2):
            lines += (out / f"window-{w:06d}-part-{t:04d}.jsonl").read_text().splitlines()
        assert Counter(lines) == Counter(f"{w}:{x}" for x in chunk)


@pytest.mark.parametrize("separate_sink_task", [False, True])
def test_file_sink_after_failure_shows_only_whole_earlier_windows(
        make_env, tmp_path, separate_sink_task):
    out = tmp_path / "fail"

    def explode_on_13(x):
        if x == 13:
            raise ValueError("thirteen")
        return x

    def build(ctx):
        stream = ctx.source(range(30), SizeTumblingWindow(5), parallelism=1)
        mapped = stream.map(explode_on_13).with_name("boom")
        if separate_sink_task:
            mapped = mapped.with_parallelism(2)
        mapped.sink(FileSink(out, format=lambda w, r: str(r)))

    env = make_env(1, **{"runtime.batch_size": 1, "scheduler.max_flying_windows": 1})
    with pytest.raises(UserFunctionError) as info:
        run(env, build)
    assert info.value.window == 3  # 13 is the 4th record of window 3
    # Windows 1 and 2 finished before the failure: each is either published or (exactly-once
    # sinks) still staged for a resumed run. Nothing of the failed window 3 is left, and every
    # file holds a whole window.
    visible, staged = {}, {}
    names = [n for n in os.listdir(out) if n != ".staging"]
    if (out / ".staging").exists():
        names += [f".staging/{n}" for n in os.listdir(out / ".staging") if not n.endswith(".sum")]
    for name in names:
        if match := re.fullmatch(r"window-(\d{6})\.jsonl", name):
            visible[int(match.group(1))] = name
        elif match := re.fullmatch(r"\.staging/window-(\d{6})\.jsonl\.[0-9a-f]+", name):
            staged[int(match.group(1))] = name
        else:
            pytest.fail(f"unexpected file {name!r} in {sorted(os.listdir(out))}")
    assert not set(visible) & set(staged)
    assert set(visible) | set(staged) == {1, 2}
    assert sorted(visible) == list(range(1, len(visible) + 1))  # published in window order
    for window, name in {**visible, **staged}.items():
        lines = (out / name).read_text().split()
        assert Counter(lines) == Counter(str(x) for x in range((window - 1) * 5, window * 5))


# --- PrintSink ---------------------------------------------------------------------------------


def test_print_sink_writes_window_and_repr(make_env, environment_type):
    stream = io.StringIO()

    def build(ctx):
        ctx.source(["a", 1, (2, 3)], SizeTumblingWindow(2)).sink(
            PrintSink(prefix="> ", stream=stream))

    if environment_type != "local":
        # An in-memory stream cannot reach Spark executors or worker processes: refused before
        # any data moves.
        from gyreflow.runtime.errors import PlanNotShippableError

        where = ("cannot be sent to Spark executors" if environment_type == "spark" else
                 "cannot run in a worker process")
        with pytest.raises(PlanNotShippableError, match=where):
            run(make_env(1), build)
        assert stream.getvalue() == ""
        return
    run(make_env(1), build)
    assert stream.getvalue() == "> [1] 'a'\n> [1] 1\n> [2] (2, 3)\n"


def test_all_window_file_sink(make_env, tmp_path):
    out = tmp_path / "all"
    run(make_env(3), lambda ctx: ctx.source(range(10), AllWindow()).sink(
        FileSink(out, format=lambda w, r: str(r))))
    assert os.listdir(out) == ["window-000001.jsonl"]
    assert Counter((out / "window-000001.jsonl").read_text().split()) == Counter(
        str(x) for x in range(10))


# --- live sources ----------------------------------------------------------------------------------


def slow_numbers():
    """30 records over 1.5 s: one every 50 ms, each in the middle of its slot (paced against a
    deadline, so a busy machine's late wake-ups do not add up)."""
    import time

    start = time.monotonic()
    for i in range(30):
        time.sleep(max(0.0, start + 0.025 + 0.05 * i - time.monotonic()))
        yield i


def test_a_live_generator_fills_processing_time_windows_on_time(make_env, environment_type):
    """An empty poll is not the end: 0.5 s windows over a 1.5 s generator give three windows
    (a fourth when a busy machine starts the clock early), with every record once."""
    from gyreflow.api import GeneratorSource, TimeTumblingWindow

    if environment_type == "spark":
        pytest.skip("on Spark a source task built afresh for a round replays its generator to the "
                    "offset, sleeps included: its pacing is measured on the local environment")

    env = make_env(1)
    pipeline = env.pipeline("live")

    @pipeline.task
    def job(ctx):
        ctx.source(GeneratorSource(slow_numbers), TimeTumblingWindow(0.5)).collect("numbers")

    by_window = pipeline.execute()["job"].by_window("numbers")
    assert [n for w in sorted(by_window) for n in by_window[w]] == list(range(30))
    sizes = [len(by_window[w]) for w in sorted(by_window)]
    assert len(sizes) in (3, 4), sizes
    assert sum(1 for n in sizes if 5 <= n <= 15) >= 2 and max(sizes) <= 15, sizes


def test_a_live_generator_delivers_every_record_once_in_any_environment(make_env):
    """Whatever the pacing, a slow generator's records all arrive, once, in order."""
    from gyreflow.api import GeneratorSource, TimeTumblingWindow

    env = make_env(1)
    pipeline = env.pipeline("live-all")

    @pipeline.task
    def job(ctx):
        ctx.source(GeneratorSource(slow_numbers), TimeTumblingWindow(0.3)).collect("numbers")

    by_window = pipeline.execute()["job"].by_window("numbers")
    assert [n for w in sorted(by_window) for n in by_window[w]] == list(range(30))
    assert len(by_window) >= 2
