"""What executor-local copies of checkpoint objects save: restoring a task's state from an object
store (an S3-compatible server on 127.0.0.1) and from a checkpoint directory, with and without
``state.local_copies``, in one run.

The state is one table of ``--keys`` keys in one key-group range: window 1 writes every key, each
later window changes 5% of them, ten windows in all. Cases, each checked against a plain dict that
took the same changes:

- checkpoint location only: a restore that fetches every object (a machine without copies);
- local copies, nothing new: the machine that wrote or read the objects restores them again;
- local copies, one new window: another machine wrote the latest window, so one object is fetched;
- the floor: ``pickle.loads`` of the whole state from bytes in memory.

The write rows give the cost of one window's snapshot with and without keeping the copy (the copy
is made after the object is stored, from what the location reports). Best of N, interleaved.
``python benchmarks/local_copies.py --keys 20000 --repeat 1`` is a quick run.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import pickle
import random
import secrets
import shutil
import socket
import tempfile

from _common import (
    command_line,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    time_call,
    update_docs_section,
)

from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.shared.snapshot import StateRow, TaskSnapshot, dumps
from gyreflow.state.stores.checkpoint import CheckpointSnapshotStore

TABLE = "counts"
ALL = range(128)
WINDOWS = 10


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ObjectStore:
    """A moto S3 server in this process and a bucket in it."""

    def __init__(self) -> None:
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        port = free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        endpoint = f"http://127.0.0.1:{port}"
        bucket = f"gyreflow-{secrets.token_hex(4)}"
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                     aws_access_key_id="bench", aws_secret_access_key="bench"
                     ).create_bucket(Bucket=bucket)
        self.url = f"s3://{bucket}/checkpoints"
        self.options = {"key": "bench", "secret": "bench",
                        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}

    def stop(self) -> None:
        self.server.stop()


def rows_of(changes: dict) -> tuple[StateRow, ...]:
    return tuple(StateRow(TABLE, key_group_of(k, 128), dumps(k), dumps(v))
                 for k, v in changes.items())


class Location:
    """One checkpoint location holding ``WINDOWS`` windows of a job, and the stores of the cases."""

    def __init__(self, name: str, url: str, secret: str, options: dict, keys: int,
                 scratch: str) -> None:
        self.name, self.url, self.secret, self.options = name, url, secret, options
        self.scratch = scratch
        self.rng = random.Random(20261126)
        self.keys = keys
        self.oracle: dict = {}
        self.job = f"bench-{name}"
        self.version = 0
        writer = self.open(None)
        for _ in range(WINDOWS):
            self.write_window(writer)
        writer.close()
        self.copies = f"{scratch}/copies-{name}"
        warm = self.open(self.copies)
        self.restore(warm)  # the copies are now this machine's
        warm.close()

    def open(self, copies: str | None) -> CheckpointSnapshotStore:
        return CheckpointSnapshotStore(self.url, self.secret, self.options, copies)

    def changes(self) -> dict:
        if self.version == 0:
            return {k: self.rng.randrange(10 ** 6) for k in range(self.keys)}
        return {k: self.rng.randrange(10 ** 6)
                for k in self.rng.sample(range(self.keys), max(1, self.keys // 20))}

    def write_window(self, store) -> None:
        changes = self.changes()
        self.version += 1
        store.write(TaskSnapshot(self.job, self.version, ALL, rows_of(changes)))
        self.oracle.update(changes)

    def restore(self, store) -> dict:
        """What a task does when it restores its key groups."""
        data: dict = {}
        store.read_into(self.job, TABLE, ALL, self.version, data)
        return data

    def check(self, got: dict) -> None:
        if got != self.oracle:
            msg = f"{self.name}: the restored state differs from the plain dict"
            raise AssertionError(msg)

    # Cases ---------------------------------------------------------------------------------

    def restore_case(self, copies: bool, new_window: bool):
        def run():
            if new_window:  # another machine, untimed
                other = self.open(None)
                self.write_window(other)
                other.close()
            store = self.open(self.copies if copies else None)
            try:
                return time_call(lambda: self.restore(store))
            finally:
                store.close()
        return run

    def write_case(self, copies: bool):
        scratch = f"{self.scratch}/write-{self.name}-{copies}"
        counter = itertools.count(1)

        def run():
            store = self.open(scratch if copies else None)
            try:
                changes = self.changes()
                snapshot = TaskSnapshot(f"{self.job}-writes", next(counter), ALL, rows_of(changes))
                return time_call(lambda: store.write(snapshot))
            finally:
                store.close()
        return run


def _same(got: dict, expected: dict) -> None:
    if got != expected:
        msg = "pickle.loads returned another state"
        raise AssertionError(msg)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--write-docs", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="gyreflow-bench-copies-")
    server = ObjectStore()
    try:
        locations = [
            Location("s3", server.url, "bench-secret", server.options, args.keys, scratch),
            Location("dir", f"{scratch}/checkpoints", "", {}, args.keys, scratch),
        ]
        measured: dict[str, list[float]] = {}
        cases, checks = {}, {}
        for location in locations:
            for label, copies, new in (("checkpoint location only", False, False),
                                       ("local copies, nothing new", True, False),
                                       ("local copies, one new window", True, True)):
                name = f"{location.name}: restore, {label}"
                cases[name] = location.restore_case(copies, new)
                checks[name] = (lambda got, loc=location, n=name:
                                (measured.setdefault(n, []).append(got[0]), loc.check(got[1])))
            for label, copies in (("without copies", False), ("with copies", True)):
                name = f"{location.name}: one window's snapshot, {label}"
                cases[name] = location.write_case(copies)
                checks[name] = lambda got, n=name: measured.setdefault(n, []).append(got[0])
        whole = dict(locations[0].oracle)
        state = pickle.dumps(whole, protocol=pickle.HIGHEST_PROTOCOL)
        cases["floor: pickle.loads of the whole state"] = lambda: time_call(
            lambda: pickle.loads(state))
        checks["floor: pickle.loads of the whole state"] = (
            lambda got: (measured.setdefault("floor: pickle.loads of the whole state", [])
                         .append(got[0]), _same(got[1], whole)))
        interleaved_best_of(cases, args.repeat, check=checks)
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for location in ("s3", "dir"):
        base = min(measured[f"{location}: restore, checkpoint location only"])
        for name, runs in measured.items():
            if name.startswith(f"{location}: restore"):
                rows.append([name, format_seconds(min(runs)), f"{base / min(runs):.2f}x"])
        for name, runs in measured.items():
            if name.startswith(f"{location}: one window"):
                rows.append([name, format_seconds(min(runs)), ""])
    floor = measured["floor: pickle.loads of the whole state"]
    rows.append(["floor: pickle.loads of the whole state", format_seconds(min(floor)), ""])
    table = print_table(f"Restoring {args.keys:,} keys ({WINDOWS} windows)",
                        ["case", "seconds", "speed-up over the location only"], rows)
    if args.write_docs:
        content = "\n\n".join([
            "## Local copies of checkpoint objects",
            f"A task's state of {args.keys:,} keys in one key-group range: window 1 writes every "
            f"key, each later window 5% of them ({WINDOWS} windows). Restores are timed from an "
            "S3-compatible server on 127.0.0.1 (moto, in the benchmark's process) and from a "
            "checkpoint directory, every result checked against a plain dict. Best of "
            f"{args.repeat}, interleaved; {machine_line()}.",
            table, f"`{command_line()}`"])
        update_docs_section("local-copies", content)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
