"""Fast paths of the main jobs, each against a plain-Python oracle: ``flat_map(str.split)`` splits a
batch's lines in one call (same words, same error naming a record that is not a str); a keyed
``count`` of several tasks in this process counts in the sending task (``Counter`` oracle per
window, whatever the parallelism); the event-time example writes a result's line directly (the text
``json.dumps`` gives)."""

from __future__ import annotations

import importlib.util
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import Environment, SizeTumblingWindow
from gyreflow.runtime.dataflow.time.event_time import WindowResult
from gyreflow.runtime.errors import UserFunctionError

ROOT = Path(__file__).resolve().parents[2]
LINES = st.lists(st.text(st.sampled_from("ab é\t\n\r\x0b\x1c\x85\u2028\u3000日"), max_size=12),
                 max_size=30)


def run(build, parallelism: int = 1):
    env = Environment.local(parallelism, progress=False)
    pipeline = env.pipeline("fast")

    @pipeline.task(name="t")
    def task(ctx):
        build(ctx)

    return pipeline.execute()


@given(lines=LINES, size=st.integers(1, 7))
@settings(max_examples=60, deadline=None)
def test_flat_map_str_split_gives_the_words_of_each_line(lines, size):
    result = run(lambda ctx: ctx.source(lines, SizeTumblingWindow(size))
                 .flat_map(str.split).collect("words"))
    windows = [lines[i:i + size] for i in range(0, len(lines), size)]
    expected = {n: [w for line in chunk for w in line.split()]
                for n, chunk in enumerate(windows, 1) if any(line.split() for line in chunk)}
    got = {n: words for n, words in result.by_window("words").items() if words}
    assert got == expected


def test_flat_map_str_split_names_a_record_that_is_not_text():
    with pytest.raises(UserFunctionError) as failure:
        run(lambda ctx: ctx.source(["a b", "c", 7, "d"]).flat_map(str.split).collect("out"))
    message = str(failure.value)
    assert "while processing record 7: TypeError: descriptor 'split' for 'str' objects doesn't " \
           "apply to a 'int' object" in message, message


@given(words=st.lists(st.sampled_from(["a", "b", "c", "dd", "é", "日本", "x y"]), max_size=60),
       size=st.integers(1, 9), parallelism=st.integers(2, 3))
@settings(max_examples=40, deadline=None)
def test_a_count_of_several_tasks_in_this_process_equals_a_counter(words, size, parallelism):
    def build(ctx):
        (ctx.source(words, SizeTumblingWindow(size)).with_parallelism(1)
         .map(str.upper).key_by().count().with_parallelism(parallelism).collect("counts"))

    result = run(build)
    totals: Counter = Counter()
    expected = {}
    for number, start in enumerate(range(0, len(words), size), 1):
        chunk = [w.upper() for w in words[start:start + size]]
        totals.update(chunk)
        expected[number] = sorted((w, totals[w]) for w in set(chunk))
    got = {n: sorted(rows) for n, rows in result.by_window("counts").items() if rows}
    assert got == expected


def test_only_keyed_counts_of_several_tasks_count_in_the_sending_task():
    from gyreflow.runtime.dataflow.combine import COUNT
    from gyreflow.runtime.local.host import counts_split_by_key

    def graph(parallelism: int):
        env = Environment.local(progress=False)
        pipeline = env.pipeline("plan")

        @pipeline.task(name="t")
        def task(ctx):
            words = ctx.source(["a"]).map(str.upper)
            words.key_by().count().with_parallelism(parallelism).collect("counts")
            words.key_by().reduce(lambda a, b: a + b).with_parallelism(parallelism).collect("r")

        [(_, _, execution)] = pipeline.plans()
        return execution

    assert list(counts_split_by_key(graph(2)).values()) == [COUNT]
    assert counts_split_by_key(graph(1)) == {}


def _event_time_example():
    spec = importlib.util.spec_from_file_location("event_time_example",
                                                  ROOT / "examples" / "event_time.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = _event_time_example()
NUMBERS = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans())


@given(key=st.one_of(st.text(), st.integers()), start=NUMBERS, end=NUMBERS,
       value=st.one_of(NUMBERS, st.none()))
@settings(max_examples=300, deadline=None)
def test_the_event_time_examples_line_is_the_json_of_the_result(key, start, end, value):
    def number(x):  # the example's rule: an integral value of seconds as an int
        return int(x) if math.isfinite(float(x)) and float(x).is_integer() else x

    expected = json.dumps({"key": key, "start": number(start), "end": number(end), "value": value})
    assert EXAMPLE.format_result(1, WindowResult(key, start, end, value)) == expected


def test_a_file_writer_keeps_its_staging_folder_until_it_closes(tmp_path):
    from gyreflow.api import FileSink

    sink = FileSink(str(tmp_path / "out"))
    writer = sink.create_writer(0, 1)
    staging = tmp_path / "out" / ".staging"
    folders = set()
    for window in range(1, 4):
        writer.write(window, [f"record {window}"])
        writer.finish_window(window)
        folders.add(staging.stat().st_ino)
        writer.publish(window)
        assert staging.is_dir() and not list(staging.iterdir())  # kept, empty: made once
    assert len(folders) == 1
    writer.close()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"window-{w:06d}.jsonl" for w in range(1, 4)]
    assert [(tmp_path / "out" / f"window-{w:06d}.jsonl").read_text() for w in range(1, 4)] == [
        json.dumps(f"record {w}") + "\n" for w in range(1, 4)]


KEYS = st.lists(st.sampled_from(["a", "b", "c", ("t", 1), 7]), unique=True, max_size=4)


@given(chunks=st.lists(st.tuples(KEYS, st.integers(0, 4)), min_size=2, max_size=4))
@settings(max_examples=300, deadline=None)
def test_a_chunk_covers_the_earlier_ones_when_it_holds_each_of_their_keys(chunks):
    from gyreflow.state.shared.snapshot import covers, make_chunk

    made = [make_chunk("t", 0, {k: 1 for k in keys[:cut]}, keys[cut:]) for keys, cut in chunks]
    *earlier, last = made
    *earlier_keys, last_keys = [set(keys) for keys, _ in chunks]
    expected = all(last_keys >= keys for keys in earlier_keys)
    assert covers(last, earlier) == expected


class _CountingReader:
    """Numbers below ``stop``; ``calls`` gets the size of every read asked of it and whether
    the numbers had run out by then."""

    def __init__(self, stop: int, calls: list) -> None:
        self.stop, self.next, self.calls = stop, 0, calls

    def read(self, max_records: int) -> list:
        self.calls.append((max_records, self.next >= self.stop))  # asked, and at the end
        numbers = list(range(self.next, min(self.stop, self.next + max_records)))
        self.next += len(numbers)
        return numbers

    def offset(self) -> int:
        return self.next

    def seek(self, offset) -> None:
        self.next = int(offset)

    def close(self) -> None:
        pass


@given(stop=st.integers(0, 40), size=st.integers(1, 9), batch=st.integers(1, 6))
@settings(max_examples=60, deadline=None)
def test_a_full_window_reads_the_next_windows_first_batch_ahead(stop, size, batch):
    from gyreflow.api.connectors.sources import Source

    calls: list = []

    class Numbers(Source):
        def create_reader(self, task_index: int, parallelism: int):
            return _CountingReader(stop, calls)

        def describe(self) -> str:
            return "Numbers"

    env = Environment.local(progress=False, config={"runtime.batch_size": batch})
    pipeline = env.pipeline("ahead")

    @pipeline.task(name="t")
    def task(ctx):
        ctx.source(Numbers(), SizeTumblingWindow(size), parallelism=1).collect("numbers")

    got = pipeline.execute()["t"].by_window("numbers")
    numbers = list(range(stop))
    expected = {n: numbers[i:i + size] for n, i in enumerate(range(0, stop, size), 1)}
    assert {n: rows for n, rows in got.items() if rows} == expected
    # A window asks for batches of ``batch`` and for what is left of its size; the look-ahead at
    # its end asks for the next window's first batch, not for one record.
    one_is_asked = min(batch, size) == 1 or (size > batch and size % batch == 1)
    assert one_is_asked or (1, False) not in calls, calls
