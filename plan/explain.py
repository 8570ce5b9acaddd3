"""Explain: print a PipelineGraph and its ExecutionGraph as text, Graphviz DOT or Mermaid.

``explain_all`` describes every pipeline task of a script as one document: one DOT graph or one
Mermaid flowchart in which each task is a subgraph (a cluster) of its own, so the output of any
script is a single valid graph for Graphviz or Mermaid.
"""

from __future__ import annotations

from gyreflow.plan.execution import ExecutionGraph, ExecutionVertexGroup, GroupKind
from gyreflow.plan.graph import PipelineGraph, PipelineVertex
from gyreflow.plan.words import plural

FORMATS = ("text", "dot", "mermaid")


def explain(title: str, graph: PipelineGraph, execution: ExecutionGraph, format: str = "text") -> str:  # noqa: A002
    """Describe both plans of one pipeline task in ``format`` (one of ``FORMATS``)."""
    if format == "text":
        return _text(title, graph, execution)
    if format == "dot":
        return _dot(title, graph, execution)
    if format == "mermaid":
        return _mermaid(title, graph, execution)
    msg = f"unknown explain format {format!r}; valid choices: {', '.join(FORMATS)}"
    raise ValueError(msg)


def explain_all(items, format: str = "text") -> str:  # noqa: A002
    """Describe several ``(title, graph, execution)`` pipeline tasks as one document in ``format``."""
    items = list(items)
    if format not in FORMATS:
        msg = f"unknown explain format {format!r}; valid choices: {', '.join(FORMATS)}"
        raise ValueError(msg)
    if len(items) == 1 or format == "text":
        return "\n".join(explain(title, graph, execution, format) for title, graph, execution in items)
    if format == "dot":
        lines = ["digraph gyreflow {", "  rankdir=LR;", "  node [shape=box];"]
        for index, (title, graph, execution) in enumerate(items):
            lines.append(f"  subgraph cluster_t{index} {{")
            lines.append(f"    label={_quote(title)};")
            lines.extend("  " + line for line in _dot_body(graph, execution, f"t{index}_"))
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines)
    lines = ["flowchart LR"]
    for index, (title, graph, execution) in enumerate(items):
        lines.append(f"  subgraph t{index}[\"{_mermaid_text(title)}\"]")
        lines.extend("  " + line for line in _mermaid_body(graph, execution, f"t{index}"))
        lines.append("  end")
    return "\n".join(lines)


def _detail(v: PipelineVertex) -> str:
    spec = v.spec
    parts = []
    source = getattr(spec, "source", None)
    if source is not None:
        parts.append(source.describe())
        parts.append(spec.window.describe())
    sink = getattr(spec, "sink", None)
    if sink is not None:
        parts.append(sink.describe())
    name = getattr(spec, "name", None)
    if name is not None:
        parts.append(f"as {name!r}")
    return " ".join(parts)


def _text(title: str, graph: PipelineGraph, execution: ExecutionGraph) -> str:
    lines = [f"== {title} ==", f"PipelineGraph: {plural(len(graph.vertices), 'vertex', 'vertices')}, "
                                f"{plural(len(graph.edges), 'edge')}"]
    for v in graph.topological_order():
        detail = _detail(v)
        lines.append(f"  {v.name:<16} {v.spec.op:<10} {v.kind.value:<10} p={v.parallelism}"
                     + (f"  {detail}" if detail else ""))
    for e in graph.edges:
        src, dst = graph.vertex(e.source).name, graph.vertex(e.target).name
        lines.append(f"  {src} -> {dst}  [{e.partitioning.value}, input {e.ordinal}]")
    lines.append(f"ExecutionGraph: {plural(len(execution.vertices), 'chained vertex', 'chained vertices')}, "
                 f"{plural(len(execution.edges), 'edge')}, {plural(len(execution.tasks()), 'task')}")
    cycles = {c.id: c for c in execution.cycles()}
    tasks = {t.id: t for t in execution.tasks()}

    def walk(group: ExecutionVertexGroup, depth: int) -> None:
        pad = "  " * depth
        line = f"{pad}group {group.id} ({group.kind.value})"
        cycle = cycles.get(group.id)
        if cycle is not None:
            heads = sorted({tasks[t].vertex_id for t in cycle.heads})
            tails = sorted({tasks[t].vertex_id for t in cycle.tails})
            line += f": cycle {cycle.id}, heads {heads}, tails {tails}"
        lines.append(line)
        nested = {vid for child in group.children for vid in child.vertex_ids}
        if group.kind is not GroupKind.PIPELINE:
            for vid in group.vertex_ids:
                if vid not in nested:
                    ev = execution.vertex(vid)
                    lines.append(f"{pad}  vertex {vid}: {ev.name}  p={ev.parallelism}")
        for child in group.children:
            walk(child, depth + 1)

    walk(execution.root, 1)
    for e in execution.edges:
        lines.append(f"  vertex {e.source} -> vertex {e.target}  [{e.partitioning.value}]")
    return "\n".join(lines)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _dot(title: str, graph: PipelineGraph, execution: ExecutionGraph) -> str:
    lines = [f"digraph {_quote(title)} {{", "  rankdir=LR;", "  node [shape=box];"]
    lines.extend(_dot_body(graph, execution, ""))
    lines.append("}")
    return "\n".join(lines)


def _dot_body(graph: PipelineGraph, execution: ExecutionGraph, prefix: str) -> list[str]:
    """A cluster per chained vertex and every edge; node and cluster ids start with ``prefix``."""
    lines = []
    for ev in execution.vertices:
        lines.append(f"  subgraph cluster_{prefix}v{ev.id} {{")
        lines.append(f"    label={_quote(f'vertex {ev.id} (p={ev.parallelism})')}; style=dashed;")
        for v in ev.chain:
            label = _quote(f"{v.name}\n{v.spec.op} p={v.parallelism}").replace("\n", "\\n")
            lines.append(f"    {prefix}n{v.id} [label={label}];")
        lines.append("  }")
    for e in graph.edges:
        style = "" if e.partitioning.value == "forward" else ", style=bold"
        lines.append(f"  {prefix}n{e.source} -> {prefix}n{e.target} "
                     f"[label={_quote(e.partitioning.value)}{style}];")
    return lines


def _mermaid(title: str, graph: PipelineGraph, execution: ExecutionGraph) -> str:
    return "\n".join(["flowchart LR", f"  %% {title}", *_mermaid_body(graph, execution, "")])


def _mermaid_body(graph: PipelineGraph, execution: ExecutionGraph, prefix: str) -> list[str]:
    lines = []
    for ev in execution.vertices:
        lines.append(f"  subgraph {prefix}v{ev.id}[\"vertex {ev.id} (p={ev.parallelism})\"]")
        for v in ev.chain:
            lines.append(f"    {prefix}n{v.id}[\"{_mermaid_text(v.name)}<br/>{v.spec.op}\"]")
        lines.append("  end")
    for e in graph.edges:
        lines.append(f"  {prefix}n{e.source} -->|{e.partitioning.value}| {prefix}n{e.target}")
    return lines


def _mermaid_text(text: str) -> str:
    """Escape text for a quoted Mermaid label (entity codes for quotes and angle brackets)."""
    return text.replace("&", "#amp;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
