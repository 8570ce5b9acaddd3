"""State backends: small picklable configurations that open stores where they are used.

A backend is chosen in config (``[state] backend``), never in code. Working keyed state always lives in
the task's memory (``KeyedStateStore``); the backend is where its per-window snapshots go.
"""

from __future__ import annotations

import os

import attrs

from gyreflow.state.keys.keyed import KeyedStateStore
from gyreflow.state.records import frozen
from gyreflow.state.shared.snapshot import SnapshotStore

BACKENDS = ("memory", "rocksdb", "jdbc")


@frozen
class StateBackend:
    """Base of every backend: a light, picklable configuration object and a factory.

    Live stores (dicts, rocksdict databases, SQLAlchemy engines) are opened by ``open_store`` in the
    process that uses them and are never pickled or shipped.
    """

    max_parallelism: int = 128
    snapshot_every: int = 1
    retained_snapshots: int = 2
    # Authenticates stored state (``state.sealing``); empty: a key file beside file-based state.
    secret: str = attrs.field(default="", repr=False, kw_only=True)

    name = "abstract"
    # Whether a commit outlives the machine (a crash of the OS or a power cut), so that output staged
    # for a window must be on disk before the window's commit (fsync): not with the memory backend,
    # whose commits end with the process, where staged files need only outlive a killed process.
    durable = True

    def create_keyed_store(self, key_groups: range | None = None) -> KeyedStateStore:
        """Open the working keyed state of one task owning ``key_groups``."""
        store = KeyedStateStore(self.max_parallelism, key_groups)
        store.durable = self.durable
        return store

    def open_store(self) -> SnapshotStore:
        """Open the snapshot store (a live object: close it where it was opened)."""
        raise NotImplementedError

    def describe(self) -> str:
        """Backend and location, for messages and ``gyreflow snapshots``."""
        return self.name


@frozen
class MemoryStateBackend(StateBackend):
    """Snapshots in process memory, serialised like the others: survives in-process restarts only.

    Each environment gets its own namespace, so two environments in one process never share state.
    """

    namespace: str = attrs.field(factory=lambda: os.urandom(16).hex())  # 128 random bits, no uuid
    name = "memory"
    durable = False

    def open_store(self) -> SnapshotStore:
        from gyreflow.state.stores.memory import memory_store

        return memory_store(self.namespace)

    def describe(self) -> str:
        return "memory (process memory)"


@frozen
class RocksDBStateBackend(StateBackend):
    """Snapshots in rocksdict databases under ``path`` on local disk or, with ``checkpoint_url``,
    in a shared checkpoint location every node reaches (``state.checkpoint_store``)."""

    path: str = ".gyreflow/state"
    checkpoint_url: str = ""
    # fsspec options of the checkpoint location, dotted keys (``client_kwargs.endpoint_url``)
    storage_options: tuple[tuple[str, str], ...] = ()
    # executor-local RocksDB copies of checkpoint objects (``state.local_copies``)
    local_copies: str = "auto"  # auto: with an object-store checkpoint location; on; off
    local_path: str = ""  # empty: the Spark local directories of the process opening the store
    name = "rocksdb"

    def open_store(self) -> SnapshotStore:
        if self.checkpoint_url:
            from gyreflow.state.stores.checkpoint import CheckpointSnapshotStore
            from gyreflow.state.stores.checkpoint_location import is_local_url
            from gyreflow.state.stores.local_copies import default_root

            wanted = self.local_copies == "on" or (
                self.local_copies == "auto" and not is_local_url(self.checkpoint_url))
            copies_root = (self.local_path or default_root()) if wanted else None
            return CheckpointSnapshotStore(self.checkpoint_url, self.secret,
                                           _nested(self.storage_options), copies_root)
        from gyreflow.state.stores.rocksdb import RocksDBSnapshotStore

        return RocksDBSnapshotStore(self.path, secret=self.secret)

    def describe(self) -> str:
        if self.checkpoint_url:
            return f"rocksdb with checkpoints at {self.checkpoint_url}"
        return f"rocksdb at {os.path.abspath(self.path)}"


def _nested(pairs: tuple[tuple[str, str], ...]) -> dict:
    """``(("client_kwargs.endpoint_url", u),)`` as ``{"client_kwargs": {"endpoint_url": u}}``."""
    out: dict = {}
    for dotted, value in pairs:
        *parents, last = dotted.split(".")
        node = out
        for parent in parents:
            node = node.setdefault(parent, {})
        node[last] = value
    return out


@frozen
class JdbcStateBackend(StateBackend):
    """Snapshots in a SQL database through SQLAlchemy: an SQLite file or PostgreSQL."""

    url: str = ""
    name = "jdbc"

    def open_store(self) -> SnapshotStore:
        from gyreflow.state.stores.jdbc import JdbcSnapshotStore

        return JdbcSnapshotStore(self.url, secret=self.secret)

    def describe(self) -> str:
        from sqlalchemy.engine import make_url

        return f"jdbc at {make_url(self.url).render_as_string(hide_password=True)}"


def backend_from_config(config) -> StateBackend:
    """Build the backend named by ``state.backend`` in ``config``."""
    name = config["state.backend"]
    common = {
        "max_parallelism": config["state.max_parallelism"],
        "snapshot_every": config["state.snapshot_every"],
        "retained_snapshots": config["state.retained_snapshots"],
        "secret": config["state.secret"],
    }
    if name == "memory":
        return MemoryStateBackend(**common)
    if name == "rocksdb":
        return RocksDBStateBackend(**common, path=config["state.path"],
                                   checkpoint_url=config["state.checkpoint_url"],
                                   storage_options=config["state.checkpoint_options"],
                                   local_copies=config["state.local_copies"],
                                   local_path=config["state.local_path"])
    if name == "jdbc":
        from gyreflow.state.stores.jdbc import default_sqlite_url

        url = config["state.url"] or default_sqlite_url(config["state.path"])
        return JdbcStateBackend(**common, url=url)
    msg = f"unknown state.backend {name!r}; valid choices: {', '.join(BACKENDS)}"
    raise ValueError(msg)
