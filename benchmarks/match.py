"""MATCH queries: gyreflow's array joins against kuzu (an embedded Cypher database) on one random graph.

    python benchmarks/match.py [--vertices 20000] [--edges 100000] [--repeat 3]

Both engines answer the same queries on the same random directed graph (no self-loops) in the
same run; their rows are checked equal before a time counts. gyreflow matches relationships as
trails (no edge twice in a match), kuzu as walks, so the kuzu queries of more than two hops ask
for distinct edges themselves. "query" is the query's own time: gyreflow's slowest task's
matching plus turning the tasks' results into rows, kuzu's execute and fetch; "with loading"
adds building the graph (gyreflow's pipeline from Python lists, kuzu's COPY from CSV files).
Best of ``--repeat`` runs each.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import tempfile
import time
from collections import Counter

QUERIES = [
    ("2-hop count",
     "MATCH (a)-[]->(b)-[]->(c) RETURN count(*)",
     "MATCH (a)-[]->(b)-[]->(c) RETURN count(*)"),
    ("filtered 2-hop",
     "MATCH (a)-[]->(b)-[]->(c) WHERE a.x < 10 AND c.x >= 50 RETURN count(*)",
     "MATCH (a)-[]->(b)-[]->(c) WHERE a.x < 10 AND c.x >= 50 RETURN count(*)"),
    ("3-hop DISTINCT",
     "MATCH (a)-[]->(b)-[]->(c)-[]->(d) WHERE a.x = 0 RETURN DISTINCT d.x",
     "MATCH (a)-[e1]->(b)-[e2]->(c)-[e3]->(d) WHERE a.x = 0 AND id(e1) <> id(e3) "
     "RETURN DISTINCT d.x"),
    ("1..3 hops count",
     "MATCH (a)-[*1..3]->(b) RETURN count(*)",
     "MATCH p = (a)-[*1..3]->(b) WHERE is_trail(p) RETURN count(*)"),
]


def random_graph(vertices: int, edges: int, seed: int = 1) -> tuple[list, list]:
    rng = random.Random(seed)
    found = []
    while len(found) < edges:
        src, dst = rng.randrange(vertices), rng.randrange(vertices)
        if src != dst:
            found.append((src, dst, {}))
    return [(i, {"x": i % 100}) for i in range(vertices)], found


def gyreflow_run(vertices: list, edges: list, text: str) -> tuple[list, float, float]:
    """``(rows, query seconds, seconds with loading)`` of one local run."""
    from gyreflow.api import Environment
    from gyreflow.api.graph import GraphView
    from gyreflow.api.graph.query.run import MatchRun

    started = time.perf_counter()
    run = MatchRun(text, {}, [vertex for vertex, _ in vertices])
    assert run.plan is not None, run.fallback
    pipeline = Environment.local(progress=False).pipeline("match")

    @pipeline.task
    def match(ctx):
        graph = GraphView(ctx.source(vertices), ctx.source(edges))
        run.stream(ctx, graph).collect("matches")

    output = pipeline.execute(fresh=True).output("matches")
    rows = run.rows(output, dict(vertices))
    return [tuple(row.values()) for row in rows], run.seconds, time.perf_counter() - started


def kuzu_load(vertices: list, edges: list, folder: str):
    import kuzu

    nodes, rels = os.path.join(folder, "v.csv"), os.path.join(folder, "e.csv")
    with open(nodes, "w", newline="") as file:
        csv.writer(file).writerows((vertex, value["x"]) for vertex, value in vertices)
    with open(rels, "w", newline="") as file:
        csv.writer(file).writerows((src, dst) for src, dst, _ in edges)
    started = time.perf_counter()
    connection = kuzu.Connection(kuzu.Database(":memory:"))
    connection.execute("CREATE NODE TABLE V(id INT64, x INT64, PRIMARY KEY (id))")
    connection.execute("CREATE REL TABLE E(FROM V TO V)")
    connection.execute(f"COPY V FROM '{nodes}'")
    connection.execute(f"COPY E FROM '{rels}'")
    return connection, time.perf_counter() - started


def kuzu_run(connection, text: str) -> tuple[list, float]:
    started = time.perf_counter()
    result = connection.execute(text)
    rows = []
    while result.has_next():
        rows.append(tuple(result.get_next()))
    return rows, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vertices", type=int, default=20_000)
    parser.add_argument("--edges", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    vertices, edges = random_graph(args.vertices, args.edges)
    print(f"random directed graph: {args.vertices:,} vertices, {args.edges:,} edges; "
          f"best of {args.repeat}\n")
    print("| query | rows | gyreflow query s | gyreflow with loading s | kuzu query s | "
          "kuzu with loading s |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as folder:
        loads, connection = [], None
        for _ in range(args.repeat):
            connection, seconds = kuzu_load(vertices, edges, folder)
            loads.append(seconds)
        load = min(loads)
        for name, ours, theirs in QUERIES:
            best = [float("inf")] * 3
            for _ in range(args.repeat):
                rows, query, total = gyreflow_run(vertices, edges, ours)
                want, kuzu_query = kuzu_run(connection, theirs)
                if Counter(rows) != Counter(want):
                    msg = f"{name}: gyreflow and kuzu disagree ({rows[:3]} vs {want[:3]})"
                    raise SystemExit(msg)
                best = [min(best[0], query), min(best[1], total), min(best[2], kuzu_query)]
            shown = rows[0][0] if len(rows) == 1 and len(rows[0]) == 1 else f"{len(rows)} rows"
            print(f"| {name} | {shown:,} | {best[0]:.3f} | {best[1]:.2f} | {best[2]:.3f} | "
                  f"{best[2] + load:.2f} |" if isinstance(shown, int) else
                  f"| {name} | {shown} | {best[0]:.3f} | {best[1]:.2f} | {best[2]:.3f} | "
                  f"{best[2] + load:.2f} |")


if __name__ == "__main__":
    main()
