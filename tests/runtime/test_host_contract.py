"""The host protocol's contract (runtime/host.py), passed by the in-process, the worker and the Spark
host alike (the worker host runs with 2 worker processes: forked on this machine with the local
environment, the tasks of a Spark barrier stage with the spark environment's workers mode).

These tests drive a host the way the job driver does, with the scheduler's events written out by
hand, and check what the host reports back: every acknowledgement comes from a task that did the
work (a task that cannot be created reports a failure, not an acknowledgement), a window's snapshot
is acknowledged by every task exactly when the launch asked for it, a rollback restores state and
source offsets, the writer reports commits durable, and publishing makes a sink's staged output
visible. Oracles are plain-Python counts over the input.
"""

from __future__ import annotations

import json
import queue
from collections import Counter

import pytest

from gyreflow.api import FileSink, SizeTumblingWindow
from gyreflow.api.connectors.sources import Source
from gyreflow.runtime.host import HostLink
from gyreflow.runtime.local.host import LocalHost
from gyreflow.scheduler.events import (
    CleanCycle,
    CreateTask,
    Done,
    EventKind,
    InitCycle,
    LaunchSource,
    Rollback,
    TaskFailed,
)
from gyreflow.state.shared.snapshot import JobMeta

WORDS = [f"w{i % 7}" for i in range(40)]
WINDOW = 10  # records per window: 4 windows


@pytest.fixture(params=["host", "workers"])
def make_env(request, make_env, environment_type):
    """The environment's own host, and the worker host with two worker processes (local: forked;
    spark: workers mode)."""
    if request.param == "host":
        return make_env
    if environment_type == "workers":
        pytest.skip("the workers environment's own host is the worker host")
    workers = {"environment.workers": 2} if environment_type == "local" else {
        "spark.mode": "workers", "spark.workers": 2}
    return lambda parallelism=1, **config: make_env(parallelism, **{**workers, **config})


def host_for(env):
    """The host an environment runs its tasks on."""
    if env.type_name == "spark" and env.config["spark.mode"] == "workers":
        from gyreflow.runtime.spark.barrier import SparkLauncher
        from gyreflow.runtime.workers.host import WorkerHost

        launcher = SparkLauncher(env.session, env.config["spark.master"])
        return WorkerHost(env.config, env.state_backend, env.config["spark.workers"], launcher)
    if env.type_name == "spark":
        from gyreflow.runtime.spark.host import SparkHost

        return SparkHost(env.config, env.state_backend, env.session)
    if env.config["environment.workers"] > 1:
        from gyreflow.runtime.workers.host import WorkerHost

        return WorkerHost(env.config, env.state_backend)
    return LocalHost(env.config, env.state_backend)


def word_count(words, out: str | None = None):
    """A keyed count of ``words`` in windows of WINDOW records, collected (and sunk to ``out``)."""

    def build(ctx):
        counts = ctx.source(words, SizeTumblingWindow(WINDOW)).key_by().count()
        counts.collect("counts")
        if out is not None:
            counts.sink(FileSink(out))

    return build


def plan_of(env, build):
    pipeline = env.pipeline("contract")
    pipeline.task(build, name="job")
    ((name, _, graph),) = pipeline.plans()
    return pipeline, f"{pipeline.name}/{name}", graph


class Probe:
    """Drives one host like the driver: sends events, steps until idle, gathers the reports."""

    def __init__(self, env, build, resume_from: int = 0) -> None:
        self.pipeline, self.name, self.graph = plan_of(env, build)
        self.host = host_for(env)
        self.reports: queue.SimpleQueue = queue.SimpleQueue()
        self.writer_errors: list = []
        link = HostLink(self.reports.put, lambda: None, self.writer_errors.append)
        store = self.host.backend.open_store()
        self.host.open(self.name, self.graph, store, link, resume_from, frozenset(), 0)
        self.cycle = self.graph.cycles()[0]
        self.tasks = tuple(t.id for t in self.cycle.tasks)

    def run(self, events) -> list:
        """Deliver ``events``, step the host until it is idle, and return what it reported."""
        self.host.send(tuple(events))
        while self.host.step() or self.host.has_work():
            pass
        out = []
        while True:
            try:
                out.append(self.reports.get(timeout=0.2 if not out else 0.05))
            except queue.Empty:
                return out

    def each(self, make) -> list:
        return [make(self.cycle.id, task) for task in self.tasks]

    def close(self, failed: bool = False) -> None:
        self.host.close(failed)


def acks(reports, kind: EventKind) -> Counter:
    return Counter(r.task for r in reports if isinstance(r, Done) and r.phase is kind)


def test_lifecycle_events_are_acknowledged_by_every_task_once(make_env):
    probe = Probe(make_env(2), word_count(WORDS))
    try:
        reports = probe.run(probe.each(CreateTask) + probe.each(lambda c, t: InitCycle(c, t, 0)))
        assert acks(reports, EventKind.INIT_CYCLE) == Counter(probe.tasks)
        assert not [r for r in reports if isinstance(r, TaskFailed)]
    finally:
        probe.close()


def test_a_task_that_cannot_be_created_reports_a_failure_not_an_acknowledgement(make_env):
    class Unreadable(Source):  # local: pickled by value for Spark executors
        def create_reader(self, task_index, parallelism):
            raise OSError("the input is not there")

    probe = Probe(make_env(1), lambda ctx: ctx.source(Unreadable()).collect("out"))
    try:
        reports = probe.run(probe.each(CreateTask) + probe.each(lambda c, t: InitCycle(c, t, 0)))
        failures = [r for r in reports if isinstance(r, TaskFailed)]
        assert failures, reports
        assert "the input is not there" in str(failures[0].error)
        source_task = probe.cycle.heads[0]
        assert source_task not in acks(reports, EventKind.INIT_CYCLE)
    finally:
        probe.close(failed=True)


def collected(reports, window: int) -> list:
    return [record for r in reports if isinstance(r, Done) and r.window == window
            and r.phase is EventKind.EXECUTE_COMPUTE
            for name, records in r.collected if name == "counts" for record in records]


def updated_totals(words: list, window: int) -> list:
    """Oracle: the keys a window updated, each with its count over every window so far."""
    totals = Counter(words[:window * WINDOW])
    return sorted((word, totals[word]) for word in set(words[(window - 1) * WINDOW:window * WINDOW]))


def test_a_window_is_acknowledged_by_every_task_exactly_when_its_launch_asks(make_env):
    probe = Probe(make_env(1), word_count(WORDS))
    try:
        probe.run(probe.each(CreateTask) + probe.each(lambda c, t: InitCycle(c, t, 0)))
        heads = probe.cycle.heads
        reports = probe.run([LaunchSource(probe.cycle.id, h, 1, True) for h in heads]
                            + [LaunchSource(probe.cycle.id, h, 2, False) for h in heads])
        computed = Counter((r.task, r.window) for r in reports
                           if isinstance(r, Done) and r.phase is EventKind.EXECUTE_COMPUTE)
        assert computed == Counter((t, w) for t in probe.tasks for w in (1, 2))
        checkpoints = sorted((r.task, r.window) for r in reports
                             if isinstance(r, Done) and r.phase is EventKind.CHECKPOINT)
        assert checkpoints == sorted((t, 1) for t in probe.tasks)
        for window in (1, 2):
            assert sorted(collected(reports, window)) == updated_totals(WORDS, window)
    finally:
        probe.close()


def test_rollback_restores_state_and_source_offsets(make_env):
    env = make_env(1, **{"state.backend": "jdbc", "state.retained_snapshots": 10})
    pipeline, _, _ = plan_of(env, word_count(WORDS))
    pipeline.execute()  # four committed windows, every one retained

    probe = Probe(env, word_count(WORDS), resume_from=2)
    try:
        reports = probe.run(probe.each(CreateTask) + probe.each(lambda c, t: Rollback(c, t, 2)))
        assert acks(reports, EventKind.ROLLBACK) == Counter(probe.tasks)
        reports = probe.run(probe.each(lambda c, t: InitCycle(c, t, 2)))
        assert acks(reports, EventKind.INIT_CYCLE) == Counter(probe.tasks)
        reports = probe.run([LaunchSource(probe.cycle.id, h, 3, False) for h in probe.cycle.heads])
        # Window 3 reads on from the restored offset and counts on from the restored totals.
        assert sorted(collected(reports, 3)) == updated_totals(WORDS, 3)
    finally:
        probe.close()


def test_commits_are_reported_durable_and_publishing_shows_a_window(make_env, tmp_path):
    out = tmp_path / "out"
    probe = Probe(make_env(1), word_count(WORDS, str(out)))
    try:
        probe.run(probe.each(CreateTask) + probe.each(lambda c, t: InitCycle(c, t, 0)))
        probe.run([LaunchSource(probe.cycle.id, h, 1, True) for h in probe.cycle.heads])
        assert not list(out.glob("*.jsonl"))  # staged, not visible
        durable: queue.SimpleQueue = queue.SimpleQueue()
        meta = JobMeta(probe.name, "fingerprint", 1, (1,))
        probe.host.writer.commit(meta, lambda: durable.put("commit"))
        probe.host.writer.write(None, lambda: durable.put("flush"))
        assert [durable.get(timeout=10), durable.get(timeout=10)] == ["commit", "flush"]
        for publish in probe.host.publishers():
            publish(1)
        published = sorted(out.glob("*.jsonl"))
        assert [p.name for p in published] == ["window-000001.jsonl"]
        lines = [tuple(json.loads(line)) for line in published[0].read_text().splitlines()]
        assert sorted(lines) == updated_totals(WORDS, 1)
        reports = probe.run(probe.each(lambda c, t: CleanCycle(c, t, 1)))
        assert acks(reports, EventKind.CLEAN_CYCLE) == Counter(probe.tasks)
    finally:
        probe.close()
