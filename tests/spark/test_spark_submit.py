"""Which master a job runs on, and what is refused before any data moves, when ``spark-submit`` starts it.

``spark-submit --master URL script.py`` wins over ``[spark] master`` (local[*] by default): the cluster
checks run for the master Spark really runs with, exactly as for ``gyreflow run`` with that master:

- against a real standalone cluster (``scripts/spark-cluster.sh``, as in test_spark_cluster.py), the
  default memory backend is refused with one ``error:`` line and exit 2, and no output folder is
  written (before the fix the job ran on the cluster, its window files in the executors' folders,
  and exited 0); an output folder only the driver sees is refused by the executors' probe;
- against an address nothing listens at (no cluster needed): the memory backend is refused by rule
  before any connection is tried; a checkpoint directory every node could mount gets the master's
  address tried (one line instead of Spark's minute of retries); a malformed URL is refused first,
  naming the URL and what is wrong with it.

spark-submit runs the program with its standard error joined to its own standard output (Spark's
PythonRunner): the error line is looked for in both.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _spark_master import jvm_options_with_archive
from test_spark_cluster import ON_ONE_CLUSTER

# The cluster tests run on tests/spark/conftest.py's ``cluster``, in test_spark_cluster.py's group.
ROOT = Path(__file__).resolve().parents[2]
WORD_COUNT = ROOT / "examples" / "word_count.py"
# spark-submit's JVM (the driver) and the executors: the suite's options and class-data archive.
JVM_OPTIONS = jvm_options_with_archive()


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens at (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def submit(master: str, tmp_path: Path, out: Path, state: dict[str, str] | None = None,
           wrap: list[str] | None = None) -> tuple[int, str]:
    """``spark-submit --master MASTER examples/word_count.py`` with the default config (its
    ``[spark] master`` is local[*]) plus ``state``; the exit status and everything it printed."""
    words = tmp_path / "words.txt"
    words.write_text("a b c\nb c\nc\n" * 50, encoding="utf-8")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GYREFLOW_", "PYSPARK_", "SPARK_"))}
    env.update(state or {})
    env.update({"SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
                "SPARK_LOCAL_IP": "127.0.0.1"})
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", master,
               "--driver-java-options", JVM_OPTIONS, "--conf", "spark.ui.enabled=false",
               "--conf", f"spark.executor.extraJavaOptions={JVM_OPTIONS}",
               str(WORD_COUNT), "--input", str(words), "--output", str(out), "--window", "40"]
    if wrap:  # the last word of ``wrap`` is a shell command line the submission ends
        command = [*wrap[:-1], f"{wrap[-1]} {shlex.join(command)}"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=400, check=False)
    return done.returncode, done.stdout + done.stderr


def assert_refused(status: int, text: str, *expected: str) -> str:
    """Exit 2, one ``error:`` line holding ``expected``, no traceback; returns the line."""
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert status == 2, text[-4000:]
    assert len(errors) == 1, text[-4000:]
    assert "Traceback" not in text, text[-4000:]
    assert all(part in errors[0] for part in expected), errors[0]
    return errors[0]


@ON_ONE_CLUSTER
def test_submitted_to_a_cluster_memory_state_is_refused_before_any_data_moves(cluster, tmp_path):
    master, _ = cluster
    out = tmp_path / "out"
    status, text = submit(master, tmp_path, out)
    assert_refused(status, text, "error: configuration: state.backend = memory",
                   f"the cluster {master} cannot reach")
    assert not out.exists()
    assert "Connected to Spark cluster" not in text  # refused before Spark started


@ON_ONE_CLUSTER
def test_submitted_to_a_cluster_an_output_only_the_driver_sees_is_refused(cluster, tmp_path):
    """The executors' probe runs under spark-submit too: the driver (spark-submit's JVM and the
    program) runs in a mount namespace of its own with a private tmpfs for its output folder."""
    master, _ = cluster
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    private = tmp_path / "driver-only"
    private.mkdir()
    state = {"GYREFLOW_STATE__BACKEND": "rocksdb",
             "GYREFLOW_STATE__CHECKPOINT_URL": str(tmp_path / "checkpoints")}
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f"mount -t tmpfs gyreflow-private {private} && exec"]
    tried = subprocess.run([*wrap[:-1], f"{wrap[-1]} true"], capture_output=True, text=True,
                           timeout=60, check=False)
    if tried.returncode != 0:
        pytest.skip(f"no private mounts here: {tried.stderr.strip()}")
    status, text = submit(master, tmp_path, private / "out", state, wrap=wrap)
    assert_refused(status, text, "is not reachable from the executor")
    assert not list((tmp_path / "checkpoints").glob("*/meta"))


def test_submitted_memory_state_is_refused_without_trying_the_master(tmp_path):
    """State a cluster cannot reach is refused by rule, whether or not the master answers: no
    connection is tried (Spark would try for a minute)."""
    master = f"spark://127.0.0.1:{closed_port()}"
    out = tmp_path / "out"
    status, text = submit(master, tmp_path, out)
    assert_refused(status, text, "state.backend = memory", master)
    assert "Connecting to master" not in text and not out.exists()


def test_submitted_to_a_master_nobody_answers_at_is_refused_in_one_line(tmp_path):
    """State every node could reach: the master's address is tried before Spark starts (client
    deploy mode: this driver is the one that connects)."""
    port = closed_port()
    out = tmp_path / "out"
    state = {"GYREFLOW_STATE__BACKEND": "rocksdb",
             "GYREFLOW_STATE__CHECKPOINT_URL": str(tmp_path / "checkpoints")}
    status, text = submit(f"spark://127.0.0.1:{port}", tmp_path, out, state)
    assert_refused(status, text, f"nothing accepts connections at 127.0.0.1:{port}")
    assert "Connecting to master" not in text and not out.exists()


@pytest.mark.parametrize(("master", "what"), [
    ("spark://127.0.0.1:notaport", "the port 'notaport' is not a number"),
    ("spark://127.0.0.1:17077x", "the port '17077x' is not a number"),
])
def test_submitted_with_a_malformed_master_url_is_refused_first(tmp_path, master, what):
    status, text = submit(master, tmp_path, tmp_path / "out")
    line = assert_refused(status, text, f"error: configuration: spark.master {master}: {what}")
    assert "state.backend" not in line and not (tmp_path / "out").exists()
