"""Every ``gyreflow`` command starts fast: the command line imports what a command uses when it runs.

Importing the command line (every command's definition, and ``gyreflow --help``) must cost at most
0.3 s beyond a bare interpreter, and a job on the memory backend never imports SQLAlchemy, Spark or
RocksDB. The import is timed inside a fresh interpreter, best of five, so that the machine's load
weighs as little as it can.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gyreflow.api.cli import commands
from gyreflow.api.cli import graph as graph_cli
from gyreflow.api.config import ENVIRONMENT_TYPES
from gyreflow.plan.explain import FORMATS

BUDGET = 0.3  # seconds an import of the command line may cost beyond a bare interpreter
HEAVY = ("sqlalchemy", "pyspark", "rocksdict", "psycopg", "fsspec", "prometheus_client", "pyarrow")


def in_fresh_interpreter(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_the_command_line_costs_at_most_its_budget():
    timed = ("import time; t = time.perf_counter(); import gyreflow.api.cli.commands; "
             "print(time.perf_counter() - t)")
    best = min(float(in_fresh_interpreter(timed)) for _ in range(5))
    assert best <= BUDGET, f"importing the command line took {best:.3f} s (budget {BUDGET} s)"


def test_the_command_line_imports_no_engine_store_or_ui_until_a_command_runs():
    loaded = in_fresh_interpreter(
        "import sys, gyreflow.api.cli.commands; "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in "
        f"{HEAVY!r} or m in ('gyreflow.runtime.driver', 'rich.console', 'attrs')))")
    assert loaded.split() == []


@pytest.mark.parametrize("backend", ["memory", "rocksdb"])
def test_a_job_on_a_local_backend_never_imports_sqlalchemy_spark_or_arrays(tmp_path, backend):
    loaded = in_fresh_interpreter(f"""
import sys
from gyreflow.api import Environment, SizeTumblingWindow

env = Environment.from_config(None, {{"environment.type": "local", "progress.enabled": False,
                                      "state.backend": "{backend}", "state.path": {str(tmp_path)!r}}})
pipeline = env.pipeline("startup")

@pipeline.task
def count(ctx):
    words = ctx.source(["a b", "b"], SizeTumblingWindow(1)).flat_map(str.split)
    words.key_by(lambda w: w).count().collect("out")

result = pipeline.execute()
assert sorted(result["count"].output("out")) == [("a", 1), ("b", 1), ("b", 2)], result["count"].output("out")
print(" ".join(m for m in ("sqlalchemy", "pyspark", "numpy", "scipy") if m in sys.modules))
""")
    assert loaded.split() == []


def test_the_choices_the_command_line_names_are_the_configs_and_explains():
    run = commands.main.commands["run"]
    env_choice = next(p for p in run.params if p.name == "environment").type.choices
    assert tuple(env_choice) == tuple(ENVIRONMENT_TYPES)
    graph_env = next(p for p in graph_cli.graph.params if p.name == "environment").type.choices
    assert tuple(graph_env) == tuple(ENVIRONMENT_TYPES)
    explain = commands.main.commands["explain"]
    assert tuple(next(p for p in explain.params if p.name == "fmt").type.choices) == tuple(FORMATS)
