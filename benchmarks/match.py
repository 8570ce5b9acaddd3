"""MATCH queries: gyreflow's array joins against kuzu (an embedded Cypher database) on one random graph.

    python benchmarks/match.py [--vertices 20000] [--edges 100000] [--repeat 3]

Both engines answer the same queries on the same random directed graph (no self-loops) in the
same run; their rows are checked equal before a time counts. gyreflow matches relationships as
trails (no edge twice in a match), kuzu as walks, so the kuzu queries of more than two hops ask
for distinct edges themselves. "query" is the query's own time: gyreflow's slowest task's
matching plus turning the tasks' results into rows, kuzu's execute and fetch; "with loading"
adds building the graph (gyreflow's pipeline from Python lists, kuzu's COPY from CSV files).
Best of ``--repeat`` runs each.

The last row asks the 2-hop count of a script (``gyreflow sql``, ``Environment.sql``): the graph
loaded from text files by INSERT, the MATCH run as array joins in the script's operator. GeaFlow
merges paths that differ only in unnamed edges, so its count is of distinct (a, b, c), as is
kuzu's query there (``WITH DISTINCT``). "query" is the MATCH block's evaluation (the array joins
and the RETURN on the bindings' arrays) without building the graph from the rows the INSERTs
wrote (printed apart), "with loading" the whole script. ``--write-docs`` writes the
table to docs/benchmarks.md (section ``match``).
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


SQL_TWO_HOPS = ("SELECT count(*) FROM (MATCH (a:v)-[:e]->(b:v)-[:e]->(c:v) "
                "RETURN a.id AS x, b.id AS y, c.id AS z)")
KUZU_DISTINCT_TWO_HOPS = ("MATCH (a)-[]->(b)-[]->(c) WITH DISTINCT a.id AS x, b.id AS y, c.id AS z "
                          "RETURN count(*)")


def gyreflow_sql_run(vertices: list, edges: list, folder: str) -> tuple[list, float, float, float]:
    """``(rows, MATCH seconds, script seconds, seconds of the MATCH building the graph)`` of the
    2-hop count as a script."""
    from gyreflow.api import Environment
    from gyreflow.api.dsl import graph_queries as graphs

    nodes, rels = os.path.join(folder, "v.txt"), os.path.join(folder, "e.txt")
    with open(nodes, "w") as file:
        file.writelines(f"{vertex},{value['x']}\n" for vertex, value in vertices)
    with open(rels, "w") as file:
        file.writelines(f"{src},{dst}\n" for src, dst, _ in edges)
    script = (
        f"CREATE TABLE vt (id bigint, x int) WITH (type='file', geaflow.dsl.file.path='{nodes}');\n"
        f"CREATE TABLE et (src bigint, dst bigint) WITH (type='file', "
        f"geaflow.dsl.file.path='{rels}');\n"
        "CREATE GRAPH g (Vertex v (id bigint ID, x int), "
        "Edge e (src bigint SOURCE ID, dst bigint DESTINATION ID)) WITH (storeType='memory');\n"
        "INSERT INTO g.v SELECT id, x FROM vt;\nINSERT INTO g.e SELECT src, dst FROM et;\n"
        f"USE GRAPH g;\n{SQL_TWO_HOPS};\n")
    spent, building = [0.0], [0.0]
    evaluate, load = graphs.evaluate_gql, graphs.load_graph

    def timed(query, catalog, *args):
        started = time.perf_counter()
        try:
            return evaluate(query, catalog, *args)
        finally:
            spent[0] += time.perf_counter() - started

    def loaded(name, catalog, *args):
        started = time.perf_counter()
        try:
            return load(name, catalog, *args)
        finally:
            building[0] += time.perf_counter() - started

    graphs.evaluate_gql = timed  # the catalog looks it up when a MATCH block is read
    graphs.load_graph = loaded
    try:
        started = time.perf_counter()
        result = Environment.local(progress=False).sql(script)
        total = time.perf_counter() - started
    finally:
        graphs.evaluate_gql, graphs.load_graph = evaluate, load
    rows = [row for task in result.tasks.values() for name in task.collected
            for row in task.output(name)]
    return rows, spent[0], total, building[0]


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
    parser.add_argument("--write-docs", action="store_true",
                        help="write the table to docs/benchmarks.md (section match)")
    args = parser.parse_args()
    vertices, edges = random_graph(args.vertices, args.edges)
    print(f"random directed graph: {args.vertices:,} vertices, {args.edges:,} edges; "
          f"best of {args.repeat}\n")
    lines = ["| query | rows | gyreflow query s | gyreflow with loading s | kuzu query s | "
             "kuzu with loading s |", "|---|---:|---:|---:|---:|---:|"]
    print("\n".join(lines))
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
            lines.append(_line(name, rows, best, load))
            print(lines[-1])
        best, block = [float("inf")] * 3, (float("inf"), 0.0)
        for _ in range(args.repeat):
            rows, query, total, building = gyreflow_sql_run(vertices, edges, folder)
            want, kuzu_query = kuzu_run(connection, KUZU_DISTINCT_TWO_HOPS)
            if Counter(rows) != Counter(want):
                msg = f"gyreflow sql and kuzu disagree ({rows[:3]} vs {want[:3]})"
                raise SystemExit(msg)
            # the query without building the graph from the inserted rows (loading)
            best = [min(best[0], query - building), min(best[1], total), min(best[2], kuzu_query)]
            block = min(block, (query, building))
        lines.append(_line("2-hop count, `gyreflow sql` (distinct a, b, c)", rows, best, load))
        print(lines[-1])
        print(f"\nthe script's MATCH block: {block[0]:.3f} s, of which {block[1]:.3f} s building the graph")
    if args.write_docs:
        _write_docs(args, lines, block)


def _line(name: str, rows: list, best: list, load: float) -> str:
    shown = rows[0][0] if len(rows) == 1 and len(rows[0]) == 1 else f"{len(rows)} rows"
    shown = f"{shown:,}" if isinstance(shown, int) else shown
    return (f"| {name} | {shown} | {best[0]:.3f} | {best[1]:.2f} | {best[2]:.3f} | "
            f"{best[2] + load:.2f} |")


def _write_docs(args, lines: list, block: tuple) -> None:
    from _common import command_line, machine_line, package_version, update_docs_section

    text = f"""\
`{command_line()}` (`--vertices {args.vertices} --edges {args.edges} --repeat {args.repeat}`):
gyreflow's MATCH as array joins (`Environment.local()`, one task; see docs/graphs.md, *How MATCH
runs*) against kuzu {package_version("kuzu")} (in-memory database) on one random directed graph
without self-loops, in the same run, rows checked equal before a time counts. gyreflow matches
relationships as trails (no edge twice in a match), kuzu as walks: the kuzu queries of the 3-hop
and the 1..3 rows ask for distinct edges themselves (`id(e1) <> id(e3)`, `is_trail(p)`). *Query*:
gyreflow's slowest task's matching plus making the rows from the tasks' results; kuzu's execute
and fetch. *With loading*: gyreflow's whole pipeline from Python lists (graph state, CSR,
supersteps), kuzu's query plus `COPY` from CSV. Best of {args.repeat}; {machine_line()}.

The last row is the same 2-hop count in a script (`gyreflow sql`): the graph loaded by INSERT from
text files, the MATCH run as array joins in the script's operator (docs/dsl.md, *How it is
built*). GeaFlow merges paths that differ only in unnamed edges: the count is of distinct (a, b,
c), as kuzu's `WITH DISTINCT` query there. *Query*: the MATCH block's evaluation (array joins
and the RETURN, computed on the bindings' arrays) without building the graph from the rows the
INSERTs wrote; *with loading*: the whole script. The MATCH block with building the graph took
{block[0]:.3f} s ({block[1]:.3f} s of it building the graph).

{chr(10).join(lines)}

Measured in separate runs on the same machine: the same 2-hop count as a per-path traversal
(partial matches as Python messages, the engine before array joins) took 43 s with loading;
`gyreflow query --env local` on the graph as JSON lines takes 4.4 s for the whole command (reading
120,000 JSON lines included). kuzu's 1..3 count as walks (`MATCH (a)-[*1..3]->(b) RETURN
count(*)`, 3,093,056: 24 walks repeat an edge) took 7.1 s; `is_trail` adds to that. The script's
2-hop count on the row matcher (array joins switched off) took 15.3 s for the MATCH block. With the
array joins but the RETURN over a Python row per binding (before `graph_returns`) it took 5.06 s
(7.53 s the whole script): making the 499,116 binding rows and the RETURN's SELECT over them.
"""
    update_docs_section("match", text)


if __name__ == "__main__":
    main()
