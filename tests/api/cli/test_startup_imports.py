"""A job imports at start-up only what it runs with: a plain word count imports no graph, SQL, Spark,
columnar or ui modules, and a quiet ``gyreflow run`` no ui server and no rich (start-up is most of a
small job's time: each of these is imported by the first call that needs it)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[3]

# Modules a plain word count must not import: each is imported where it is first used.
LAZY = (
    # third-party: graphs, arrays, SQL, stores, Spark, the ui
    "scipy", "pandas", "numpy", "pyarrow", "sqlglot", "sqlalchemy", "pyspark", "rich",
    "prometheus_client",
    # the standard library's parts a run in one process without a config file never uses
    "tomllib", "subprocess", "multiprocessing.connection", "http.server",
    "sysconfig",  # where the standard library lies: asked when a traceback is shown
    # imported by the first key of theirs (decimal, datetime) or the first load to weigh
    "decimal", "statistics",
    # gyreflow's own modules a word count does not use
    "gyreflow.api.graph", "gyreflow.api.dsl", "gyreflow.runtime.spark",
    "gyreflow.api.service.ui_server", "gyreflow.api.service.monitor",
    "gyreflow.runtime.workers.wire", "gyreflow.api.connectors.column_formats",
    # iterations and graph operators: imported by a plan with an iteration or a graph operator
    "gyreflow.runtime.dataflow.iteration", "gyreflow.runtime.dataflow.graph",
    "gyreflow.scheduler.iteration", "gyreflow.plan.graph_changes",
)
LOADED = f"' '.join(m for m in {LAZY!r} if m in sys.modules)"
# and, where no command line (click imports it) runs the job: a memory backend's namespace is 128
# random bits from os.urandom
LOADED_BY_API = f"' '.join(m for m in {(*LAZY, 'uuid')!r} if m in sys.modules)"
WORDS = "a b a\nc a b\n"
JOB = (
    "import sys\n"
    "from gyreflow.api import Environment, FileSource, SizeTumblingWindow\n"
    "pipeline = Environment.{env}.pipeline('startup')\n"
    "@pipeline.task(name='job')\n"
    "def job(ctx):\n"
    "    (ctx.source(FileSource(sys.argv[1]), SizeTumblingWindow(1)).with_parallelism(1)\n"
    "     .flat_map(str.split).key_by().count().collect('rows'))\n"
    "rows = pipeline.execute()['job'].by_window('rows')\n"
    "print(sorted(rows[max(rows)]))\n"
)


def counted() -> str:
    """The word count of ``WORDS`` as the job prints its last window: the oracle."""
    return str(sorted(Counter(WORDS.split()).items()))


def test_a_word_count_imports_none_of_the_modules_it_does_not_use(tmp_path):
    text = tmp_path / "words.txt"
    text.write_text(WORDS, encoding="utf-8")
    code = JOB.format(env="local(progress=False)") + f"print('loaded:', {LOADED_BY_API})\n"
    done = subprocess.run([sys.executable, "-c", code, str(text)], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [counted(), "loaded: "]


def test_a_quiet_gyreflow_run_imports_no_ui_server_and_no_rich(tmp_path):
    text = tmp_path / "words.txt"
    text.write_text(WORDS, encoding="utf-8")
    script = tmp_path / "job.py"
    # Asked at exit: after everything ``gyreflow run`` does once the script has run.
    script.write_text(f"import atexit\natexit.register(lambda: print('loaded:', {LOADED}))\n"
                      + JOB.format(env="from_config()"), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--env", "local", "-q",
                           str(script), "--", str(text)], capture_output=True, text=True,
                          check=False, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert (done.stdout.splitlines(), done.stderr) == ([counted(), "loaded: "], "")



def test_a_word_count_on_worker_processes_imports_no_numpy(tmp_path):
    # The worker host's messages of graph arrays need numpy only when there are arrays: a job
    # of records loads it neither in the driver nor in the workers it forks (the split runs in
    # the workers and says what it finds loaded there).
    text = tmp_path / "words.txt"
    text.write_text(WORDS, encoding="utf-8")
    script = tmp_path / "job.py"
    script.write_text(
        "import atexit, os, sys\n"
        "from gyreflow.api import Environment, FileSource, SizeTumblingWindow\n"
        "atexit.register(lambda: print('driver loaded:', 'numpy' in sys.modules))\n"
        "def split(line):\n"
        "    return [(word, os.getpid(), 'numpy' in sys.modules) for word in line.split()]\n"
        "pipeline = Environment.from_config().pipeline('startup')\n"
        "@pipeline.task(name='job')\n"
        "def job(ctx):\n"
        "    ctx.source(FileSource(sys.argv[1]), SizeTumblingWindow(1)).with_parallelism(2)"
        ".flat_map(split).collect('rows')\n"
        "rows = pipeline.execute()['job'].by_window('rows')\n"
        "seen = [row for window in rows.values() for row in window]\n"
        "print(sorted(word for word, _, _ in seen), len({pid for _, pid, _ in seen}),"
        " any(loaded for _, _, loaded in seen), os.getpid() in {pid for _, pid, _ in seen})\n",
        encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "gyreflow", "run", "--env", "local",
                           "--workers", "2", "-q", str(script), "--", str(text)],
                          capture_output=True, text=True, check=False, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    # every word, split in two worker processes (not this one), none with numpy loaded
    assert done.stdout.splitlines() == [f"{sorted(WORDS.split())} 2 False False",
                                        "driver loaded: False"], done.stdout


def test_what_the_import_leaves_alive_is_never_walked_again_and_later_garbage_still_is():
    # The full collection at exit and those a run triggers skip gyreflow's classes and functions
    # (frozen once imported); garbage made afterwards is collected as before.
    code = (
        "import gc\n"
        "from gyreflow.api import Environment\n"
        "from gyreflow.runtime.driver import JobListener\n"
        "frozen = gc.get_freeze_count()\n"
        "tracked = {id(o) for o in gc.get_objects()}\n"
        "class Cycle:\n"
        "    def __init__(self): self.me = self\n"
        "    def __del__(self): print('finalized')\n"
        "Cycle()\n"
        "gc.collect()\n"
        "print(gc.isenabled(), frozen > 10000, id(Environment) in tracked, id(JobListener) in tracked)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert (done.stdout.splitlines(), done.returncode) == (["finalized", "True True False False"], 0), \
        done.stderr


def test_an_interactive_session_is_not_frozen():
    # What a REPL or a notebook holds before it first uses gyreflow is its user's: not frozen.
    code = ("import gc\n"
            "from gyreflow.api import Environment\n"
            "print('frozen', gc.get_freeze_count())\n")
    done = subprocess.run([sys.executable, "-i", "-c", code], capture_output=True, text=True,
                          input="", check=False, timeout=120)
    assert "frozen 0" in done.stdout.splitlines(), (done.stdout, done.stderr)

