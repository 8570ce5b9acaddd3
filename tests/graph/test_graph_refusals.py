"""Graph input a graph refuses, as ``gyreflow run`` tells it with its output piped: a
``RemoveVertex`` of a vertex that still has edges is one ``error:`` line naming the vertex and its
edges, exit status 5 (input the job cannot use), a hint that is true (fix the input, then
``--resume``) and no traceback; after the input is fixed, ``--resume`` finishes the job."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _environments import environment_flags

pytestmark = pytest.mark.processes

SCRIPT = '''
import json
import sys

from gyreflow.api import Environment, FileSink, SizeTumblingWindow
from gyreflow.api.graph import Edge, GraphView, RemoveEdge, RemoveVertex
from gyreflow.api.graph_algorithms import incremental_wcc

def change(line):
    kind, *ids = line.split()
    ids = [int(i) for i in ids]
    return {"edge": Edge, "cut": RemoveEdge, "drop": RemoveVertex}[kind](*ids)

p = Environment.from_config().pipeline("refusal")

@p.task
def components(ctx):
    lines = ctx.source(open(sys.argv[1]).read().split("|"), SizeTumblingWindow(1), parallelism=1)
    changes = lines.flat_map(lambda text: [change(line) for line in text.strip().splitlines()])
    labels = incremental_wcc(GraphView(None, changes, directed=False))
    labels.sink(FileSink(sys.argv[2]))

p.execute()
'''


def run(tmp_path, environment_type, changes: str, *flags: str):
    (tmp_path / "changes.txt").write_text(changes, encoding="utf-8")
    command = [sys.executable, "-m", "gyreflow", "run", "-q", *environment_flags(environment_type),
               *flags, str(tmp_path / "job.py"), "--", str(tmp_path / "changes.txt"),
               str(tmp_path / "out")]
    env = {"PATH": "/usr/bin:/bin", "COLUMNS": "400", "GYREFLOW_STATE__BACKEND": "rocksdb",
           "GYREFLOW_STATE__PATH": str(tmp_path / "state")}
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False,
                          env=env, cwd=tmp_path)


@pytest.mark.parametrize("environment_type", ["local", "workers"])
def test_a_refused_vertex_removal_is_one_line_and_resumes_once_fixed(tmp_path, environment_type):
    (tmp_path / "job.py").write_text(SCRIPT, encoding="utf-8")
    done = run(tmp_path, environment_type, "edge 1 2\nedge 2 3|drop 2|edge 4 5")
    assert done.returncode == 5, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("error: task 'incremental-wcc") and " failed in window 2: " in lines[0]
    assert lines[0].endswith("RemoveVertex(2) refused: vertex 2 still has 2 edge(s) at the end of "
                             "the window (to or from 1, 3): remove them with RemoveEdge first, or "
                             "the vertex with RemoveVertex(id, detach=True)"), lines
    assert lines[1:] == ["Completed windows are kept: fix the input (the data, or the system it "
                         "comes from) and run again with --resume."], lines
    assert "Traceback" not in done.stderr and done.stdout == ""
    # the hint holds: the input fixed (the edges go first), the resume finishes from window 2
    done = run(tmp_path, environment_type, "edge 1 2\nedge 2 3|cut 1 2\ncut 2 3\ndrop 2|edge 4 5",
               "--resume")
    assert done.returncode == 0, done.stderr
    labels: dict = {}
    for path in sorted((tmp_path / "out").rglob("*")):
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                vertex, label = json.loads(line)  # windows in order: the last label stays
                labels[vertex] = label
    # union-find by hand of the last version: edges {4-5}, vertices 1, 3, 4, 5
    assert {v: x for v, x in labels.items() if x is not None} == {1: 1, 3: 3, 4: 4, 5: 4}
