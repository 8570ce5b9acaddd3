"""ParquetSink writes only what reads back the same: values pyarrow would change on the way (text
in a column of bytes, dicts with each other's keys, a set or a tuple as a list, a bool as a float,
an empty dict) are refused with one line naming the sink, the window, the record and the column.

Oracle: pyarrow reading the published file back, compared with what was written by an equality
written out here; a refusal is checked against pyarrow itself (the same columns written and read
back by pyarrow alone do change, or cannot be written).
"""

from __future__ import annotations

import datetime
import decimal
import io
import math
import tempfile
from pathlib import Path

import pytest
from _cli_runs import run_module
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gyreflow.api import AllWindow, Environment, ParquetSink
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

UTC = datetime.UTC
LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.integers(-3, 3),
    st.floats(), st.text(max_size=3), st.binary(max_size=3), st.dates(),
    st.datetimes(datetime.datetime(1970, 1, 1), datetime.datetime(2100, 1, 1)),
    st.datetimes(datetime.datetime(1970, 1, 1), datetime.datetime(2100, 1, 1),
                 timezones=st.just(UTC)),
    st.decimals(-1000, 1000, places=2, allow_nan=False, allow_infinity=False))
VALUE = st.recursive(LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner), st.sets(st.integers(0, 4), max_size=3),
    st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2)), max_leaves=4)


def same(written, read) -> bool:
    """Whether ``read`` is ``written`` read back: equal values of the same kind; an int may come
    back as a float of its value (a column of numbers), NaN as NaN."""
    if written is None or isinstance(written, bool | str | bytes):
        return type(read) is type(written) and read == written
    if isinstance(written, int):
        return type(read) in (int, float) and read == written
    if isinstance(written, float):
        return type(read) is float and (read == written or math.isnan(read) and math.isnan(written))
    if type(written) is list:
        return type(read) is list and len(read) == len(written) and all(
            same(w, r) for w, r in zip(written, read, strict=True))
    if type(written) is dict:
        return type(read) is dict and read.keys() == written.keys() and all(
            same(written[k], read[k]) for k in written)
    if isinstance(written, datetime.datetime):  # a naive one stays naive, an aware one aware
        return (type(read) is datetime.datetime and (read.tzinfo is None) ==
                (written.tzinfo is None) and read == written)
    if isinstance(written, datetime.date | decimal.Decimal):
        return type(read) is type(written) and read == written
    return False  # tuples and sets come back as lists


def expected_rows(records: list) -> list[dict]:
    """Every key of the window is a column; a record without one holds None there."""
    names = list(dict.fromkeys(k for r in records for k in r))
    return [{name: record.get(name) for name in names} for record in records]


def pyarrow_changes(records: list) -> bool:
    """Whether pyarrow alone, column by column, cannot write the records or reads back others."""
    rows = expected_rows(records)
    try:
        table = pa.table({name: pa.array([row[name] for row in rows]) for name in rows[0]})
        buffer = io.BytesIO()
        pq.write_table(table, buffer)
        back = pq.read_table(io.BytesIO(buffer.getvalue())).to_pylist()
    except Exception:  # noqa: BLE001 - pyarrow raises several types
        return True
    return not all(same(row, read) for row, read in zip(rows, back, strict=True))


def write(folder: Path, records: list, env=None):
    """Run a job writing ``records`` as one window; the DataError it stops with, or None."""
    env = env or Environment.local(progress=False, config={"state.path": str(folder / "state")})
    pipeline = env.pipeline("parquet")
    pipeline.task(lambda ctx: ctx.source(records, AllWindow()).sink(ParquetSink(folder / "out")),
                  name="job")
    try:
        pipeline.execute(fresh=True)
    except Exception as exc:  # noqa: BLE001 - the refusal may come as another error's cause
        error: BaseException | None = exc
        while error is not None and not isinstance(error, DataError):
            error = getattr(error, "cause", None) or error.__cause__
        assert error is not None, repr(exc)
        return error
    return None


def read_back(folder: Path) -> list[dict]:
    files = sorted((folder / "out").glob("window-*.parquet"))
    return [row for path in files for row in pq.read_table(path).to_pylist()]


def assert_named_refusal(error: DataError, records: list) -> None:
    message = str(error)
    assert "\n" not in message and "Traceback" not in message, message
    assert "ParquetSink(" in message and "window 1, record " in message, message
    assert "cannot be written as .parquet: column '" in message, message
    named = message.split("window 1, record ", 1)[1]
    assert any(named.startswith(repr(record)[:150]) for record in records), message
    column = message.split("column '", 1)[1].split("'", 1)[0]
    assert any(column in record for record in records), message


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.fixed_dictionaries({"a": VALUE}, optional={"b": VALUE}),
                        min_size=1, max_size=4))
def test_values_of_any_mix_read_back_the_same_or_are_refused_by_name(records):
    with tempfile.TemporaryDirectory(prefix="gyreflow-parquet-") as name:
        folder = Path(name)
        error = write(folder, records)
        event("written" if error is None else "refused")
        if error is None:
            back = read_back(folder)
            assert all(same(row, read) for row, read in
                       zip(expected_rows(records), back, strict=True)), (records, back)
            return
        assert_named_refusal(error, records)
        assert pyarrow_changes(records), (records, str(error))  # refused only when needed


REFUSED = {
    "text and bytes": ([{"v": "text"}, {"v": b"bytes"}], "'text' would read back as b'text'"),
    "other keys": ([{"v": {"x": 1}}, {"v": {"y": 2}}], "would read back as {'x': 1, 'y': None}"),
    "a set": ([{"v": {3, 1}}], "would read back as [1, 3]"),
    "a tuple": ([{"v": (1, 2)}], "(1, 2) would read back as [1, 2]"),
    "an empty dict": ([{"v": {}}], "an empty dict (a struct without fields) cannot be stored"),
    "a nested empty dict": ([{"v": [{"x": {}}]}], "an empty dict"),
    "a bool among floats": ([{"v": 1.5}, {"v": True}], "True would read back as 1.0"),
    "naive and aware": ([{"v": datetime.datetime(2020, 1, 1, tzinfo=UTC)},
                         {"v": datetime.datetime(2020, 1, 1)}], "would read back as"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_would_read_back_otherwise_is_refused_naming_the_record_and_column(
        make_env, tmp_path, case):
    records, reason = REFUSED[case]
    error = write(tmp_path, records, make_env(1))
    assert error is not None, read_back(tmp_path)
    assert_named_refusal(error, records)
    assert "column 'v'" in str(error) and reason in str(error), str(error)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("window-*"))


KEPT = {
    "ints and floats": [{"v": 1}, {"v": 2.5}, {"v": None}],
    "dicts with the same keys in any order": [{"v": {"x": 1, "y": [1]}}, {"v": {"y": [], "x": 2}}],
    "a missing key": [{"a": 1}, {"b": "x"}],
    "NaN and -0.0": [{"v": float("nan"), "w": [float("inf")]}, {"v": -0.0, "w": [-0.0]}],
    "aware datetimes": [{"v": datetime.datetime(2020, 1, 1, tzinfo=UTC)}, {"v": None}],
    "decimals": [{"v": decimal.Decimal("1.10")}, {"v": decimal.Decimal("-3.25")}],
    "bytes": [{"v": b"\x00\xff"}, {"v": b""}],
    "nulls in structs": [{"v": {"x": None}}, {"v": {"x": 3}}],
}


@pytest.mark.parametrize("case", sorted(KEPT))
def test_what_reads_back_the_same_is_still_written(make_env, tmp_path, case):
    records = KEPT[case]
    error = write(tmp_path, records, make_env(1))
    assert error is None, str(error)
    back = read_back(tmp_path)
    assert all(same(row, read) for row, read in zip(expected_rows(records), back, strict=True)), back


def test_a_refused_value_stops_the_command_with_one_line_and_exit_5(tmp_path):
    (tmp_path / "job.py").write_text(
        "from gyreflow.api import AllWindow, Environment, ParquetSink\n"
        "p = Environment.local(progress=False).pipeline('w')\n"
        "rows = [{'id': 1, 'v': {}}, {'id': 2, 'v': {}}]\n"
        f"p.task(lambda ctx: ctx.source(rows, AllWindow()).sink(ParquetSink({str(tmp_path)!r}"
        " + '/out')), name='job')\n"
        "p.execute()\n", encoding="utf-8")
    done = run_module(["run", "--quiet", "job.py"], cwd=tmp_path)
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr and "ArrowNotImplementedError" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "ParquetSink(" in errors[0] and "window 1, record {'id': 1, 'v': {}}" in errors[0]
    assert "column 'v': an empty dict" in errors[0], errors[0]
