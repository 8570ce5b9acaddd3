"""The Spark master the Spark cases run on: ``local[2]``, or a standalone cluster's URL.

``scripts/cluster-suite.sh`` starts a two-worker standalone cluster and runs the stream, batch, graph
and recovery suites on it by setting ``GYREFLOW_TEST_SPARK_MASTER``. On a cluster, state must be
where every node reaches it, so the cases keep it in a checkpoint directory (every node of the
test cluster mounts /tmp), with local copies on each executor (``state.local_copies = on``), and
skip the backends a cluster refuses (``tests/spark/test_spark_cluster.py`` checks those refusals).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

SPARK_MASTER = os.environ.get("GYREFLOW_TEST_SPARK_MASTER") or "local[2]"
# The options tests/conftest.py gives the suite's driver JVMs (C1 only, the serial collector).
JVM_OPTIONS = os.environ.get("GYREFLOW_TEST_SPARK_DRIVER_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
ON_CLUSTER = not SPARK_MASTER.startswith("local")
CLUSTER_SAFE_BACKENDS = ("rocksdb", "postgresql")  # the kinds of store a cluster accepts


def master(local_slots: int = 2) -> str:
    """``local[local_slots]``, or the cluster's URL when the suite runs on one."""
    return SPARK_MASTER if ON_CLUSTER else f"local[{local_slots}]"


def jvm_options_with_archive() -> str:
    """``JVM_OPTIONS`` and the class-data archive scripts/test.sh made (when it did): for the test
    cluster's master, workers and executors, whose class path is the installed pyspark's as the
    driver's is (the archive saves them about 40% of their start-up CPU too)."""
    archive = os.environ.get("GYREFLOW_TEST_SPARK_CLASS_ARCHIVE")
    if not archive or not os.path.exists(archive):
        return JVM_OPTIONS
    return f"{JVM_OPTIONS} -XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def cluster_state(config: dict, tmp_path: Path) -> dict | None:
    """``config`` made cluster-safe: rocksdb gets a checkpoint directory; None when the cluster
    refuses its state (memory, SQLite)."""
    if not ON_CLUSTER:
        return config
    backend = config.get("state.backend", "memory")
    if backend == "memory" and "state.backend" not in config:
        # The default state of a pipeline case, moved where executors reach it: a location of its
        # own, as memory state is each environment's own.
        return {**config, "state.backend": "rocksdb", "state.local_copies": "on",
                "state.checkpoint_url": str(tmp_path / f"checkpoints-{uuid.uuid4().hex[:12]}")}
    if backend == "rocksdb":
        return {**config, "state.backend": "rocksdb", "state.local_copies": "on",
                "state.checkpoint_url": config.get("state.checkpoint_url")
                or str(tmp_path / "checkpoints")}
    if backend == "jdbc" and str(config.get("state.url", "")).startswith("postgresql"):
        return config
    return None


def cluster_state_env(env: dict[str, str], tmp_path: Path) -> dict[str, str] | None:
    """The same for ``GYREFLOW_STATE__*`` variables of a job run in a process of its own."""
    prefix = "GYREFLOW_STATE__"
    config = {f"state.{k[len(prefix):].lower()}": v for k, v in env.items() if k.startswith(prefix)}
    safe = cluster_state(config, tmp_path)
    if safe is None:
        return None
    return {**env, **{prefix + k.split(".", 1)[1].upper(): str(v) for k, v in safe.items()}}
