"""A Spark master URL Spark would not take is refused first, in one line naming it and what is wrong.

Before any other check (state a cluster cannot reach, the master's address) and before Spark starts:
a mistyped URL is never reported as a state problem, and a port that is not a number is never
replaced by 7077. ``gyreflow run`` is run as a user runs it, with the master in
``GYREFLOW_SPARK__MASTER``, on the default memory state and on PostgreSQL state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TAKEN = ["local", "local[1]", "local[*]", "local[4]", "local[2,3]", "local[*, 2]",
         "local-cluster[2, 1, 1024]", "spark://127.0.0.1:7077", "spark://a:7077,b.example:7078",
         "spark://[::1]:7077", "yarn", "k8s://https://10.0.0.1:6443", "k8s://10.0.0.1:6443"]

REFUSED = {
    "sparkk://127.0.0.1:17077": "'sparkk' is not a kind of master Spark knows (did you mean spark://?)",
    "spark://127.0.0.1:notaport": "the port 'notaport' is not a number",
    "spark://127.0.0.1:17077x": "the port '17077x' is not a number",
    "spark://127.0.0.1": "'127.0.0.1' has no port",
    "spark://a:7077,b": "'b' has no port",
    "spark://h:70770": "the port 70770 is not from 1 to 65535",
    "spark://:7077": "':7077' names no host",
    "spark://": "it names no master",
    "local[0]": "local[0] runs no task",
    "local[x]": "not a local master's form",
    "localhost:7077": "not a local master's form",
    "yarn-client": "'yarn-client' is not a kind of master Spark knows",
    "mesos://h:5050": "Spark 4 runs on no Mesos cluster",
    "k8s://https://h:abc": "the port of the API server 'https://h:abc' is not a number",
    "k8s://": "it names no API server",
    "127.0.0.1:7077": "a host and port without a scheme (did you mean spark://127.0.0.1:7077?)",
}


@pytest.mark.parametrize("master", TAKEN)
def test_the_forms_spark_takes_pass(master):
    from gyreflow.api.language.cluster import master_problem

    assert master_problem(master) is None


@pytest.mark.parametrize("master", list(REFUSED))
def test_a_url_spark_would_not_take_is_named_with_what_is_wrong(master):
    from gyreflow.api.language.cluster import master_problem

    problem = master_problem(master)
    assert problem is not None and problem.startswith(f"spark.master {master}: {REFUSED[master]}")
    assert "\n" not in problem and "spark://HOST:PORT" in problem


def test_spaces_around_a_url_are_shown():
    from gyreflow.api.language.cluster import master_problem

    assert master_problem(" local[2]").startswith("spark.master ' local[2]': spaces around")


STATES = {
    "memory": {},
    "postgresql": {"GYREFLOW_STATE__BACKEND": "jdbc", "GYREFLOW_STATE__SECRET": "s",
                   "GYREFLOW_STATE__URL": "postgresql+psycopg://u@127.0.0.1:1/gyreflow"},
}


@pytest.mark.processes
@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("master", ["sparkk://127.0.0.1:17077", "spark://127.0.0.1:notaport",
                                    "spark://127.0.0.1:17077x"])
def test_gyreflow_run_refuses_a_malformed_master_first(tmp_path, master, state):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.update(STATES[state])
    env.update({"GYREFLOW_ENVIRONMENT__TYPE": "spark", "GYREFLOW_SPARK__MASTER": master})
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "gyreflow", "run", "--fresh", str(ROOT / "examples" / "word_count.py"),
         "--", "--output", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=300, check=False)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1, done.stderr  # no "starting Spark": no JVM started
    assert lines[0].startswith(f"error: configuration: spark.master {master}: {REFUSED[master]};")
    assert not out.exists()
