"""gyreflow on a Spark standalone cluster: word count and PageRank against hand-written PySpark
programs, one worker against two, and what a window costs on the cluster.

One run starts a cluster with ``scripts/spark-cluster.sh`` (a master and two workers of one core
each on 127.0.0.1, from the installed pyspark) unless ``--master`` names one, then runs each part as
a Spark application of its own (a child process of this script):

1. two workers: word count over a text file (gyreflow batch, an RDD program, a DataFrame program),
   PageRank (gyreflow, an RDD program, a DataFrame program), and the per-window time of a stream of
   small windows (a one-shuffle word count, a union of two streams, a join of two streams) with
   ``scheduler.max_flying_windows`` 1 and 2;
2. one worker (``spark.cores.max = 1``): the three PageRank programs again, so that what a second
   worker buys gyreflow is seen next to what it buys PySpark's own programs on the same machine.

Every result is checked against a plain-Python computation (``collections.Counter``, the plain
PageRank loop of ``graph.py``) before its time counts. gyreflow keeps its state in a checkpoint
directory (``state.checkpoint_url``), as a cluster requires; the peers keep none.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from operator import add
from pathlib import Path

from _common import (
    DEFAULT_SEED,
    command_line,
    format_ratio,
    format_seconds,
    interleaved_best_of,
    machine_line,
    print_table,
    update_docs_section,
    word_lines,
)
from graph import DAMPING, check_ranks, plain_pagerank, random_edges
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = ROOT / "scripts" / "spark-cluster.sh"
PAGERANK_TWO_WORKERS_TARGET = 1.6  # PageRank on two workers >= 1.6x faster than on one
OVERHEAD_TARGET = 0.3  # seconds per window of the one-shuffle word count
SHAPE_TARGET = 1.5  # join and union windows at most 1.5x a plain one
OVERLAP_TARGET = 1.4  # max_flying_windows 2 over 1

err = Console(stderr=True)


# ---------------------------------------------------------------------------------------------
# The child: one Spark application


def gyreflow_env(master: str, cores: int, checkpoints: str, parallelism: int, flying: int = 2):
    from gyreflow.api import Environment

    return Environment.spark(master=master, parallelism=parallelism, progress=False, config={
        "state.backend": "rocksdb", "state.checkpoint_url": checkpoints,
        "scheduler.max_flying_windows": flying,
        "spark.conf": {"spark.cores.max": str(cores), "spark.executor.memory": "1g",
                       "spark.sql.shuffle.partitions": str(2 * cores),
                       "spark.ui.enabled": "false"}})


def word_count_cases(env, text: str, expected: dict) -> dict:
    from pyspark.sql import functions as F  # noqa: N812 - the name PySpark documents

    from gyreflow.api import FileSource

    spark = env.session()
    sc = spark.sparkContext

    def gyreflow_batch() -> dict:
        pipeline = env.pipeline("wordcount-cluster")

        @pipeline.task
        def wordcount(ctx):
            ctx.source(FileSource(text)).flat_map(str.split).key_by().count().collect("counts")

        return dict(pipeline.execute(fresh=True)["wordcount"].output("counts"))

    def rdd() -> dict:
        return dict(sc.textFile(text, 2).flatMap(str.split).map(lambda w: (w, 1))
                    .reduceByKey(add).collect())

    def dataframe() -> dict:
        df = spark.read.text(text)
        rows = (df.select(F.explode(F.split("value", " ")).alias("word"))
                .where(F.col("word") != "").groupBy("word").count().collect())
        return {row["word"]: row["count"] for row in rows}

    def check(name):
        def verify(result) -> None:
            if result != expected:
                msg = f"word count by {name} differs from collections.Counter"
                raise AssertionError(msg)
        return verify

    cases = {"gyreflow (batch)": gyreflow_batch, "PySpark RDD": rdd, "PySpark DataFrame": dataframe}
    return cases, {name: check(name) for name in cases}


def pagerank_cases(env, vertices_path: str, edges_path: str, iterations: int, parallelism: int,
                   peers: bool) -> dict:
    from gyreflow.api import FileSource
    from gyreflow.api.graph import GraphView
    from gyreflow.api.graph_algorithms import pagerank

    spark = env.session()
    sc = spark.sparkContext

    def gyreflow_pagerank() -> dict:
        pipeline = env.pipeline("pagerank-cluster")

        @pipeline.task
        def ranks(ctx):
            vertices = ctx.source(FileSource(vertices_path), name="vertices").map(int)
            edges = ctx.source(FileSource(edges_path), name="edges").map(_edge)
            graph = GraphView(vertices, edges, directed=True, parallelism=parallelism)
            pagerank(graph, DAMPING, iterations).collect("ranks")

        return dict(pipeline.execute(fresh=True)["ranks"].output("ranks"))

    def rdd_pagerank() -> dict:
        vertices = sc.textFile(vertices_path, parallelism).map(int).cache()
        n = vertices.count()
        links = (sc.textFile(edges_path, parallelism).map(_edge).groupByKey(parallelism)
                 .mapValues(list).cache())
        ranks = vertices.map(lambda v: (v, 1.0 / n))
        for step in range(iterations):
            contributions = links.join(ranks).flatMap(
                lambda item: [(t, item[1][1] / len(item[1][0])) for t in item[1][0]])
            with_links = links.join(ranks).map(lambda item: item[1][1]).sum()
            dangling = ranks.values().sum() - with_links
            base = (1.0 - DAMPING) / n + DAMPING * dangling / n
            incoming = contributions.reduceByKey(add, parallelism)
            ranks = vertices.map(lambda v: (v, 0.0)).union(incoming).reduceByKey(add, parallelism) \
                .mapValues(lambda s, base=base: base + DAMPING * s).cache()
            if step % 5 == 4:
                ranks.localCheckpoint()
            ranks.count()
        return dict(ranks.collect())

    def dataframe_pagerank() -> dict:
        from pyspark.sql import functions as F  # noqa: N812 - the name PySpark documents

        vertices = spark.read.text(vertices_path).select(F.col("value").cast("long").alias("v"))
        vertices = vertices.cache()
        n = vertices.count()
        parts = F.split("value", " ")
        edges = spark.read.text(edges_path).select(parts[0].cast("long").alias("src"),
                                                    parts[1].cast("long").alias("dst"))
        degree = edges.groupBy("src").count().withColumnRenamed("count", "deg")
        edges = edges.join(degree, "src").cache()
        ranks = vertices.select("v", F.lit(1.0 / n).alias("rank"))
        for step in range(iterations):
            joined = edges.join(ranks.withColumnRenamed("v", "src"), "src")
            incoming = joined.groupBy("dst").agg(F.sum(F.col("rank") / F.col("deg")).alias("s"))
            total = ranks.agg(F.sum("rank")).first()[0]
            with_links = (ranks.join(degree.withColumnRenamed("src", "v"), "v")
                          .agg(F.sum("rank")).first()[0])
            base = (1.0 - DAMPING) / n + DAMPING * (total - with_links) / n
            ranks = (vertices.join(incoming.withColumnRenamed("dst", "v"), "v", "left")
                     .select("v", (F.lit(base) + F.lit(DAMPING) * F.coalesce("s", F.lit(0.0)))
                             .alias("rank")))
            ranks = ranks.localCheckpoint() if step % 5 == 4 else ranks.cache()
        return {row["v"]: row["rank"] for row in ranks.collect()}

    cases = {"gyreflow": gyreflow_pagerank}
    if peers:
        cases["PySpark RDD"] = rdd_pagerank
        cases["PySpark DataFrame"] = dataframe_pagerank
    return cases


def _edge(line: str) -> tuple[int, int]:
    src, dst = line.split()
    return int(src), int(dst)


SHAPES = ("word count", "enrich", "union", "join")
ENRICH_SECONDS = 0.001  # the remote call of the latency-bound stream: 60 words, 60 ms a window


def enrich(word: str) -> str:
    """Stands for a lookup in a remote service: the window waits, the CPU does not work."""
    time.sleep(ENRICH_SECONDS)
    return word


def window_costs(master: str, cores: int, workdir: str, windows: int) -> dict:
    """Seconds per window of small-window streams, by shape and by windows in flight."""
    from gyreflow.api import SizeTumblingWindow

    lines = [f"w{i % 50} w{(i * 7) % 50} w{(i * 3) % 40}" for i in range(20 * windows)]
    out = {}
    for flying in (1, 2):
        env = gyreflow_env(master, cores, tempfile.mkdtemp(dir=workdir), 1, flying)
        for shape in SHAPES:
            def build(pipeline, shape=shape):
                @pipeline.task
                def stream(ctx):
                    words = ctx.source(lines, SizeTumblingWindow(20)).flat_map(str.split)
                    other = ctx.source(lines, SizeTumblingWindow(20)).flat_map(str.split)
                    if shape == "word count":
                        words.key_by().count().collect("out")
                    elif shape == "enrich":  # latency-bound: a remote call per record
                        words.map(enrich).key_by().count().collect("out")
                    elif shape == "union":
                        words.union(other).key_by().count().collect("out")
                    else:
                        pairs = other.map(lambda w: (w, 1)).key_by(lambda kv: kv[0])
                        (words.map(lambda w: (w, 1)).key_by(lambda kv: kv[0]).join(pairs)
                         .collect("out"))
                return pipeline

            build(env.pipeline(f"warm-{shape}")).execute(fresh=True)
            started = time.perf_counter()
            result = build(env.pipeline(f"windows-{shape}")).execute(fresh=True)
            seconds = time.perf_counter() - started
            count = len(result["stream"].windows)
            if count != windows:
                msg = f"{shape}: {count} windows, expected {windows}"
                raise AssertionError(msg)
            out[f"{shape}|{flying}"] = seconds / count
    return out


def child(args) -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    data = json.loads(Path(args.child).read_text())
    report: dict = {"cores": args.cores, "times": {}}
    workdir = data["workdir"]
    if args.part == "windows":  # a Spark application of its own, like every part
        report["windows"] = window_costs(args.master, args.cores, workdir, args.windows)
        Path(args.report).write_text(json.dumps(report))
        return 0
    env = gyreflow_env(args.master, args.cores, tempfile.mkdtemp(dir=workdir), args.cores)
    env.session().sparkContext.parallelize(range(4), 4).map(abs).collect()  # warm up the executors
    expected_ranks = {int(k): v for k, v in json.loads(Path(data["ranks"]).read_text()).items()}

    def progress(rep: int, name: str, seconds: float) -> None:
        err.print(f"[dim]{args.cores} core(s), repetition {rep}: {name}: {seconds:.2f} s[/dim]")

    if args.cores > 1:
        expected_words = json.loads(Path(data["counts"]).read_text())
        cases, checks = word_count_cases(env, data["text"], expected_words)
        timings = interleaved_best_of(cases, args.repeat, check=checks, on_run=progress)
        report["times"]["wordcount"] = {name: t.best for name, t in timings.items()}
    cases = pagerank_cases(env, data["vertices"], data["edges"], data["iterations"], args.cores,
                           peers=True)
    checks = {name: (lambda result, name=name: check_ranks(name, result, expected_ranks))
              for name in cases}
    timings = interleaved_best_of(cases, args.repeat, check=checks, on_run=progress)
    report["times"]["pagerank"] = {name: t.best for name, t in timings.items()}
    Path(args.report).write_text(json.dumps(report))
    return 0


# ---------------------------------------------------------------------------------------------
# The parent: inputs, cluster, children, tables


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, default=2_000_000, help="words of the word count")
    parser.add_argument("--vertices", type=int, default=100_000, help="PageRank vertices")
    parser.add_argument("--edges", type=int, default=1_000_000, help="PageRank edges")
    parser.add_argument("--iterations", type=int, default=20, help="PageRank iterations")
    parser.add_argument("--windows", type=int, default=30, help="small windows per stream")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the best counts")
    parser.add_argument("--master", default=None, help="a running cluster (default: start one)")
    parser.add_argument("--write-docs", action="store_true",
                        help="update the 'cluster' section of docs/benchmarks.md")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cores", type=int, default=2, help=argparse.SUPPRESS)
    parser.add_argument("--report", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--part", default="engines", choices=("engines", "windows"),
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def prepare_inputs(args, workdir: Path) -> Path:
    lines = word_lines(args.words)
    text = workdir / "words.txt"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    counts = Counter(word for line in lines for word in line.split())
    (workdir / "counts.json").write_text(json.dumps(counts))
    vertices = list(range(args.vertices))
    edges = random_edges(args.vertices, args.edges, DEFAULT_SEED)
    (workdir / "vertices.txt").write_text("\n".join(map(str, vertices)) + "\n", encoding="utf-8")
    (workdir / "edges.txt").write_text("\n".join(f"{a} {b}" for a, b in edges) + "\n",
                                       encoding="utf-8")
    err.print("[dim]plain-Python PageRank (the reference)...[/dim]")
    started = time.perf_counter()
    ranks = plain_pagerank(vertices, edges, DAMPING, args.iterations)
    loop_seconds = time.perf_counter() - started
    (workdir / "ranks.json").write_text(json.dumps(ranks))
    spec = workdir / "inputs.json"
    spec.write_text(json.dumps({
        "workdir": str(workdir), "text": str(text), "counts": str(workdir / "counts.json"),
        "vertices": str(workdir / "vertices.txt"), "edges": str(workdir / "edges.txt"),
        "ranks": str(workdir / "ranks.json"), "iterations": args.iterations,
        "loop_seconds": loop_seconds}))
    return spec


def run_child(args, spec: Path, master: str, cores: int, workdir: Path, part: str = "engines") -> dict:
    report = workdir / f"report-{cores}-{part}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--child", str(spec), "--master",
               master, "--cores", str(cores), "--report", str(report), "--repeat", str(args.repeat),
               "--windows", str(args.windows), "--part", part]
    subprocess.run(command, check=True, cwd=ROOT / "benchmarks")
    return json.loads(report.read_text())


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        return child(args)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="gyreflow-cluster-bench-"))
    cluster_dir = workdir / "cluster"
    master = args.master
    try:
        if master is None:
            err.print("[dim]starting a two-worker Spark standalone cluster...[/dim]")
            out = subprocess.run(["bash", str(CLUSTER_SCRIPT), "start", str(cluster_dir), "2"],
                                 capture_output=True, text=True, check=True,
                                 env={**os.environ, "PYTHON": sys.executable})
            master = out.stdout.strip().split("=", 1)[1]
        spec = prepare_inputs(args, workdir)
        two = run_child(args, spec, master, 2, workdir)
        two["windows"] = run_child(args, spec, master, 2, workdir, "windows")["windows"]
        one = run_child(args, spec, master, 1, workdir)
    finally:
        if args.master is None:
            subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(cluster_dir)], check=False)
        shutil.rmtree(workdir, ignore_errors=True)
    total = time.perf_counter() - started
    words = two["times"]["wordcount"]
    rows = [[name, format_seconds(s), format_ratio(words["gyreflow (batch)"] / s)]
            for name, s in words.items()]
    wc_table = print_table(f"Word count, {args.words:,} words, two workers",
                           ["engine", "seconds", "gyreflow time / this"], rows)
    ranks = two["times"]["pagerank"]
    alone = one["times"]["pagerank"]
    rows = [[name, format_seconds(alone[name]), format_seconds(s), format_ratio(alone[name] / s),
             format_ratio(ranks["gyreflow"] / s)]
            for name, s in ranks.items()]
    pr_table = print_table(f"PageRank, {args.vertices:,} vertices, {args.edges:,} edges, "
                           f"{args.iterations} iterations",
                           ["engine", "one worker (s)", "two workers (s)", "two workers' speed-up",
                            "gyreflow (two workers) time / this"], rows)
    windows = two["windows"]
    rows = [[shape, format_seconds(windows[f"{shape}|1"]), format_seconds(windows[f"{shape}|2"]),
             format_ratio(windows[f"{shape}|1"] / windows["word count|1"])]
            for shape in SHAPES]
    win_table = print_table(f"Seconds per window, {args.windows} windows of 20 lines",
                            ["stream", "1 window in flight", "2 in flight", "vs word count"], rows)
    speedup = one["times"]["pagerank"]["gyreflow"] / ranks["gyreflow"]
    overhead = windows["word count|1"]
    shapes = max(windows["union|1"], windows["join|1"]) / overhead
    overlap = windows["enrich|1"] / windows["enrich|2"]
    targets = [
        f"PageRank on two workers >= {PAGERANK_TWO_WORKERS_TARGET}x one worker: {speedup:.2f}x -> "
        f"{'met' if speedup >= PAGERANK_TWO_WORKERS_TARGET else 'NOT met'}",
        f"one-shuffle word count <= {OVERHEAD_TARGET} s per window: {overhead:.3f} s -> "
        f"{'met' if overhead <= OVERHEAD_TARGET else 'NOT met'}",
        f"join and union <= {SHAPE_TARGET}x a word-count window: {shapes:.2f}x -> "
        f"{'met' if shapes <= SHAPE_TARGET else 'NOT met'}",
        f"max_flying_windows 2 >= {OVERLAP_TARGET}x the throughput of 1 on a latency-bound stream "
        f"(enrich): {overlap:.2f}x -> "
        f"{'met' if overlap >= OVERLAP_TARGET else 'NOT met'}",
    ]
    for line in targets:
        err.print(line)
    if args.write_docs:
        today = datetime.date.today().isoformat()
        content = "\n\n".join([
            "## Spark standalone cluster",
            "A master and two workers of one core and 1 GiB each on 127.0.0.1 "
            "(`scripts/spark-cluster.sh`), each worker with its own folders; every part is a Spark "
            "application of its own. gyreflow keeps its state in a checkpoint directory "
            "(`state.checkpoint_url`); the hand-written PySpark programs keep none. Every result was "
            "checked against `collections.Counter` or the plain PageRank loop before its time "
            "counted.",
            f"Run on {today} with `{command_line()}` ({total:.0f} s in all).  \n{machine_line()}",
            f"### Word count, {args.words:,} words, two workers", wc_table,
            f"### PageRank, {args.vertices:,} vertices, {args.edges:,} edges, {args.iterations} "
            "iterations", pr_table,
            f"### Seconds per window, {args.windows} windows of 20 lines", win_table,
            "Targets:\n\n" + "\n".join(f"- {t}" for t in targets)])
        path = update_docs_section("cluster", content)
        err.print(f"[dim]updated {path}[/dim]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
