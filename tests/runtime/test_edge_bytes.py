"""Bytes per edge: what each edge sends to other processes, per window, in the metrics.

A batch that crosses to another worker process is encoded alone (a list of records as one pickle,
a column batch as one Arrow IPC stream) and its bytes count for its edge. Checked: an in-process
run sends nothing; on two worker processes only the edges that cross report bytes, every window's
figures add up to the run's, they grow with the records that cross, and they reach the Prometheus
endpoint's ``gyreflow_edge_bytes_sent`` and the JSON-lines listener.
"""

from __future__ import annotations

import json
import operator
import random
from collections import Counter

import pytest

from gyreflow.api import Environment, JsonLinesListener, SizeTumblingWindow

pytestmark = pytest.mark.processes  # worker processes

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def run(words: list[str], workers: int, listener=None):
    config = {"environment.type": "local", "environment.parallelism": 2,
              "environment.workers": workers, "progress.enabled": False}
    pipeline = Environment.from_config(None, config).pipeline("edge-bytes")

    @pipeline.task
    def totals(ctx):
        pairs = ctx.source(words, SizeTumblingWindow(2_000)).map(lambda w: (w, 1)).with_name("pair")
        pairs.key_by(operator.itemgetter(0)).reduce(lambda a, b: (a[0], a[1] + b[1])) \
            .with_name("sum").collect("sums")

    return pipeline.execute(listener=listener)["totals"]


def make_words(count: int) -> list[str]:
    rng = random.Random(count)
    return [rng.choice(WORDS) for _ in range(count)]


def test_nothing_crosses_a_process_in_process():
    result = run(make_words(4_000), workers=1)
    assert all(not window.sent for window in result.windows)
    assert result.summary.sent == {}


def test_the_keyed_edge_between_workers_reports_its_bytes_per_window():
    words = make_words(8_000)
    result = run(words, workers=2)
    last = {}
    for word, count in result.output("sums"):
        last[word] = count
    assert last == Counter(words)  # the output is right first
    per_window = [window.sent for window in result.windows]
    assert len(per_window) == 2  # two source tasks, 4,000 words each, windows of 2,000
    assert all(set(sent) == {"pair->sum"} and sent["pair->sum"] > 0 for sent in per_window), \
        per_window  # the forward edge source -> pair stays inside each worker
    assert result.summary.sent == {"pair->sum": sum(s["pair->sum"] for s in per_window)}


def test_bytes_grow_with_the_records_that_cross():
    small = run(make_words(4_000), workers=2).summary.sent["pair->sum"]
    large = run(make_words(16_000), workers=2).summary.sent["pair->sum"]
    assert 3.0 <= large / small <= 5.0, (small, large)


def test_the_listener_and_the_endpoint_see_the_bytes(tmp_path):
    from prometheus_client import generate_latest

    from gyreflow.api.service.listeners import Listeners
    from gyreflow.api.service.monitor import JobMonitor

    path = tmp_path / "events.jsonl"
    monitor = JobMonitor()
    result = run(make_words(4_000), workers=2,
                 listener=Listeners([JsonLinesListener(str(path)), monitor]))
    events = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    sent = [event["bytes_sent"] for event in events if event["event"] == "window"]
    assert sent == [window.sent for window in result.windows]
    exposed = generate_latest(monitor.registry).decode()
    total = float(result.summary.sent["pair->sum"])
    line = (f'gyreflow_edge_bytes_sent_total{{edge="pair->sum",pipeline="edge-bytes",task="totals"}} '
            f'{total}')
    assert line in exposed, exposed
