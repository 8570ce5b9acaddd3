"""Spark that does not start ends every command that starts it (run, sql, graph, query) with one
``error:`` line naming the master and the setting to change, and exit status 2: never a traceback.

A SPARK_HOME without ``bin/spark-submit`` and a missing Java are told before any JVM starts; a master
or setting that spark-submit or its JVM refuses is told in spark-submit's own words, not as a Java
problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _cli_runs import clean_environ

pytestmark = pytest.mark.processes

SCRIPT = ("from gyreflow.api import AllWindow, Environment\n"
          "pipeline = Environment.from_config().pipeline('tiny')\n"
          "@pipeline.task\n"
          "def words(ctx):\n"
          "    ctx.source(['a b', 'b'], AllWindow()).flat_map(str.split).collect('out')\n"
          "print(pipeline.execute()['words'].output('out'))\n")
SQL = ("CREATE TABLE users (id bigint, name varchar) WITH (type = 'file', "
       "geaflow.dsl.file.path = 'users.txt');\n"
       "SELECT name FROM users;\n")


def inputs(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "q.sql").write_text(SQL, encoding="utf-8")
    (tmp_path / "users.txt").write_text("1,ann\n", encoding="utf-8")
    (tmp_path / "g.v").write_text("1\n2\n", encoding="utf-8")
    (tmp_path / "g.e").write_text("1 2\n", encoding="utf-8")


COMMANDS = {
    "run": ["run", "--env", "spark", "job.py"],
    "sql": ["sql", "q.sql", "--env", "spark"],
    "graph": ["graph", "wcc", "--vertices", "g.v", "--edges", "g.e", "--output", "out.txt",
              "--env", "spark"],
    "query": ["query", "g.v", "g.e", "MATCH (a)-[]->(b) RETURN a, b", "--env", "spark"],
}


def gyreflow(tmp_path: Path, args: list[str], **variables: str | None):
    """The command as a user runs it, with ``variables`` set (None: removed)."""
    env = clean_environ()
    env.update({"GYREFLOW_SPARK__MASTER": "local[1]",
                "GYREFLOW_STATE__PATH": str(tmp_path / "state")})
    for name, value in variables.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return subprocess.run([sys.executable, "-m", "gyreflow", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def the_error(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a failed command, checked to be the whole story: no traceback."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_spark_home_that_names_no_spark_is_named_before_spark_starts(tmp_path, command):
    inputs(tmp_path)

    done = gyreflow(tmp_path, COMMANDS[command], SPARK_HOME=str(tmp_path / "nowhere"))

    line = the_error(done)
    assert line.startswith("error: Spark did not start with master local[1]: SPARK_HOME is wrong: "
                           f"{tmp_path / 'nowhere'} has no bin/spark-submit; point SPARK_HOME at"), line
    assert "or unset it" in line
    assert "starting Spark" not in done.stderr  # told before the wait is announced


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_missing_java_is_named_in_one_line(tmp_path, command):
    inputs(tmp_path)
    no_java = tmp_path / "bin"
    no_java.mkdir()

    done = gyreflow(tmp_path, COMMANDS[command], PATH=str(no_java), JAVA_HOME=None)

    line = the_error(done)
    assert line.startswith("error: Spark did not start with master local[1]: Java 17 is missing: "
                           "no java on PATH and JAVA_HOME is not set"), line


@pytest.mark.parametrize(("master", "said"), [
    ("spark//host:7077", "error: configuration: spark.master spark//host:7077: 'spark//host:7077' is "
                         "not a kind of master Spark knows"),
    ("spark://nohost.invalid:7077", "error: configuration: spark.master spark://nohost.invalid:7077: "
                                    "nothing accepts connections at nohost.invalid:7077"),
], ids=["malformed", "unknown-host"])
def test_a_master_url_refused_before_spark_starts_is_one_line_for_sql_too(tmp_path, master, said):
    inputs(tmp_path)

    done = gyreflow(tmp_path, COMMANDS["sql"], GYREFLOW_SPARK__MASTER=master,
                    GYREFLOW_STATE__BACKEND="rocksdb",
                    GYREFLOW_STATE__CHECKPOINT_URL=str(tmp_path / "checkpoints"))

    assert the_error(done).startswith(said)


def test_what_spark_submit_or_its_jvm_refuses_is_told_in_their_words_not_as_a_java_problem(
        tmp_path):
    """Both cases in one test, one after the other: the JVM writes to the one Spark log of this user,
    and each run reads back what was written there since it started."""
    inputs(tmp_path)
    checkpoints = str(tmp_path / "checkpoints")

    yarn = gyreflow(tmp_path, [*COMMANDS["run"], "-q"], GYREFLOW_SPARK__MASTER="yarn",
                    GYREFLOW_STATE__BACKEND="rocksdb", GYREFLOW_STATE__CHECKPOINT_URL=checkpoints,
                    HADOOP_CONF_DIR=None, YARN_CONF_DIR=None)
    memory = gyreflow(tmp_path, COMMANDS["sql"],
                      GYREFLOW_SPARK__CONF='{"spark.driver.memory": "lots"}')

    line = the_error(yarn)
    assert line.startswith("error: Spark did not start with master yarn: spark-submit stopped "
                           "before Spark started: When running with master 'yarn' either "
                           "HADOOP_CONF_DIR or YARN_CONF_DIR must be set"), line
    assert "Java 17" not in line
    line = the_error(memory)
    assert line.startswith("error: Spark did not start with master local[1]: spark-submit stopped "
                           "before Spark started: Invalid maximum heap size: -Xmxlots"), line
    assert "[spark] conf" in line and "Java 17" not in line
