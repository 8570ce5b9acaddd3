"""gyreflow on a real Spark standalone cluster: a master and two workers on 127.0.0.1, started by
``scripts/spark-cluster.sh`` from the installed pyspark, each worker with its own work, local,
temporary and working directories (none of them the driver's).

Every job is a ``gyreflow run`` in a process of its own (its own Spark application on the cluster):

- a graph (PageRank) with the state in an object store on 127.0.0.1, checked against a plain
  PageRank loop (streams are checked against a Counter oracle by the fault tests below);
- what cannot work on a cluster (memory state, rocksdb without a checkpoint location, SQLite, a
  relative checkpoint path) is refused with one line and exit 2 before any data moves; an output
  directory that only the driver sees (a private mount of the driver's) is refused by the probe;
- the driver SIGKILLed mid-run, then ``--resume``: the output is the oracle's;
- an executor SIGKILLed mid-run (the word count, state in a shared checkpoint directory): Spark
  runs its tasks again elsewhere, and the output is still the oracle's (or the job stops with one
  error line and ``--resume`` finishes it exactly); the executors ran in the workers' own folders
  and kept local RocksDB copies of their snapshot objects in their own Spark local directories;
- the same in workers mode: the driver starts the barrier stage again by itself (exit 0) and the
  output is a Counter's.

Stream jobs run in rounds mode here (``Job`` pins it) unless a test says workers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _object_store import S3_SECRET, ObjectStoreServer
from _spark_master import jvm_options_with_archive
from graph_reference import pagerank as pagerank_oracle
from test_spark_recovery import (
    WINDOW,
    Job,
    assert_output_is_the_oracle,
    make_lines,
    oracle,
    published_windows,
    resume,
)
from test_spark_workers import WINDOW as WORKER_WINDOW
from test_spark_workers import write_job
from test_worker_host import published, updated_totals

from gyreflow.state.stores.local_copies import COPIES_FOLDER

# One parallel worker runs the module and test_spark_submit.py's cluster tests, on one cluster
# (tests/spark/conftest.py's ``cluster``): a second cluster for the executor kills cost its start (a
# master and two worker JVMs) on a machine whose parallel workers are all busy until the suite's end,
# for a group far shorter than the suite. The executor kills run last in the module, each with no
# other application on the cluster.
ON_ONE_CLUSTER = pytest.mark.xdist_group("spark-cluster")
# Every application on the cluster starts two executor JVMs: with the suite's options and its
# class-data archive (their class path is the installed pyspark's, as the driver's), about half the
# CPU each.
CLUSTER_CONF = {"spark.ui.enabled": "false", "spark.executor.extraJavaOptions": jvm_options_with_archive()}

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "spark-cluster.sh"


@pytest.fixture(scope="module")
def object_store_server():
    server = ObjectStoreServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    lines = make_lines()
    path = tmp_path_factory.mktemp("cluster-input") / "words.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, oracle(lines, WINDOW)


def shared_state(tmp_path: Path) -> dict[str, str]:
    """rocksdb with its snapshots in a directory (every node of this cluster mounts /tmp)."""
    return {"GYREFLOW_STATE__BACKEND": "rocksdb",
            "GYREFLOW_STATE__CHECKPOINT_URL": str(tmp_path / "checkpoints")}


def s3_state(server: ObjectStoreServer) -> dict[str, str]:
    location = server.new_location()
    return {"GYREFLOW_STATE__BACKEND": "rocksdb",
            "GYREFLOW_STATE__CHECKPOINT_URL": location["state.checkpoint_url"],
            "GYREFLOW_STATE__CHECKPOINT_OPTIONS": json.dumps(location["state.checkpoint_options"]),
            "GYREFLOW_STATE__SECRET": S3_SECRET}


def executor_pids(cluster_dir: Path) -> list[int]:
    """The executor JVMs the cluster's workers started (their command lines name the worker's
    folder)."""
    listed = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"], capture_output=True,
                            text=True, check=False)
    found = []
    for pid in map(int, listed.stdout.split()):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(cluster_dir)):
            found.append(pid)
    return found


@ON_ONE_CLUSTER
def test_cluster_workers_have_folders_of_their_own(cluster):
    master, directory = cluster
    status = subprocess.run(["bash", str(SCRIPT), "status", str(directory)], capture_output=True,
                            text=True, check=False)
    assert status.returncode == 0 and "2 live workers" in status.stdout, status.stdout
    assert master.startswith("spark://127.0.0.1:")
    folders = [directory / f"worker-{i}" / name for i in (1, 2) for name in ("work", "local", "tmp")]
    assert all(f.is_dir() for f in folders)
    assert len({os.path.realpath(f) for f in folders}) == 6


@ON_ONE_CLUSTER
def test_graph_on_the_cluster_with_state_in_an_object_store(cluster, object_store_server, tmp_path):
    master, _ = cluster
    vertices = list(range(1, 41))
    edges = [(v, (v * 7) % 40 + 1) for v in vertices] + [(v, v % 40 + 1) for v in vertices[::3]]
    (tmp_path / "v.txt").write_text("\n".join(map(str, vertices)) + "\n", encoding="utf-8")
    (tmp_path / "e.txt").write_text("\n".join(f"{a} {b}" for a, b in edges) + "\n",
                                    encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update(s3_state(object_store_server))
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "spark", "GYREFLOW_SPARK__MASTER": master,
                "GYREFLOW_SPARK__CONF": json.dumps(CLUSTER_CONF)})
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--quiet", str(ROOT / "examples" / "pagerank.py"),
         "--", "--vertices", "v.txt", "--edges", "e.txt", "--iterations", "5", "--parallelism", "2",
         "--output", "ranks"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = {}
    for line in (tmp_path / "ranks" / "window-000001.txt").read_text().splitlines():
        vertex, rank = line.split()
        ranks[int(vertex)] = float(rank)
    expected = pagerank_oracle(vertices, edges, True, 0.85, 5)
    assert ranks.keys() == expected.keys()
    assert all(abs(ranks[v] - expected[v]) < 1e-9 for v in vertices)


REFUSED = {
    "memory": ({"GYREFLOW_STATE__BACKEND": "memory"}, "state.backend = memory"),
    "rocksdb without a checkpoint location": (
        {"GYREFLOW_STATE__BACKEND": "rocksdb"}, "set state.checkpoint_url"),
    "relative checkpoint path": ({"GYREFLOW_STATE__BACKEND": "rocksdb",
                                  "GYREFLOW_STATE__CHECKPOINT_URL": "ckpt"}, "is relative"),
    "sqlite": ({"GYREFLOW_STATE__BACKEND": "jdbc"}, "PostgreSQL"),
}


@ON_ONE_CLUSTER
@pytest.mark.parametrize("case", list(REFUSED))
def test_what_cannot_work_on_a_cluster_is_refused_before_any_data_moves(cluster, words, tmp_path,
                                                                        case):
    master, _ = cluster
    state, hint = REFUSED[case]
    input_path, _ = words
    out = tmp_path / "out"
    job = Job(f"refused-{case}", tmp_path, input_path, out, state, 2, master=master,
              spark_conf=CLUSTER_CONF)
    status = job.wait()
    text = job.output()
    assert status == 2, text
    assert hint in " ".join(text.split()) and "Traceback" not in text, text
    assert not out.exists() and published_windows(out) == []


@ON_ONE_CLUSTER
def test_an_output_only_the_driver_sees_is_refused(cluster, words, tmp_path):
    """The driver runs in a mount namespace of its own with a private tmpfs for its output folder:
    executors (started by the workers, outside it) cannot see what the driver writes there."""
    master, _ = cluster
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    input_path, _ = words
    private = tmp_path / "driver-only"
    private.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update(shared_state(tmp_path))
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "spark", "GYREFLOW_SPARK__MASTER": master,
                "GYREFLOW_SPARK__CONF": json.dumps(CLUSTER_CONF)})
    # The output folder lives only in the driver's namespace: whether the refusal left it behind
    # is asked there, after the run.
    run = (f"mount -t tmpfs gyreflow-private {private} && {{ {sys.executable} -m gyreflow run "
           f"--quiet {ROOT / 'examples' / 'word_count.py'} -- --input {input_path} "
           f"--output {private / 'out' / 'words'}; status=$?; "
           f"if [ -e {private / 'out'} ]; then echo 'left behind: out' >&2; fi; exit $status; }}")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", run],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    if done.returncode != 2 and "mount" in done.stderr and "permission" in done.stderr.lower():
        pytest.skip(f"no private mounts here: {done.stderr.strip()}")
    text = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr[-3000:]
    assert "is not reachable from the executor" in text and "Traceback" not in text, text
    assert "left behind" not in text  # the folders the check made for it are gone again
    assert not list((tmp_path / "checkpoints").glob("*/meta"))


@ON_ONE_CLUSTER
def test_driver_killed_mid_run_then_resume_on_the_cluster(cluster, words, object_store_server,
                                                          tmp_path):
    master, _ = cluster
    input_path, expected = words
    out = tmp_path / "out"
    state = s3_state(object_store_server)
    job = Job("cluster-driver-kill", tmp_path, input_path, out, state, 2, master=master,
              spark_conf=CLUSTER_CONF)
    killed = job.kill_when(lambda: len(published_windows(out)) >= 3)
    status = job.wait()
    assert killed, f"the job ended before it could be killed (exit {status}):\n{job.output()}"
    assert status == -signal.SIGKILL
    assert 3 <= len(published_windows(out)) < len(expected)
    resume(tmp_path, input_path, out, state, 2, expected, master=master, spark_conf=CLUSTER_CONF)


@ON_ONE_CLUSTER
def test_executor_killed_mid_run_the_output_is_still_exact(cluster, words, tmp_path):
    master, directory = cluster
    input_path, expected = words
    out = tmp_path / "out"
    state = {**shared_state(tmp_path), "GYREFLOW_STATE__LOCAL_COPIES": "on"}
    job = Job("cluster-executor-kill", tmp_path, input_path, out, state, 2, master=master,
              spark_conf=CLUSTER_CONF)
    deadline = time.monotonic() + 300
    victims: list[int] = []
    copies: list[Path] = []
    while job.process.poll() is None and time.monotonic() < deadline:
        if len(published_windows(out)) >= 2:
            # each executor keeps its RocksDB copies in its own Spark local directories
            copies = [p for p in directory.rglob(COPIES_FOLDER) if list(p.rglob("CURRENT"))]
            victims = executor_pids(directory)
            if victims:
                os.kill(victims[0], signal.SIGKILL)
                break
        time.sleep(0.05)
    status = job.wait()
    assert victims, f"no executor to kill before the job ended:\n{job.output()}"
    assert copies, "no executor kept local copies of its snapshot objects"
    assert all(p.relative_to(directory).parts[1] == "local" for p in copies), copies
    assert not list(tmp_path.rglob(COPIES_FOLDER))  # none on the driver's side
    if status != 0:  # stopped with one error line: --resume must finish it exactly
        text = job.output()
        assert "Traceback" not in text, text
        resume(tmp_path, input_path, out, state, 2, expected, master=master,
               spark_conf=CLUSTER_CONF)
    assert_output_is_the_oracle(out, expected)
    assert any((directory / f"worker-{i}" / "work").iterdir() for i in (1, 2))


@ON_ONE_CLUSTER
def test_executor_killed_in_workers_mode_the_job_recovers_by_itself(cluster, tmp_path):
    """Workers mode on the cluster: the barrier stage's workers keep their tasks for the whole job;
    an executor JVM SIGKILLed mid-run takes a worker with it, and the driver starts the stage again
    from the last completed window, without a person: exit 0 and the oracle's output."""
    master, directory = cluster
    words = 2000
    script, config, out = write_job(tmp_path, words, 0.05)
    env = {**os.environ, **shared_state(tmp_path), "GYREFLOW_SPARK__MASTER": master,
           "GYREFLOW_RESTART__DELAY": "0.5", "GYREFLOW_SPARK__CONF": json.dumps(CLUSTER_CONF)}
    job = subprocess.Popen([sys.executable, "-m", "gyreflow", "run", "--config", str(config), "-q",
                            str(script), str(out)], env=env, cwd=tmp_path, text=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    victims: list[int] = []
    while job.poll() is None and time.monotonic() < deadline:
        if len(published(out)) >= 2:
            victims = executor_pids(directory)
            if victims:
                os.kill(victims[0], signal.SIGKILL)
                break
        time.sleep(0.02)
    output, _ = job.communicate(timeout=600)
    assert victims, f"no executor to kill before the job ended:\n{output}"
    assert len(published(out)) >= 2
    assert job.returncode == 0, output
    expected_words = [f"w{(i * 7919) % 37}" for i in range(words)]
    assert published(out) == {w: updated_totals(expected_words, w)
                              for w in range(1, words // WORKER_WINDOW + 1)}
