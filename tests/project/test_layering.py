"""The package layering, read from the source: which layer may import which, and no import cycles.

Every import counts, at module level or inside a function, since a function-level import is still a
dependency (only imports under ``if TYPE_CHECKING:`` are left out: they never run). The layers, as
docs/architecture.md draws them: state imports nothing of gyreflow's other layers; plan imports
state at most; scheduler imports plan and state; runtime imports plan, scheduler and state; api
imports everything. Inside a layer, no module may import one that imports it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("api", "plan", "scheduler", "runtime", "state")
MAY_IMPORT = {
    "state": set(),
    "plan": {"state"},
    "scheduler": {"plan", "state"},
    "runtime": {"plan", "scheduler", "state"},
    "api": {"plan", "scheduler", "runtime", "state"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["gyreflow", *parts])


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: Path) -> set[str]:
    """The gyreflow modules ``path`` imports (``from a import b`` counts ``a.b`` when that is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node)
            for child in node.body for n in ast.walk(child)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("gyreflow")}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    files = {module_name(p): p for layer in LAYERS for p in (REPO / layer).rglob("*.py")}
    modules = nx.DiGraph()
    modules.add_nodes_from(files)
    for name, path in files.items():
        for target in imports_of(path):
            if target in files and target != name:
                modules.add_edge(name, target)
    return modules


def layer_of(module: str) -> str:
    return module.split(".")[1]


def test_the_graph_is_read_from_every_layer(graph):
    assert {layer_of(m) for m in graph} == set(LAYERS)
    assert graph.has_edge("gyreflow.runtime.driver", "gyreflow.scheduler.cycle")
    assert graph.has_edge("gyreflow.api.language.environment", "gyreflow.runtime.driver")


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_imports_only_the_layers_below_it(graph, layer):
    wrong = sorted((source, target) for source, target in graph.edges
                   if layer_of(source) == layer and layer_of(target) != layer
                   and layer_of(target) not in MAY_IMPORT[layer])
    assert not wrong, f"{layer} imports layers it must not: {wrong}"


def test_no_module_imports_its_own_importer(graph):
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_a_planted_cycle_and_upward_import_are_found(tmp_path):
    """The checks can fail: a module that imports the api from the runtime is seen."""
    planted = REPO / "runtime" / "dataflow" / "_planted_for_layering_test.py"
    planted.write_text("def f():\n    from gyreflow.api import graph\n    from . import task\n",
                       encoding="utf-8")
    try:
        found = imports_of(planted)
    finally:
        planted.unlink()
    assert "gyreflow.api.graph" in found
    assert "gyreflow.runtime.dataflow.task" in found


# Inside a layer, folders by concern stand in an order: a module imports folders before its own
# (or its own), never one after it. A layer's top-level modules (factories, documented re-exports)
# may import any of its folders.
FOLDER_ORDER = {
    "api": ("config", "service", "connectors", "language", "graph", "dsl", "cli"),
    "runtime": ("dataflow", "local", "workers", "spark"),
    "state": ("keys", "shared", "stores"),
}


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in
                                          FOLDER_ORDER.get(parts[1], ())) else None


def test_every_folder_is_in_its_layers_order():
    for layer, order in FOLDER_ORDER.items():
        folders = {p.name for p in (REPO / layer).iterdir()
                   if p.is_dir() and (p / "__init__.py").exists()}
        assert folders == set(order), f"{layer}/ folders {sorted(folders)} != {sorted(order)}"


@pytest.mark.parametrize("layer", sorted(FOLDER_ORDER))
def test_no_folder_imports_a_folder_that_imports_it(graph, layer):
    order = FOLDER_ORDER[layer]
    wrong = []
    for source, target in graph.edges:
        if layer_of(source) != layer or layer_of(target) != layer:
            continue
        here, there = folder_of(source), folder_of(target)
        if here is None or there is None or here == there:
            continue
        if order.index(there) > order.index(here):
            wrong.append((source, target))
    assert not wrong, f"{layer}: folders import folders after their own: {sorted(wrong)}"


# runtime/dataflow is by concern too: columns/ (record batches), then time/ (windows, event time),
# then graph/ (the graph runtime). A folder imports its own and earlier ones, and of the top level
# only the operator base; the operator base imports columns/ at most; the task machinery at the top
# (task, fetch, emitter, fusion, combine, iteration, the factory) may import all three.
DATAFLOW = "gyreflow.runtime.dataflow"
DATAFLOW_ORDER = ("columns", "time", "graph")
DATAFLOW_BASE = {f"{DATAFLOW}.operators"}


def dataflow_folder(module: str) -> str | None:
    """The folder of runtime/dataflow a module is in (None: the top level, or not in dataflow)."""
    parts = module.split(".")
    if not module.startswith(DATAFLOW + ".") or parts[3] not in DATAFLOW_ORDER:
        return None
    return parts[3]


def dataflow_order_violations(edges) -> list[tuple[str, str]]:
    """The imports among runtime/dataflow's modules that break its order."""
    wrong = []
    for source, target in edges:
        if not (source.startswith(DATAFLOW + ".") and target.startswith(DATAFLOW + ".")):
            continue
        here, there = dataflow_folder(source), dataflow_folder(target)
        if here is not None and there is None and target not in DATAFLOW_BASE:
            wrong.append((source, target))  # a folder reaching up into the task machinery
        elif here is not None and there is not None and (
                DATAFLOW_ORDER.index(there) > DATAFLOW_ORDER.index(here)):
            wrong.append((source, target))  # a folder importing a later one
        elif source in DATAFLOW_BASE and there not in (None, "columns"):
            wrong.append((source, target))  # the operator base importing windows or graphs
    return sorted(wrong)


def test_dataflow_folders_are_the_ordered_ones():
    root = REPO / "runtime" / "dataflow"
    folders = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(DATAFLOW_ORDER)


def test_dataflow_folders_import_only_earlier_folders_and_the_operator_base(graph):
    assert graph.has_edge(f"{DATAFLOW}.graph.operator", f"{DATAFLOW}.operators")
    assert graph.has_edge(f"{DATAFLOW}.operator_factory", f"{DATAFLOW}.graph.operator")
    wrong = dataflow_order_violations(graph.edges)
    assert not wrong, f"runtime/dataflow: imports against columns -> time -> graph -> tasks: {wrong}"


def test_dataflow_order_violations_are_found():
    """The check can fail: each kind of wrong import is named, the allowed ones are not."""
    d = DATAFLOW
    wrong = [(f"{d}.columns.batch", f"{d}.time.windows"),
             (f"{d}.time.event_time", f"{d}.graph.removals"),
             (f"{d}.graph.removals", f"{d}.task"),
             (f"{d}.operators", f"{d}.graph.operator")]
    allowed = [(f"{d}.graph.removals", f"{d}.graph.partition"),
               (f"{d}.graph.operator", f"{d}.operators"),
               (f"{d}.time.windows", f"{d}.columns.batch"),
               (f"{d}.task", f"{d}.graph.operator"),
               (f"{d}.operators", f"{d}.columns.expressions")]
    assert dataflow_order_violations(wrong + allowed) == sorted(wrong)
