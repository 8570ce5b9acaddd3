"""JSON lines and CSV read as column batches (api/connectors/column_formats.py,
``DirectorySource(format="jsonl" | "csv", columnar=True)``).

Oracle: ``json.loads`` of each line, written out in the test. Properties: blank and
whitespace-only lines, CR/LF endings, a last line without its ending, text that looks like a date,
quotes, escapes, huge and empty strings, nested values, lines that are no JSON object or no UTF-8,
read in random sizes and resumed from any position: every good line once, as ``json.loads`` reads
it, and every bad line reported with its number. CSV against the csv module itself: quoted cells
with delimiters and line breaks, LF, CRLF and lone CR endings, empty lines, rows of the wrong length
and cells an ``int`` type refuses. A counting job on every environment, JSON lines and CSV, sends
the bad lines to dead letters exactly once.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gyreflow.api import DirectorySource, SizeTumblingWindow
from gyreflow.api.connectors.column_formats import open_any_cursor
from gyreflow.api.connectors.file_formats import CsvOptions, MalformedRecordError
from gyreflow.runtime.dataflow.columns.batch import ColumnBatch
from gyreflow.runtime.errors import DataError

pa = pytest.importorskip("pyarrow")

TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", "2020-01-01", "2020-01-01T10:00:00", "1970-01-01 00:00:00Z", '"quoted"',
                     "back\\slash", "line\nbreak", "cr\r\nlf", "x" * 50_000, "Ärger ☃"]))
RECORD = st.fixed_dictionaries(
    {"n": st.integers(-(2**63), 2**63 - 1), "s": TEXT},
    optional={"f": st.floats(allow_nan=False, allow_infinity=False),
              "nested": st.fixed_dictionaries({"a": st.integers(0, 9)}),
              "items": st.lists(st.integers(-5, 5), max_size=4), "flag": st.booleans()})
LINE = st.one_of(
    RECORD.map(lambda r: ("good", json.dumps(r, ensure_ascii=False).encode())),
    RECORD.map(lambda r: ("good", json.dumps(r, indent=None, separators=(" , ", " : ")).encode())),
    st.sampled_from([b"", b"   ", b"\t"]).map(lambda raw: ("blank", raw)),
    st.sampled_from([b"{not json", b"3", b"[1, 2]", b'"text"', b"\xff\xfe{}"]).map(
        lambda raw: ("bad", raw)),
)


def write_lines(path, lines, endings: list[bytes], last_ending: bool) -> None:
    data = b""
    for index, (_, raw) in enumerate(lines):
        ending = endings[index % len(endings)]
        data += raw + (ending if index < len(lines) - 1 or last_ending else b"")
    path.write_bytes(data)


def without_nulls(value):
    """A record as ``json.loads`` would give it, for comparing: keys whose value is None dropped
    (a column batch has every column in every row)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def read_all(path, sizes: list[int], resume_every: int, fmt: str = "jsonl",
             options: CsvOptions | None = None):
    """Rows and bad (first) line numbers read through a columnar cursor, ``sizes`` at a time,
    reopened from its position every ``resume_every`` reads."""
    options = options or CsvOptions()
    rows, bad, reads = [], [], 0
    cursor = open_any_cursor(str(path), fmt, options, None, None, columnar=True)
    while True:
        out = cursor.read(sizes[reads % len(sizes)])
        reads += 1
        if not out:
            break
        for item in out:
            if isinstance(item, MalformedRecordError):
                bad.append(int(item.where.split()[-1].split("-")[0]))
            else:
                assert type(item) is ColumnBatch
                rows += item.rows()
        if reads % resume_every == 0:
            position = cursor.position
            cursor.close()
            cursor = open_any_cursor(str(path), fmt, options, None, position, columnar=True)
    cursor.close()
    return rows, bad


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(LINE, max_size=40),
       endings=st.lists(st.sampled_from([b"\n", b"\r\n"]), min_size=1, max_size=3),
       last_ending=st.booleans(), sizes=st.lists(st.integers(1, 17), min_size=1, max_size=4),
       resume_every=st.integers(1, 5))
def test_json_lines_as_columns_read_what_json_loads_reads(tmp_path_factory, lines, endings,
                                                          last_ending, sizes, resume_every):
    path = tmp_path_factory.mktemp("jsonl") / "data.jsonl"
    write_lines(path, lines, endings, last_ending)
    rows, bad = read_all(path, sizes, resume_every)
    expected = [json.loads(raw) for kind, raw in lines if kind == "good"]
    assert [without_nulls(r) for r in rows] == [without_nulls(r) for r in expected]
    assert bad == [number for number, (kind, _) in enumerate(lines, 1) if kind == "bad"]


def test_text_that_looks_like_a_date_stays_text(tmp_path):
    path = tmp_path / "dates.jsonl"
    path.write_text('{"d": "2020-01-01", "e": {"t": "2021-02-03T04:05:06"}}\n', encoding="utf-8")
    rows, _ = read_all(path, [10], 100)
    assert rows == [{"d": "2020-01-01", "e": {"t": "2021-02-03T04:05:06"}}]


def test_values_that_do_not_share_a_type_name_the_file_and_lines(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"a": 1}\n{"a": "one"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"mixed\.jsonl, lines 1-2: .*columnar=False"):
        read_all(path, [10], 100)


def test_an_integer_beyond_64_bits_is_refused_with_its_line(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"a": 1.5}\n{"a": 123456789012345678901234567890}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"big\.jsonl, line 2: an integer beyond 64 bits"):
        read_all(path, [10], 100)


def test_columnar_is_refused_for_a_format_it_does_not_read_before_any_data_moves(tmp_path):
    from gyreflow.api import ConfigError

    with pytest.raises(ConfigError, match="columnar=True reads csv, jsonl, parquet, not format"):
        DirectorySource(tmp_path, "*", format="text", columnar=True)
    with pytest.raises(ConfigError, match="reads CSV by column names"):
        DirectorySource(tmp_path, "*", format="csv", header=False, columnar=True)


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_bad_lines_go_to_dead_letters_once_and_the_rest_is_counted(make_env, tmp_path, fmt):
    rng = random.Random(3)
    folder, dead = tmp_path / "in", tmp_path / "dead"
    folder.mkdir()
    words, bad = [], []
    for part in range(3):
        lines = ["word,n"] if fmt == "csv" else []
        for number in range(len(lines) + 1, len(lines) + 401):
            if rng.random() < 0.03:
                lines.append("{broken" if fmt == "jsonl" else "1,2,3")
                bad.append((f"part-{part}.{fmt}", number))
            else:
                word = rng.choice(["a", "b", "c", "dé", "", "x,y" if fmt == "csv" else "x"])
                words.append(word)
                lines.append(json.dumps({"word": word, "n": number}) if fmt == "jsonl" else
                             f'"{word}",{number}' if "," in word else f"{word},{number}")
        (folder / f"part-{part}.{fmt}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    pipeline = make_env(2).pipeline("dead")

    @pipeline.task
    def count(ctx):
        source = DirectorySource(folder, f"*.{fmt}", format=fmt, columnar=True,
                                 dead_letters=dead, types={"n": int} if fmt == "csv" else {})
        ctx.source(source, SizeTumblingWindow(150)).key_by("word").count().collect("counts")

    last = {}
    for key, total in pipeline.execute()["count"].output("counts"):
        last[key] = max(total, last.get(key, 0))
    assert last == Counter(words)
    letters = [json.loads(line) for path in sorted(dead.glob("*.jsonl"))
               for line in path.read_text(encoding="utf-8").splitlines()]
    assert sorted((letter["file"], int(letter["where"].split()[-1])) for letter in letters) == \
        sorted(bad)


# CSV ----------------------------------------------------------------------------------------------

CELL = st.one_of(
    st.sampled_from(["", " ", "a", "12", "-3", "1_000", " 7", "x;y", "1.5", "é", "0"]),
    st.text(alphabet=st.sampled_from(list('ab1;,"\r\n \t')), max_size=6))


def csv_oracle(data: bytes, delimiter: str, types: dict):
    """(rows as dicts, numbers of the first line of each malformed row), by the csv module over
    the text as ``open(newline="")`` reads it: the first non-empty row names the columns, empty
    rows are skipped, a row of another length or with a cell its type refuses is malformed."""
    import csv
    import io

    reader = csv.reader(io.StringIO(data.decode("utf-8"), newline=""), delimiter=delimiter,
                        strict=True)
    header, rows, bad, last = None, [], [], 0
    try:
        for cells in reader:
            first, last = last + 1, reader.line_num
            if not cells:
                continue
            if header is None:
                header = cells
                continue
            if len(cells) != len(header):
                bad.append(first)
                continue
            row = dict(zip(header, cells, strict=True))
            try:
                for column, convert in types.items():
                    if column in row:
                        row[column] = None if row[column] == "" else convert(row[column])
            except ValueError:
                bad.append(first)
                continue
            rows.append(row)
    except csv.Error:
        return None  # text the csv module refuses: the row readers report it; not compared here
    return header, rows, bad


@settings(max_examples=150, deadline=None)
@given(table=st.lists(st.lists(CELL, min_size=1, max_size=4), min_size=1, max_size=25),
       quote=st.booleans(), endings=st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=1,
                                             max_size=3),
       delimiter=st.sampled_from([",", ";", "\t"]), typed=st.booleans(),
       sizes=st.lists(st.integers(1, 9), min_size=1, max_size=3), resume_every=st.integers(1, 4),
       blank=st.integers(0, 30))
def test_csv_as_columns_reads_what_the_csv_module_reads(tmp_path_factory, table, quote, endings,
                                                        delimiter, typed, sizes, resume_every,
                                                        blank):
    import csv
    import io

    width = len(table[0])
    header = [f"c{i}" for i in range(width)]
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n",
                        quoting=csv.QUOTE_MINIMAL if quote else csv.QUOTE_NONE,
                        escapechar=None if quote else "\\")
    try:
        writer.writerow(header)
        for row in table:
            writer.writerow(row)
    except csv.Error:
        return  # a cell that needs quotes, written without them
    lines = buffer.getvalue().split("\n")[:-1]
    lines.insert(min(blank, len(lines)), "")  # an empty line somewhere
    text = "".join(line + endings[i % len(endings)] for i, line in enumerate(lines))
    types = {"c0": int} if typed else {}
    expected = csv_oracle(text.encode(), delimiter, types)
    if expected is None:
        return
    path = tmp_path_factory.mktemp("csv") / "data.csv"
    path.write_bytes(text.encode())
    rows, bad = read_all(path, sizes, resume_every, "csv",
                         CsvOptions(delimiter=delimiter, types=types))
    _, want_rows, want_bad = expected
    assert rows == want_rows
    assert bad == want_bad
