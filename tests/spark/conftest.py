"""Fixtures of the Spark tests: the standalone cluster test_spark_cluster and test_spark_submit share."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _spark_master import jvm_options_with_archive

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = ROOT / "scripts" / "spark-cluster.sh"


@pytest.fixture(scope="session")
def cluster():
    """The master URL and folder of a two-worker standalone cluster (``scripts/spark-cluster.sh``).

    One cluster serves both modules: their cluster tests are one xdist group, so one test process
    starts it (a master and two worker JVMs) once, and stops it when that process ends. Its daemons
    start with the suite's JVM options and class-data archive (``SPARK_DAEMON_JAVA_OPTS``): less
    than half the CPU of Spark's defaults.
    """
    directory = Path(tempfile.mkdtemp(prefix="gyreflow-test-cluster-"))
    env = {**os.environ, "PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": jvm_options_with_archive()}
    started = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start", str(directory), "2"],
                             capture_output=True, text=True, check=False, env=env)
    if started.returncode != 0:
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(directory)], check=False)
        pytest.fail(f"the Spark cluster did not start:\n{started.stderr}")
    yield started.stdout.strip().split("=", 1)[1], directory
    subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(directory)], check=False)
    shutil.rmtree(directory, ignore_errors=True)
