"""File sinks format a window's batch at once and write exactly the bytes of one ``json.dumps`` (or one
``format`` call) per record: checked against the json module record by record (hypothesis), for the
encoder alone and for a pipeline's files in every environment; a batch holding a record that cannot
be written still names that record."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gyreflow.api import AllWindow, FileSink, SizeTumblingWindow
from gyreflow.api.connectors.file_encoders import LineEncoder, UnwritableRecordError, json_lines
from gyreflow.api.connectors.file_sink import default_json_line

SPECIAL = ["\r", "\n", '"', "\\", "\x00", "\x1f", "\u2028", "\ud800", "é", "\U0001f600"]
TEXT = st.lists(st.one_of(st.sampled_from(SPECIAL), st.characters()), max_size=6).map("".join)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | TEXT,
    lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                   | st.dictionaries(TEXT | st.integers() | st.floats() | st.booleans(), inner,
                                     max_size=3)),
    max_leaves=6)


def dumps_lines(records: list) -> bytes:
    """The oracle: one ``json.dumps`` per record, as the sink wrote before batching."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON, max_size=8))
def test_json_lines_of_a_batch_are_the_text_of_one_dumps_per_record(records):
    assert json_lines(1, records) == "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                             for r in records)


@settings(max_examples=200, deadline=None)
@given(st.lists(JSON, max_size=8))
def test_the_default_json_encoder_writes_the_bytes_of_dumps_or_names_the_record(records):
    encoder = LineEncoder(default_json_line, json_lines)
    try:
        expected = dumps_lines(records)
    except UnicodeEncodeError:  # a lone surrogate: not UTF-8 text, refused naming the record
        with pytest.raises(UnwritableRecordError) as error:
            encoder.add(1, records)
        assert "not UTF-8 text" in error.value.reason
        return
    assert encoder.add(1, records) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(TEXT, st.integers(0, 10**6)), max_size=8), st.integers(1, 10))
def test_a_format_function_batch_is_the_bytes_of_one_call_per_record(records, window):
    def line(w, record):
        return json.dumps({"window": w, "word": record[0], "count": record[1]}, ensure_ascii=False)

    expected = "".join(line(window, r) + "\n" for r in records)
    try:
        data = expected.encode("utf-8")
    except UnicodeEncodeError:
        with pytest.raises(UnwritableRecordError):
            LineEncoder(line).add(window, records)
        return
    assert LineEncoder(line).add(window, records) == data


def test_a_record_json_cannot_encode_is_named_and_a_later_batch_is_still_exact():
    encoder = LineEncoder(default_json_line, json_lines)
    shared = {"x": 1}
    bad = [shared, {"nested": shared, "bad": object()}]
    with pytest.raises(UnwritableRecordError) as error:
        encoder.add(1, bad)
    assert error.value.record is bad[1]
    assert "not JSON serializable" in error.value.reason
    # the same objects again: no leftover circular-reference marks from the failed batch
    good = [shared, {"nested": shared}, [shared, shared]]
    assert encoder.add(2, good) == dumps_lines(good)
    loop: list = []
    loop.append(loop)
    with pytest.raises(UnwritableRecordError) as error:
        encoder.add(3, [1, loop])
    assert error.value.record is loop


@pytest.mark.parametrize("window", [AllWindow(), SizeTumblingWindow(3)], ids=["all", "size-3"])
def test_file_sink_files_hold_the_bytes_of_dumps_per_record(make_env, tmp_path, window):
    records = [{"k": i % 4, "v": [i, str(i) * (i % 3)], "f": i / 7, "s": "é\u2028\n\""}
               for i in range(11)]
    pipeline = make_env().pipeline("json-bytes")
    out = tmp_path / "out"

    @pipeline.task
    def write(ctx):
        ctx.source(records, window).with_parallelism(1).sink(FileSink(out))

    pipeline.execute()
    names = sorted(n for n in os.listdir(out) if not n.startswith("."))
    size = len(records) if isinstance(window, AllWindow) else 3
    batches = [records[i:i + size] for i in range(0, len(records), size)]
    assert names == [f"window-{w:06d}.jsonl" for w in range(1, len(batches) + 1)]
    for name, batch in zip(names, batches, strict=True):
        assert Path(out, name).read_bytes() == dumps_lines(batch)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=4), min_size=1, max_size=20))
def test_records_order_within_a_window_file_is_the_stream_order(words):
    encoder = LineEncoder(default_json_line, json_lines)
    try:
        expected = dumps_lines(words)
    except UnicodeEncodeError:
        return
    assert encoder.add(1, words[:5]) + encoder.add(1, words[5:]) == expected
