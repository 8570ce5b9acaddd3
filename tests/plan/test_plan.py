"""Plans: PipelineGraph validation, operator chaining, window groups and cycles and fingerprints
(``explain`` is tested in tests/plan/test_explain.py)."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

from gyreflow.api import AllWindow, CollectionSource
from gyreflow.plan.execution import ExecutionGraph, GroupKind, build_execution_graph
from gyreflow.plan.graph import Partitioning, PipelineEdge, PipelineGraph, PipelineVertex
from gyreflow.plan.operators import FilterSpec, MapSpec, SinkSpec, SourceSpec

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
SAMPLE = ROOT / "examples" / "data" / "sample.txt"

F = Partitioning.FORWARD
K = Partitioning.KEY
B = Partitioning.BROADCAST
R = Partitioning.REBALANCE


def load_word_count():
    path = ROOT / "examples" / "word_count.py"
    spec = importlib.util.spec_from_file_location("word_count_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def plan_of(env, fn, name: str = "p") -> tuple[PipelineGraph, ExecutionGraph]:
    """Register ``fn`` as the only task of a new pipeline and return its two plans."""
    pipeline = env.pipeline(name)
    pipeline.task(fn)
    [(task_name, graph, execution)] = pipeline.plans()
    assert task_name == fn.__name__
    assert isinstance(graph, PipelineGraph) and isinstance(execution, ExecutionGraph)
    return graph, execution


def chains(execution: ExecutionGraph) -> list[list[str]]:
    return [[v.name for v in ev.chain] for ev in execution.vertices]


def edges_by_name(graph: PipelineGraph) -> list[tuple[str, str, Partitioning, int]]:
    name = {v.id: v.name for v in graph.vertices}
    return [(name[e.source], name[e.target], e.partitioning, e.ordinal) for e in graph.edges]


def key(record):
    return record


def first(record):
    return record[0]


# --- PipelineGraph validation ---------------------------------------------------------------------


def vertex(vid: int, name: str, parallelism: int = 1, spec=None) -> PipelineVertex:
    return PipelineVertex(vid, name, spec or MapSpec(str), parallelism)


def test_graph_rejects_duplicate_names():
    with pytest.raises(ValueError, match=r"unique within a pipeline task; repeated: \['m'\]"):
        PipelineGraph((vertex(0, "m"), vertex(1, "m"), vertex(2, "x")), ())


def test_graph_rejects_duplicate_ids():
    with pytest.raises(ValueError, match="duplicate vertex ids"):
        PipelineGraph((vertex(0, "a"), vertex(0, "b")), ())


def test_graph_rejects_forward_edge_between_unequal_parallelism():
    vertices = (vertex(0, "a", 2), vertex(1, "b", 3))
    with pytest.raises(ValueError, match="forward edge 0->1 joins unequal parallelism"):
        PipelineGraph(vertices, (PipelineEdge(0, 1, F),))
    # The same edge is fine as a rebalance, or as forward between equal parallelism.
    PipelineGraph(vertices, (PipelineEdge(0, 1, R),))
    PipelineGraph((vertex(0, "a", 3), vertex(1, "b", 3)), (PipelineEdge(0, 1, F),))


def test_graph_rejects_key_edge_without_key_function():
    vertices = (vertex(0, "a"), vertex(1, "b"))
    with pytest.raises(ValueError, match="key edge 0->1 has no key function"):
        PipelineGraph(vertices, (PipelineEdge(0, 1, K),))
    PipelineGraph(vertices, (PipelineEdge(0, 1, K, key_fn=key),))


def test_graph_rejects_edge_to_unknown_vertex():
    with pytest.raises(ValueError, match="edge 0->5 names a vertex that is not in the plan"):
        PipelineGraph((vertex(0, "a"),), (PipelineEdge(0, 5, F),))


def test_graph_rejects_cycles_outside_iterations():
    graph = PipelineGraph(
        (vertex(0, "a"), vertex(1, "b")), (PipelineEdge(0, 1, F), PipelineEdge(1, 0, F))
    )
    with pytest.raises(ValueError, match="cycle outside an iteration"):
        graph.topological_order()


def test_vertex_lookup_and_edges():
    graph = PipelineGraph(
        (vertex(2, "c"), vertex(0, "a"), vertex(1, "b")),
        (PipelineEdge(0, 2, F, ordinal=1), PipelineEdge(1, 2, F, ordinal=0), PipelineEdge(0, 1, F)),
    )
    assert graph.vertex(1).name == "b"
    with pytest.raises(KeyError, match="no vertex 9"):
        graph.vertex(9)
    assert [(e.source, e.ordinal) for e in graph.inputs(2)] == [(1, 0), (0, 1)]
    assert [e.target for e in graph.outputs(0)] == [2, 1]
    assert [v.name for v in graph.topological_order()] == ["a", "b", "c"]
    assert graph.sources() == []


def test_builder_requires_a_sink(make_env):
    pipeline = make_env().pipeline("p")

    @pipeline.task
    def no_sink(ctx):
        ctx.source([1]).map(str)

    with pytest.raises(ValueError, match="defines no sink"):
        pipeline.plans()


def test_builder_drops_operators_that_feed_no_sink(make_env):
    def dangling(ctx):
        src = ctx.source([1], name="src")
        src.map(str).with_name("unused")
        src.map(repr).with_name("used").collect("out").with_name("out")

    graph, execution = plan_of(make_env(), dangling)
    assert sorted(v.name for v in graph.vertices) == ["out", "src", "used"]
    assert chains(execution) == [["src", "used", "out"]]


# --- chaining -------------------------------------------------------------------------------------


def test_forward_equal_parallelism_single_input_output_fuses(make_env):
    def straight(ctx):
        (
            ctx.source([1, 2], name="src")
            .map(str).with_name("m")
            .filter(bool).with_name("f")
            .flat_map(list).with_name("fm")
            .collect("out").with_name("out")
        )

    graph, execution = plan_of(make_env(parallelism=3), straight)
    assert chains(execution) == [["src", "m", "f", "fm", "out"]]
    assert execution.edges == ()
    assert execution.vertices[0].parallelism == 3
    assert execution.vertices[0].name == "src -> m -> f -> fm -> out"
    assert execution.vertices[0].is_source
    assert len(execution.tasks()) == 3
    assert [t.name for t in execution.tasks()] == [
        "src -> m -> f -> fm -> out[1/3]",
        "src -> m -> f -> fm -> out[2/3]",
        "src -> m -> f -> fm -> out[3/3]",
    ]


def test_key_edge_breaks_chain(make_env):
    def keyed(ctx):
        (
            ctx.source([1, 2], name="src")
            .map(str).with_name("m")
            .key_by(key)
            .reduce(max).with_name("r")
            .collect("out").with_name("out")
        )

    graph, execution = plan_of(make_env(), keyed)
    assert edges_by_name(graph) == [("src", "m", F, 0), ("m", "r", K, 0), ("r", "out", F, 0)]
    assert graph.edges[1].key_fn is key
    assert chains(execution) == [["src", "m"], ["r", "out"]]
    assert [(e.source, e.target, e.partitioning, e.key_fn) for e in execution.edges] == [
        (0, 1, K, key)
    ]


def test_broadcast_edge_breaks_chain(make_env):
    def broadcast(ctx):
        ctx.source([1], name="src").broadcast().map(str).with_name("m").collect().with_name("out")

    graph, execution = plan_of(make_env(parallelism=2), broadcast)
    assert edges_by_name(graph) == [("src", "m", B, 0), ("m", "out", F, 0)]
    assert chains(execution) == [["src"], ["m", "out"]]


def test_parallelism_change_becomes_rebalance_and_breaks_chain(make_env):
    def rescaled(ctx):
        (
            ctx.source([1], name="src")
            .map(str).with_name("m").with_parallelism(2)
            .filter(bool).with_name("f").with_parallelism(2)
            .collect().with_name("out")
        )

    graph, execution = plan_of(make_env(parallelism=1), rescaled)
    assert edges_by_name(graph) == [("src", "m", R, 0), ("m", "f", F, 0), ("f", "out", R, 0)]
    assert chains(execution) == [["src"], ["m", "f"], ["out"]]
    assert [ev.parallelism for ev in execution.vertices] == [1, 2, 1]
    assert [(e.source, e.target, e.partitioning) for e in execution.edges] == [(0, 1, R), (1, 2, R)]


def test_union_breaks_chain_but_its_output_chains(make_env):
    def unioned(ctx):
        a = ctx.source([1], name="a")
        b = ctx.source([2], name="b")
        a.union(b).with_name("u").map(str).with_name("m").collect().with_name("out")

    graph, execution = plan_of(make_env(), unioned)
    assert edges_by_name(graph) == [("a", "u", F, 0), ("b", "u", F, 1), ("u", "m", F, 0),
                                    ("m", "out", F, 0)]
    assert chains(execution) == [["a"], ["b"], ["u", "m", "out"]]


def test_join_breaks_chain(make_env):
    def joined(ctx):
        left = ctx.source([(1, "x")], name="l").key_by(first)
        right = ctx.source([(1, "y")], name="r").key_by(first)
        left.join(right).with_name("j").collect().with_name("out")

    graph, execution = plan_of(make_env(parallelism=2), joined)
    assert edges_by_name(graph) == [("l", "j", K, 0), ("r", "j", K, 1), ("j", "out", F, 0)]
    assert chains(execution) == [["l"], ["r"], ["j", "out"]]
    assert [(e.source, e.target, e.ordinal) for e in execution.edges] == [(0, 2, 0), (1, 2, 1)]


def test_fan_out_breaks_chain(make_env):
    def fanned(ctx):
        m = ctx.source([1], name="src").map(str).with_name("m")
        m.map(len).with_name("x").collect("one").with_name("out1")
        m.filter(bool).with_name("y").collect("two").with_name("out2")

    graph, execution = plan_of(make_env(), fanned)
    assert chains(execution) == [["src", "m"], ["x", "out1"], ["y", "out2"]]
    assert [(e.source, e.target, e.partitioning) for e in execution.edges] == [(0, 1, F), (0, 2, F)]


def test_fan_out_at_the_source(make_env):
    def fanned(ctx):
        src = ctx.source([1], name="src")
        src.collect("one").with_name("out1")
        src.collect("two").with_name("out2")

    _, execution = plan_of(make_env(), fanned)
    assert chains(execution) == [["src"], ["out1"], ["out2"]]


def test_chain_vertices_directly_on_a_hand_built_graph():
    source = SourceSpec(CollectionSource([1]), AllWindow())
    graph = PipelineGraph(
        (
            PipelineVertex(0, "s", source, 2),
            PipelineVertex(1, "a", MapSpec(str), 2),
            PipelineVertex(2, "b", FilterSpec(bool), 2),
            PipelineVertex(3, "c", SinkSpec(None), 2),
        ),
        (PipelineEdge(0, 1, F), PipelineEdge(1, 2, K, key_fn=key), PipelineEdge(2, 3, F)),
    )
    execution = build_execution_graph(graph)
    assert chains(execution) == [["s", "a"], ["b", "c"]]


# --- groups, cycles and tasks ---------------------------------------------------------------------


def test_cycle_heads_and_tails(make_env):
    def wc(ctx):
        (
            ctx.source(["a b"], name="src").with_parallelism(2)
            .flat_map(str.split).with_name("split")
            .key_by(key).reduce(max).with_name("r").with_parallelism(3)
            .collect().with_name("out")
        )

    _, execution = plan_of(make_env(parallelism=2), wc)
    # vertex 0: src -> split (p=2, tasks 0-1); vertex 1: r (p=3, tasks 2-4);
    # vertex 2: out (p=2, tasks 5-6), reached by a rebalance from r.
    assert chains(execution) == [["src", "split"], ["r"], ["out"]]
    assert len(execution.tasks()) == 2 + 3 + 2
    [cycle] = execution.cycles()
    assert cycle.id == 1
    assert cycle.heads == (0, 1)
    assert cycle.tails == (5, 6)
    assert [t.id for t in cycle.tasks] == [0, 1, 2, 3, 4, 5, 6]
    assert [(t.vertex_id, t.index, t.parallelism) for t in cycle.tasks] == [
        (0, 0, 2), (0, 1, 2), (1, 0, 3), (1, 1, 3), (1, 2, 3), (2, 0, 2), (2, 1, 2)
    ]
    assert not cycle.iterative
    assert cycle.group.kind is GroupKind.WINDOW
    assert execution.root.kind is GroupKind.PIPELINE
    assert execution.root.vertex_ids == (0, 1, 2)


def test_fan_out_has_every_sink_as_tail_and_join_every_source_as_head(make_env):
    def shape(ctx):
        left = ctx.source([(1, 2)], name="l").key_by(first)
        right = ctx.source([(1, 3)], name="r").with_parallelism(2).key_by(first)
        joined = left.join(right).with_name("j")
        joined.collect("one").with_name("out1")
        joined.map(str).with_name("m").with_parallelism(3).collect("two").with_name("out2")

    _, execution = plan_of(make_env(), shape)
    # l: task 0; r: tasks 1-2; j: task 3; out1: task 4; m: tasks 5-7; out2: task 8
    assert chains(execution) == [["l"], ["r"], ["j"], ["out1"], ["m"], ["out2"]]
    [cycle] = execution.cycles()
    assert cycle.heads == (0, 1, 2)
    assert cycle.tails == (4, 8)
    assert len(execution.tasks()) == 1 + 2 + 1 + 1 + 3 + 1


def test_disconnected_sub_pipelines_become_separate_cycles(make_env):
    def two(ctx):
        (
            ctx.source([1, 2], name="s1").map(str).with_name("m1")
            .key_by(key).reduce(max).with_name("r1").collect("one").with_name("c1")
        )
        ctx.source([3], name="s2", parallelism=2).collect("two").with_name("c2").with_parallelism(2)

    pipeline = make_env().pipeline("twins")
    pipeline.task(two)
    [(_, graph, execution)] = pipeline.plans()
    assert chains(execution) == [["s1", "m1"], ["r1", "c1"], ["s2", "c2"]]
    groups = execution.root.children
    assert [(g.id, g.kind, g.vertex_ids) for g in groups] == [
        (1, GroupKind.WINDOW, (0, 1)),
        (2, GroupKind.WINDOW, (2,)),
    ]
    first_cycle, second_cycle = execution.cycles()
    assert (first_cycle.id, first_cycle.heads, first_cycle.tails) == (1, (0,), (1,))
    assert (second_cycle.id, second_cycle.heads, second_cycle.tails) == (2, (2, 3), (2, 3))
    assert [t.id for t in first_cycle.tasks] == [0, 1]
    assert [t.id for t in second_cycle.tasks] == [2, 3]
    text = pipeline.explain("text").splitlines()
    assert "    group 1 (window): cycle 1, heads [0], tails [1]" in text
    assert "    group 2 (window): cycle 2, heads [2], tails [2]" in text
    assert "      vertex 2: s2 -> c2  p=2" in text


@pytest.mark.parametrize(
    ("parallelisms", "tasks"), [((1, 1, 1), 2), ((2, 3, 1), 6), ((4, 4, 4), 8), ((1, 5, 5), 6)]
)
def test_task_count_is_the_sum_of_chained_vertex_parallelism(make_env, parallelisms, tasks):
    p_src, p_red, p_out = parallelisms

    def counted(ctx):
        (
            ctx.source([1], name="src", parallelism=p_src)
            .key_by(key).reduce(max).with_name("r").with_parallelism(p_red)
            .collect().with_name("out").with_parallelism(p_out)
        )

    _, execution = plan_of(make_env(), counted)
    assert len(execution.tasks()) == tasks
    assert [t.id for t in execution.tasks()] == list(range(tasks))


# --- fingerprint ----------------------------------------------------------------------------------


def keyed_counts(names=("src", "m", "r", "out"), extra_filter=False, parallelism=None,
                 broadcast=False):
    def counts(ctx):
        stream = ctx.source([1, 2, 3], name=names[0]).map(str).with_name(names[1])
        if extra_filter:
            stream = stream.filter(bool).with_name("f")
        if broadcast:
            stream = stream.broadcast().map(str).with_name("b")
        reduced = stream.key_by(key).reduce(max).with_name(names[2])
        if parallelism is not None:
            reduced.with_parallelism(parallelism)
        reduced.collect().with_name(names[3])

    return counts


def fingerprint(env, fn) -> str:
    return plan_of(env, fn)[1].fingerprint()


def test_fingerprint_is_stable_across_builds(make_env):
    one = fingerprint(make_env(), keyed_counts())
    two = fingerprint(make_env(), keyed_counts())
    assert one == two
    assert re.fullmatch(r"[0-9a-f]{16}", one)


@pytest.mark.parametrize(
    "changed",
    [
        keyed_counts(names=("src", "m", "reduce", "out")),  # an operator renamed
        keyed_counts(names=("src", "m", "r", "sink")),  # the sink renamed
        keyed_counts(extra_filter=True),  # an operator added
        keyed_counts(broadcast=True),  # an operator and a broadcast edge added
    ],
)
def test_fingerprint_changes_with_the_structure(make_env, changed):
    assert fingerprint(make_env(), changed) != fingerprint(make_env(), keyed_counts())


def test_fingerprint_changes_with_the_operator_kind(make_env):
    def mapped(ctx):
        ctx.source([1], name="src").map(str).with_name("x").collect().with_name("out")

    def filtered(ctx):
        ctx.source([1], name="src").filter(bool).with_name("x").collect().with_name("out")

    assert fingerprint(make_env(), mapped) != fingerprint(make_env(), filtered)


def test_fingerprint_ignores_uniform_parallelism(make_env):
    # Per plan/execution.py the fingerprint hashes names, operator kinds and edges but not
    # parallelism, so that a job may resume rescaled: every operator at parallelism 1 and every
    # operator at parallelism 4 give the same fingerprint.
    base = fingerprint(make_env(parallelism=1), keyed_counts())
    assert fingerprint(make_env(parallelism=4), keyed_counts()) == base
    assert fingerprint(make_env(parallelism=2), keyed_counts()) == base


def test_fingerprint_ignores_rescaling_one_operator(make_env):
    # Rescaling only the keyed operator keeps every operator, name and key edge; only the
    # parallelism differs, so a rescaled resume must see the same fingerprint.
    base = fingerprint(make_env(parallelism=1), keyed_counts())
    assert fingerprint(make_env(parallelism=1), keyed_counts(parallelism=3)) == base


def test_fingerprint_ignores_rescaling_the_word_count(make_env):
    # The same for the counting step of the word count (its --parallelism flag).
    word_count = load_word_count()
    fingerprints = set()
    for parallelism in (None, 1, 3):
        pipeline = word_count.build(
            make_env().pipeline("word-count"), str(SAMPLE), 3, "out/wc", parallelism
        )
        [(_, _, execution)] = pipeline.plans()
        fingerprints.add(execution.fingerprint())
    assert len(fingerprints) == 1
