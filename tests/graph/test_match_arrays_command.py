"""``gyreflow query`` on a graph folder runs MATCH as array joins: the lines it prints, as a user sees
them (a subprocess, output piped), against a plain-Python loop over the edge list."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pytest

pytestmark = pytest.mark.processes


def write_graph(folder, size=200, edge_count=900, seed=4):
    rng = random.Random(seed)
    vertices = [(i, i % 7) for i in range(size)]
    edges = [(rng.randrange(size), rng.randrange(size)) for _ in range(edge_count)]
    edges.append((5, 5))  # a self-loop: a 2-hop match takes it once, not twice
    with open(folder / "vertices.jsonl", "w", encoding="utf-8") as file:
        file.writelines(json.dumps({"id": i, "label": "N", "x": x}) + "\n" for i, x in vertices)
    with open(folder / "edges.jsonl", "w", encoding="utf-8") as file:
        file.writelines(json.dumps({"src": a, "dst": b}) + "\n" for a, b in edges)
    return dict(vertices), edges


def two_hops(edges):
    """``(a, b, c)`` of every a->b->c over two different edges."""
    out: dict = {}
    for index, (a, b) in enumerate(edges):
        out.setdefault(a, []).append((index, b))
    return [(a, b, c) for first, (a, b) in enumerate(edges)
            for second, c in out.get(b, []) if second != first]


def query(folder, text):
    return subprocess.run([sys.executable, "-m", "gyreflow", "query", "--env", "local",
                           str(folder), text], capture_output=True, text=True, timeout=300,
                          check=False)


def test_two_hop_queries_print_the_rows_of_a_plain_loop(tmp_path):
    x, edges = write_graph(tmp_path)
    paths = two_hops(edges)
    done = query(tmp_path, "MATCH (a:N)-[]->(b)-[]->(c) RETURN count(*) AS n")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == json.dumps({"n": len(paths)}) + "\n"
    done = query(tmp_path, "MATCH (a)-[]->(b)-[]->(c) WHERE a.x = 0 AND c.x > 4 "
                           "RETURN c.x AS x, count(*) AS n ORDER BY x")
    assert (done.returncode, done.stderr) == (0, "")
    counts = Counter(x[c] for a, _, c in paths if x[a] == 0 and x[c] > 4)
    assert done.stdout.splitlines() == [json.dumps({"x": key, "n": counts[key]})
                                        for key in sorted(counts)]


def test_explain_names_the_engine_and_why_a_query_runs_per_path():
    explained = subprocess.run([sys.executable, "-m", "gyreflow", "query", "--explain", "g",
                                "MATCH (a)-[]->(b)-[]->(c) RETURN count(*)"],
                               capture_output=True, text=True, timeout=300, check=False)
    assert explained.returncode == 0, explained.stderr
    assert explained.stdout.startswith("Array joins: per task a CSR of the edges;")
    assert explained.stdout.splitlines()[0].endswith("counted per task:")
    explained = subprocess.run([sys.executable, "-m", "gyreflow", "query", "--explain", "g",
                                "MATCH (a)-[r]->(b) RETURN r"],
                               capture_output=True, text=True, timeout=300, check=False)
    assert explained.stdout.splitlines()[0] == (
        "Traversal (one superstep per hop; partial matches travel as messages: a relationship "
        "variable the query returns, orders by or compares with another):")
