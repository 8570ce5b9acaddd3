"""Plans explained: ``explain`` in text (against hand-written golden files), DOT (parsed here and
by Graphviz) and Mermaid, for the pipelines of tests/plan/test_plan.py."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from test_plan import (
    GOLDEN,
    SAMPLE,
    first,
    load_word_count,
)

from gyreflow.plan.explain import FORMATS, explain

# --- explain: text goldens ------------------------------------------------------------------------


def golden(name: str) -> str:
    return (GOLDEN / name).read_text(encoding="utf-8")


def word_count_pipeline(env):
    return load_word_count().build(env.pipeline("word-count"), str(SAMPLE), 3, "out/wc", 2)


def join_pipeline(env):
    pipeline = env.pipeline("joins")

    @pipeline.task
    def joined(ctx):
        left = ctx.source([("a", 1), ("b", 2)], name="left").key_by(first)
        right = ctx.source([("a", "x"), ("a", "y"), ("c", "z")], name="right").key_by(first)
        left.join(right, lambda lt, rt: (lt[0], lt[1], rt[1])).with_name("join").collect(
            "pairs"
        ).with_name("out")

    return pipeline


def union_broadcast_pipeline(env):
    pipeline = env.pipeline("unions")

    @pipeline.task
    def merged(ctx):
        a = ctx.source([1, 2, 3], name="a")
        b = ctx.source([4, 5], name="b")
        (
            a.union(b).with_name("both")
            .broadcast()
            .map(lambda x: x * 10).with_name("tens").with_parallelism(2)
            .collect("merged").with_name("sink")
        )

    return pipeline


PLANS = {
    "word_count.txt": (word_count_pipeline, 1),
    "join.txt": (join_pipeline, 2),
    "union_broadcast.txt": (union_broadcast_pipeline, 1),
}


@pytest.mark.parametrize("golden_name", sorted(PLANS))
def test_explain_text_matches_golden(make_env, golden_name):
    make_pipeline, parallelism = PLANS[golden_name]
    pipeline = make_pipeline(make_env(parallelism=parallelism))
    assert pipeline.explain("text") + "\n" == golden(golden_name)
    assert pipeline.explain() == pipeline.explain("text")


def test_golden_plans_run_as_explained(make_env):
    # The plans behind the goldens also run: cross-check their outputs by hand.
    joins = join_pipeline(make_env(parallelism=2)).execute()
    assert sorted(joins.output("pairs")) == [("a", 1, "x"), ("a", 1, "y")]
    unions = union_broadcast_pipeline(make_env()).execute()
    # Broadcast to the two "tens" tasks: every record arrives twice.
    assert sorted(unions.output("merged")) == sorted([10, 20, 30, 40, 50] * 2)


def test_explain_of_a_pipeline_with_two_tasks_concatenates_them(make_env):
    pipeline = make_env().pipeline("two")

    @pipeline.task
    def first_task(ctx):
        ctx.source([1], name="s").collect().with_name("c")

    @pipeline.task(name="second")
    def second_task(ctx):
        ctx.source([1], name="t").collect().with_name("d")

    lines = pipeline.explain("text").splitlines()
    assert [line for line in lines if line.startswith("==")] == ["== two/first_task ==",
                                                                 "== two/second =="]
    assert lines.count("PipelineGraph: 2 vertices, 1 edge") == 2


def test_explain_rejects_unknown_format(make_env):
    pipeline = join_pipeline(make_env())
    with pytest.raises(ValueError, match="valid choices: text, dot, mermaid"):
        pipeline.explain("svg")
    assert FORMATS == ("text", "dot", "mermaid")


# --- explain: DOT and Mermaid ---------------------------------------------------------------------

_DOT_TOKEN = re.compile(
    r"""\s*(?:(?P<string>"(?:\\.|[^"\\])*")|(?P<arrow>->)|(?P<punct>[{}\[\];,=])"""
    r"""|(?P<id>[A-Za-z_][A-Za-z_0-9]*|-?\d+(?:\.\d+)?))"""
)


def dot_tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _DOT_TOKEN.match(text, pos)
        assert match is not None, f"not DOT at {text[pos:pos + 40]!r}"
        kind = match.lastgroup
        value = match.group(kind)
        if kind == "string":
            kind, value = "id", value[1:-1].replace('\\"', '"')
        tokens.append((kind, value))
        pos = match.end()
    return tokens


class DotGraph:
    """A recursive-descent parser of the DOT subset explain writes; fails on anything else."""

    def __init__(self, text: str) -> None:
        self.tokens = dot_tokens(text)
        self.pos = 0
        self.nodes: dict[str, dict] = {}
        self.node_cluster: dict[str, str | None] = {}
        self.edges: list[tuple[str, str, dict]] = []
        self.clusters: list[str] = []
        self.expect("id", "digraph")
        self.title = self.expect("id")
        self.expect("punct", "{")
        self.statements(None)
        self.expect("punct", "}")
        assert self.pos == len(self.tokens), "text after the closing brace"

    def peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def expect(self, kind, value=None):
        got = self.peek()
        assert got[0] == kind and (value is None or got[1] == value), (
            f"expected {value or kind} at token {self.pos}, got {got}"
        )
        self.pos += 1
        return got[1]

    def attrs(self) -> dict:
        found = {}
        if self.peek() != ("punct", "["):
            return found
        self.expect("punct", "[")
        while self.peek() != ("punct", "]"):
            name = self.expect("id")
            self.expect("punct", "=")
            found[name] = self.expect("id")
            if self.peek() in (("punct", ","), ("punct", ";")):
                self.pos += 1
        self.expect("punct", "]")
        return found

    def statements(self, cluster: str | None) -> None:
        while self.peek() != ("punct", "}"):
            kind, value = self.peek()
            assert kind == "id", f"statement cannot start with {value!r}"
            self.pos += 1
            if value == "subgraph":
                name = self.expect("id")
                self.clusters.append(name)
                self.expect("punct", "{")
                self.statements(name)
                self.expect("punct", "}")
            elif value in ("node", "edge", "graph"):
                self.attrs()
            elif self.peek() == ("punct", "="):
                self.pos += 1
                self.expect("id")
            elif self.peek() == ("arrow", "->"):
                self.pos += 1
                target = self.expect("id")
                self.edges.append((value, target, self.attrs()))
            else:
                assert value not in self.nodes, f"node {value} declared twice"
                self.nodes[value] = self.attrs()
                self.node_cluster[value] = cluster
            if self.peek() == ("punct", ";"):
                self.pos += 1


ALL_PLANS = [
    (word_count_pipeline, 1),
    (join_pipeline, 2),
    (union_broadcast_pipeline, 1),
]


@pytest.mark.parametrize(("make_pipeline", "parallelism"), ALL_PLANS)
def test_dot_is_well_formed_and_lists_every_edge(make_env, make_pipeline, parallelism):
    pipeline = make_pipeline(make_env(parallelism=parallelism))
    [(name, graph, execution)] = pipeline.plans()
    text = pipeline.explain("dot")
    assert text.count("{") == text.count("}")
    parsed = DotGraph(text)
    assert parsed.title == f"{pipeline.name}/{name}"
    # One cluster per chained vertex, holding exactly the chain's operators.
    assert parsed.clusters == [f"cluster_v{ev.id}" for ev in execution.vertices]
    expected_nodes = {
        f"n{v.id}": f"cluster_v{ev.id}" for ev in execution.vertices for v in ev.chain
    }
    assert parsed.node_cluster == expected_nodes
    for v in graph.vertices:
        label = parsed.nodes[f"n{v.id}"]["label"]
        assert label == f"{v.name}\\n{v.spec.op} p={v.parallelism}"
    # Every pipeline edge, with its partitioning; non-forward edges drawn bold.
    expected_edges = sorted(
        (f"n{e.source}", f"n{e.target}", e.partitioning.value) for e in graph.edges
    )
    assert sorted((s, t, a["label"]) for s, t, a in parsed.edges) == expected_edges
    for _, _, a in parsed.edges:
        assert (a.get("style") == "bold") == (a["label"] != "forward")


def test_dot_of_word_count_by_hand(make_env):
    text = word_count_pipeline(make_env()).explain("dot")
    lines = text.splitlines()
    assert lines[0] == 'digraph "word-count/word_count" {'
    assert lines[-1] == "}"
    assert '  n1 -> n2 [label="key", style=bold];' in lines
    assert '  n2 -> n3 [label="rebalance", style=bold];' in lines
    assert '  n0 -> n1 [label="forward"];' in lines
    assert '    label="vertex 1 (p=2)"; style=dashed;' in lines


def test_dot_escapes_quotes_in_the_title(make_env):
    pipeline = make_env().pipeline('say "hi"')

    @pipeline.task
    def t(ctx):
        ctx.source([1], name="s").collect().with_name("c")

    assert DotGraph(pipeline.explain("dot")).title == 'say "hi"/t'


def test_dot_escapes_quotes_in_operator_names(make_env):
    pipeline = make_env().pipeline("quoted")

    @pipeline.task
    def t(ctx):
        ctx.source([1], name="s").map(str).with_name('the "best" map').collect().with_name("c")

    parsed = DotGraph(pipeline.explain("dot"))
    assert parsed.nodes["n1"]["label"] == 'the "best" map\\nmap p=1'


def graphviz_dot() -> str:
    path = shutil.which("dot")
    if path is None:
        pytest.skip("graphviz is not installed: cannot check that `dot -Tsvg` accepts the DOT")
    return path


@pytest.mark.parametrize(("make_pipeline", "parallelism"), ALL_PLANS)
def test_graphviz_accepts_dot(make_env, make_pipeline, parallelism):
    dot = graphviz_dot()
    text = make_pipeline(make_env(parallelism=parallelism)).explain("dot")
    result = subprocess.run([dot, "-Tsvg"], input=text, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "<svg" in result.stdout


_MERMAID_NODE = re.compile(r'^    n(\d+)\["([^"]*)<br/>([^"]*)"\]$')
_MERMAID_EDGE = re.compile(r"^  n(\d+) -->\|([a-z]+)\| n(\d+)$")
_MERMAID_SUBGRAPH = re.compile(r'^  subgraph v(\d+)\["vertex (\d+) \(p=(\d+)\)"\]$')


def parse_mermaid(text: str):
    lines = text.splitlines()
    assert lines[0] == "flowchart LR"
    assert lines[1].startswith("  %% ")
    nodes, edges, subgraphs = {}, [], []
    depth = 0
    current = None
    for line in lines[2:]:
        if match := _MERMAID_SUBGRAPH.match(line):
            assert depth == 0, "nested subgraph"
            assert match.group(1) == match.group(2)
            depth += 1
            current = int(match.group(1))
            subgraphs.append((current, int(match.group(3))))
        elif line == "  end":
            assert depth == 1, "unbalanced end"
            depth -= 1
            current = None
        elif match := _MERMAID_NODE.match(line):
            assert current is not None, "node outside a subgraph"
            node = int(match.group(1))
            assert node not in nodes, f"node n{node} declared twice"
            nodes[node] = (current, match.group(2), match.group(3))
        elif match := _MERMAID_EDGE.match(line):
            assert depth == 0
            edges.append((int(match.group(1)), int(match.group(3)), match.group(2)))
        else:
            raise AssertionError(f"not Mermaid written by explain: {line!r}")
    assert depth == 0, "subgraph left open"
    return lines[1][5:], nodes, edges, subgraphs


@pytest.mark.parametrize(("make_pipeline", "parallelism"), ALL_PLANS)
def test_mermaid_is_well_formed_and_lists_every_edge(make_env, make_pipeline, parallelism):
    pipeline = make_pipeline(make_env(parallelism=parallelism))
    [(name, graph, execution)] = pipeline.plans()
    title, nodes, edges, subgraphs = parse_mermaid(pipeline.explain("mermaid"))
    assert title == f"{pipeline.name}/{name}"
    assert subgraphs == [(ev.id, ev.parallelism) for ev in execution.vertices]
    assert nodes == {
        v.id: (ev.id, v.name, v.spec.op) for ev in execution.vertices for v in ev.chain
    }
    assert sorted(edges) == sorted((e.source, e.target, e.partitioning.value) for e in graph.edges)


def test_mermaid_escapes_quotes_in_operator_names(make_env):
    pipeline = make_env().pipeline("quoted")

    @pipeline.task
    def t(ctx):
        ctx.source([1], name="s").map(str).with_name('the "best" map').collect().with_name("c")

    # A bare " would end Mermaid's quoted label early; Mermaid writes it as #quot; (or #34;).
    _, nodes, _, _ = parse_mermaid(pipeline.explain("mermaid"))
    vertex_id, label, op = nodes[1]
    assert (vertex_id, op) == (0, "map")
    assert label.replace("#quot;", '"').replace("#34;", '"') == 'the "best" map'


def test_explain_function_directly(make_env):
    [(_, graph, execution)] = join_pipeline(make_env(parallelism=2)).plans()
    assert explain("joins/joined", graph, execution, "text") + "\n" == golden("join.txt")
    with pytest.raises(ValueError, match="unknown explain format 'png'"):
        explain("x", graph, execution, "png")
