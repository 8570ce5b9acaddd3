"""A first run as a user sees it: what starts, where it ran and wrote, the auto defaults, and no Java."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from collections import Counter

import networkx as nx
import pytest

ROOT = pathlib.Path(__file__).parents[3]
WORD_COUNT = ROOT / "examples" / "word_count.py"
SAMPLE = ROOT / "examples" / "data" / "sample.txt"
GRAPH_V = ROOT / "tests" / "data" / "graphalytics" / "example-directed.v"
GRAPH_E = ROOT / "tests" / "data" / "graphalytics" / "example-directed.e"


def cores() -> int:
    """The oracle for ``auto`` on Spark ``local[*]``: the cores this process may run on."""
    return len(os.sched_getaffinity(0))


def local_auto() -> int:
    """The oracle for ``auto`` on the local environment: a core for the driver, a worker process
    for each other core (at least one: this process)."""
    return max(1, cores() - 1)


def environ(**changes: str | None) -> dict[str, str]:
    """This environment without gyreflow's own variables (the defaults alone), with ``changes``
    (None removes a variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYREFLOW_")}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def gyreflow(args: list, cwd: pathlib.Path, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m gyreflow ARGS`` as a terminal, a log or CI runs it: output piped."""
    return subprocess.run([sys.executable, "-m", "gyreflow", *map(str, args)], cwd=cwd,
                          env=env if env is not None else environ(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def no_java(tmp_path) -> dict[str, str]:
    """An environment whose PATH holds every command of this machine but java, and no JAVA_HOME."""
    hidden = tmp_path / "bin-without-java"
    hidden.mkdir()
    for folder in ("/usr/local/bin", "/usr/bin", "/bin"):
        if not os.path.isdir(folder):
            continue
        for name in os.listdir(folder):
            if name in ("java", "jshell", "jrunscript", "keytool") or os.path.lexists(hidden / name):
                continue
            (hidden / name).symlink_to(os.path.join(folder, name))
    return environ(PATH=str(hidden), JAVA_HOME=None)


def window_counts(window: int) -> dict[int, dict[str, int]]:
    """The word count's output by a plain loop: per window, each word seen in it with its count over
    windows 1..w."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    total: Counter = Counter()
    expected = {}
    for number, start in enumerate(range(0, len(lines), window), 1):
        seen = Counter(word for line in lines[start:start + window] for word in line.split())
        total.update(seen)
        expected[number] = {word: total[word] for word in seen}
    return expected


def read_output(folder: pathlib.Path) -> dict[int, dict[str, int]]:
    found = {}
    for path in sorted(folder.glob("window-*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        found[int(path.stem.split("-")[1])] = {row["word"]: row["count"] for row in rows}
    return found


# --- without Java ---------------------------------------------------------------------------------


@pytest.mark.processes
def test_spark_without_java_says_so_in_one_line(tmp_path, no_java):
    result = gyreflow(["run", WORD_COUNT, "--", "--output", tmp_path / "out"], tmp_path, no_java)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "error: Spark did not start with master local[*]: Java 17 is missing: no java on PATH and "
        "JAVA_HOME is not set; install Java 17 (e.g. apt-get install openjdk-17-jre-headless) or "
        "set JAVA_HOME (--env local runs without Spark and needs no Java)"]
    assert result.stdout == ""
    assert not (tmp_path / "out").exists()


@pytest.mark.processes
def test_a_java_home_without_java_is_named(tmp_path):
    home = tmp_path / "jdk"
    home.mkdir()
    result = gyreflow(["run", WORD_COUNT, "--", "--output", tmp_path / "out"], tmp_path,
                      environ(JAVA_HOME=str(home)))
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"error: Spark did not start with master local[*]: JAVA_HOME is wrong: {home} has no "
        "bin/java; point JAVA_HOME at a Java 17 installation or unset it to use the java on PATH "
        "(--env local runs without Spark and needs no Java)"]


@pytest.mark.processes
def test_env_local_needs_no_java(tmp_path, no_java):
    out = tmp_path / "out"
    result = gyreflow(["run", "-q", "--env", "local", WORD_COUNT, "--", "--output", out], tmp_path,
                      no_java)
    assert result.returncode == 0, result.stderr
    assert read_output(out) == window_counts(500)


# --- commands whose work is small start no JVM ----------------------------------------------------


@pytest.mark.processes
def test_query_runs_without_a_jvm_by_default(tmp_path, no_java):
    (tmp_path / "g").mkdir()
    people = [{"id": 1, "label": "P", "name": "ann"}, {"id": 2, "label": "P", "name": "bob"},
              {"id": 3, "label": "P", "name": "cy"}]
    knows = [(1, 2), (2, 3), (1, 3)]
    (tmp_path / "g" / "vertices.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in people), encoding="utf-8")
    (tmp_path / "g" / "edges.jsonl").write_text(
        "".join(json.dumps({"src": s, "dst": d, "label": "KNOWS"}) + "\n" for s, d in knows),
        encoding="utf-8")
    result = gyreflow(["query", tmp_path / "g",
                       "MATCH (a:P)-[:KNOWS]->(b:P) RETURN a.name AS a, b.name AS b"], tmp_path,
                      no_java)
    assert result.returncode == 0, result.stderr
    names = {p["id"]: p["name"] for p in people}
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert sorted((r["a"], r["b"]) for r in rows) == sorted((names[s], names[d]) for s, d in knows)
    # with Spark asked for, the same command does try to start it
    asked = gyreflow(["query", "--env", "spark", tmp_path / "g", "MATCH (a:P) RETURN a.name"],
                     tmp_path, no_java)
    assert asked.returncode == 2
    assert asked.stderr.startswith("error: Spark did not start with master local[*]: Java 17 is "
                                   "missing")
    assert "Traceback" not in asked.stderr


@pytest.mark.processes
def test_a_small_graph_runs_without_a_jvm_by_default(tmp_path, no_java):
    out = tmp_path / "wcc.txt"
    result = gyreflow(["graph", "wcc", "--vertices", GRAPH_V, "--edges", GRAPH_E, "--output", out],
                      tmp_path, no_java)
    assert result.returncode == 0, result.stderr
    assert "computed on local" in result.stderr
    graph = nx.Graph()
    graph.add_nodes_from(int(line) for line in GRAPH_V.read_text().split())
    graph.add_edges_from(tuple(map(int, line.split()[:2])) for line in GRAPH_E.read_text().splitlines()
                         if line.strip())
    oracle = {v: min(component) for component in nx.connected_components(graph) for v in component}
    got = dict(tuple(map(int, line.split())) for line in out.read_text().splitlines())
    assert got == oracle


# --- what ran where -------------------------------------------------------------------------------


@pytest.mark.processes
def test_the_summary_names_the_environment_and_the_output(tmp_path):
    out = tmp_path / "out"
    result = gyreflow(["run", "--env", "local", WORD_COUNT, "--", "--output", out], tmp_path)
    assert result.returncode == 0, result.stderr
    n = local_auto()
    where = "in this process" if n == 1 else f"in {n} worker processes"
    single = [] if n == 1 else ["  with 1 task: lines, files"]  # the example's source and sink
    assert result.stderr.splitlines()[-2 - len(single):] == [
        f"word-count/word_count ran on local, {where}, parallelism {n}", *single,
        "  output: FileSink(out)"]  # as the user wrote it, relative to the working directory
    assert read_output(out) == window_counts(500)
    quiet = gyreflow(["run", "-q", "--env", "local", "--fresh", WORD_COUNT, "--", "--output", out],
                     tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == ""


@pytest.mark.processes
def test_workers_without_a_parallelism_leave_no_worker_idle(tmp_path):
    out = tmp_path / "out"
    result = gyreflow(["run", "--env", "local", "--workers", "2", WORD_COUNT, "--", "--output",
                       out, "--window", "700"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-3:-1] == [
        "word-count/word_count ran on local, in 2 worker processes, parallelism 2",
        "  with 1 task: lines, files"]
    assert read_output(out) == window_counts(700)


SCRIPT_LOCAL = """\
from gyreflow.api import Environment

env = Environment.local(progress=False)
pipeline = env.pipeline("p")


@pipeline.task(name="t")
def task(ctx):
    ctx.source([1, 2, 3]).map(lambda x: x * 10).collect("out")


print(sorted(pipeline.execute().output("out")))
"""


@pytest.mark.processes
def test_env_spark_on_a_script_that_builds_a_local_environment_warns(tmp_path, no_java):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT_LOCAL, encoding="utf-8")
    result = gyreflow(["run", "-q", "--env", "spark", script], tmp_path, no_java)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{sorted(x * 10 for x in [1, 2, 3])}\n"
    assert result.stderr.splitlines() == [
        "warning: --env spark is ignored by Environment.local() at job.py:3: its pipelines run in "
        "this process; build the environment with Environment.from_config() to let --env choose"]


@pytest.mark.spark
@pytest.mark.processes
def test_spark_says_what_starts_before_the_wait(tmp_path):
    out = tmp_path / "out"
    result = gyreflow(["run", WORD_COUNT, "--", "--output", out, "--window", "2500"], tmp_path,
                      timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("starting Spark local[*] (a JVM; about ")
    assert lines[0].endswith(" s) — --env local starts none")
    single = [] if cores() == 1 else ["  with 1 task: lines, files"]  # its source and sink
    assert lines[-2 - len(single):] == [
        f"word-count/word_count ran on Spark local[*], workers mode, parallelism {cores()}",
        *single, "  output: FileSink(out)"]
    assert read_output(out) == window_counts(2500)


# --- the auto defaults, in process ----------------------------------------------------------------


def test_auto_on_the_local_environment_brings_the_workers(tmp_path):
    from gyreflow.api import Environment

    env = Environment.from_config(overrides={"environment.type": "local",
                                             "state.path": str(tmp_path)})
    n = local_auto()
    assert (env.config["environment.parallelism"], env.config["environment.workers"]) == (n, n)
    chosen = Environment.from_config(overrides={"environment.type": "local",
                                                "environment.workers": 3})
    assert chosen.config["environment.parallelism"] == 3
    explicit = Environment.from_config(overrides={"environment.type": "local",
                                                  "environment.parallelism": 2})
    assert explicit.config["environment.workers"] == 1  # as before auto: the caller chose


def test_environment_local_keeps_one_task_in_this_process():
    from gyreflow.api import Environment

    env = Environment.local()
    assert (env.config["environment.parallelism"], env.config["environment.workers"]) == (1, 1)
    assert Environment.local(parallelism=3).config["environment.parallelism"] == 3


@pytest.mark.parametrize(("master", "expected"), [("local[3]", 3), ("local", 1),
                                                  ("local[*]", None), ("local[2,4]", 2)])
def test_auto_on_spark_is_the_masters_cores(master, expected):
    from gyreflow.api import Environment

    env = Environment.spark(master=master)  # nothing starts: a local master says its cores
    assert env.config["environment.parallelism"] == (expected or cores())


def test_auto_is_a_value_of_the_config_file_and_the_variables(tmp_path):
    from gyreflow.api.config import Config, ConfigError

    path = tmp_path / "c.toml"
    path.write_text('[environment]\nparallelism = "auto"\nworkers = 4\n', encoding="utf-8")
    config = Config.load(path, environ={"GYREFLOW_ENVIRONMENT__WORKERS": "Auto"})
    assert (config["environment.parallelism"], config["environment.workers"]) == ("auto", "auto")
    with pytest.raises(ConfigError, match='cannot be parsed as int or "auto"'):
        Config.load(environ={"GYREFLOW_ENVIRONMENT__PARALLELISM": "many"})


@pytest.mark.processes
def test_auto_keeps_a_size_windowed_list_source_as_at_parallelism_one(tmp_path):
    """A list source cut into SizeTumblingWindow(3) under the auto default: its windows are 3
    consecutive items whatever the machine's cores (the operators after it use them)."""
    from gyreflow.api import Environment, SizeTumblingWindow

    items = list(range(20))
    env = Environment.from_config(overrides={"environment.type": "local", "progress.enabled": False,
                                             "state.path": str(tmp_path)})
    pipeline = env.pipeline("sizes")

    @pipeline.task(name="t")
    def task(ctx):
        ctx.source(items, SizeTumblingWindow(3)).map(lambda x: (x // 100, x)).key_by(
            lambda kv: kv[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).collect("sums")

    result = pipeline.execute()
    got = {window: [value for _, value in records]
           for window, records in result.by_window("sums").items()}
    oracle, total = {}, 0
    for number, start in enumerate(range(0, len(items), 3), 1):
        total += sum(items[start:start + 3])
        oracle[number] = [total]
    assert got == oracle


@pytest.mark.processes
def test_explain_starts_nothing(tmp_path, no_java):
    result = gyreflow(["explain", WORD_COUNT], tmp_path, no_java, timeout=60)
    assert result.returncode == 0, result.stderr
    n = cores()
    assert f"count            count      one-input  p={n}" in result.stdout
    assert "lines            source     source     p=1" in result.stdout
