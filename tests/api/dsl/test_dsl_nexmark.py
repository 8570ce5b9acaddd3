"""Nexmark's q0 (pass-through), q1 (currency conversion) and q2 (a filter) in nexmark-flink's SQL,
over the bids of ``benchmarks/nexmark.py``, against plain-Python loops."""

from __future__ import annotations

import datetime as dt
import sys
from collections import Counter
from pathlib import Path

import pytest

from gyreflow.api import Environment

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from nexmark import make_bids  # the benchmarks' generator (benchmarks/ is no package)

EPOCH = dt.datetime(1970, 1, 1)
BIDS = make_bids(600, 2.0, seed=7)  # (seconds, auction, price), up to 2 s out of order


def at(seconds: float) -> dt.datetime:
    return EPOCH + dt.timedelta(milliseconds=round(seconds * 1000))


@pytest.mark.parametrize(("query", "loop"), [
    ("SELECT auction, price, datetime FROM bid", lambda: [(a, p, at(t)) for t, a, p in BIDS]),
    ("SELECT auction, 0.908 * price AS price, datetime FROM bid",
     lambda: [(a, 0.908 * p, at(t)) for t, a, p in BIDS]),
    ("SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
     lambda: [(a, p) for _, a, p in BIDS if a % 123 == 0]),
], ids=["q0", "q1", "q2"])
def test_nexmark_q0_q1_q2_against_loops(tmp_path, query, loop):
    lines = "".join(f"{a},{p},{round(t * 1000)}\n" for t, a, p in BIDS)
    (tmp_path / "bids.txt").write_text(lines, encoding="utf-8")
    script = ("SET gyreflow.dsl.time.zone = 'UTC';\n"
              "CREATE TABLE bid (auction bigint, price bigint, datetime timestamp) WITH (type='file', "
              f"geaflow.dsl.file.path='{tmp_path / 'bids.txt'}', geaflow.dsl.window.size = 100);\n"
              f"{query};\n")
    got = Environment.local(2, progress=False).sql(script).output("rows-3")
    want = loop()
    assert want and Counter(got) == Counter(want)
