"""What gives a job's stored state its meaning, recorded with every checkpoint and compared on resume.

A plan's *signature* lists, in the plan's topological order, each operator's name, operation and
kind with what decides what its state holds: a source's kind and window, an event-time window's
assigner, the key functions of keyed operators, the kind of aggregate function, process function or
graph program; then the edges between operators. Parallelism is left out (state is stored per key
group, so a job may resume with another one). A key function is known by its qualified name and a
digest of its code (bytecode, constants, the names it uses, the simple values it closes over or
takes as defaults, and the functions of its own module it calls), which is the same in every process
and run; gyreflow's own functions and built-ins by their name. Other user functions (``map``,
``filter``, a reduce function) are left out: fixing a function that failed and resuming is how a job
goes on after a user error.

The signature is plain data (tuples, strings, a dict), pickled into the job meta; a difference reads
as one sentence naming the operator and what changed.

>>> def first_difference_of(now, before):
...     return plan_difference({"python": "3.11", "operators": before, "edges": ()},
...                            {"python": "3.11", "operators": now, "edges": ()})
>>> first_difference_of((("lines", "source", "source", (("window", "SizeTumblingWindow(500)"),)),),
...                     (("lines", "source", "source", (("window", "SizeTumblingWindow(400)"),)),))
"source 'lines': window SizeTumblingWindow(500), checkpoint has SizeTumblingWindow(400)"
"""

from __future__ import annotations

import functools
import hashlib
import sys
import types

from gyreflow.plan.graph import Partitioning, PipelineGraph, PipelineVertex
from gyreflow.plan.operators import OperatorKind

# Spec fields holding a key function, and how a difference names them.
_KEY_FIELDS = {"key_fn": "key function", "left_key": "left key function",
               "right_key": "right key function", "stream_key": "stream key function",
               "table_key": "table key function"}
# Spec fields holding a user object whose kind decides what its state holds.
_FUNCTION_FIELDS = {"function": "function", "aggregation": "aggregation", "program": "program"}
_SIMPLE = (str, int, float, bool, bytes, type(None))
_DEPTH = 3  # how far a key function's digest follows the functions it calls or closes over
_LONGEST = 256  # items of a container a digest spells out


def python_version() -> str:
    """``major.minor`` of this interpreter: bytecode differs between versions, not within one."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def plan_signature(graph: PipelineGraph) -> dict:
    """The signature of ``graph``: ``{"python", "operators", "edges"}`` as plain data."""
    operators = tuple((v.name, v.spec.op, v.kind.value, _attributes(v))
                      for v in graph.topological_order())
    edges = []
    for edge in graph.edges:
        partitioning = edge.partitioning
        if partitioning is Partitioning.REBALANCE:  # follows from parallelism alone
            partitioning = Partitioning.FORWARD
        edges.append((graph.vertex(edge.source).name, graph.vertex(edge.target).name,
                      partitioning.value, edge.ordinal))
    return {"python": python_version(), "operators": operators, "edges": tuple(sorted(edges))}


def _attributes(vertex: PipelineVertex) -> tuple:
    spec = vertex.spec
    found: list[tuple[str, object]] = []
    if vertex.kind is OperatorKind.SOURCE:
        found.append(("source", type(spec.source).__qualname__))
        window = spec.window
        found.append(("window", window.describe() if hasattr(window, "describe") else repr(window)))
    for field, label in _KEY_FIELDS.items():
        fn = getattr(spec, field, None)
        if fn is not None:
            found.append((label, describe_function(fn)))
    assigner = getattr(spec, "assigner", None)
    if assigner is not None:
        found.append(("event-time window", repr(assigner)))
    for field, label in _FUNCTION_FIELDS.items():
        value = getattr(spec, field, None)
        if value is not None and not _is_function(value):
            found.append((label, type(value).__qualname__))
    mode = getattr(spec, "mode", None)
    if mode is not None:
        found.append(("graph mode", getattr(mode, "value", str(mode))))
    directed = getattr(spec, "directed", None)
    if directed is not None:
        found.append(("directed", str(directed)))
    return tuple(found)


def _is_function(value: object) -> bool:
    return isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType
                      | types.MethodDescriptorType | functools.partial)


def describe_function(fn: object) -> tuple[str, str]:
    """``(name, digest)`` of a key function: the digest is empty where the name says it all
    (built-ins, gyreflow's own functions, objects with a plain ``repr``)."""
    return _describe(fn, _DEPTH)


def _describe(fn: object, depth: int) -> tuple[str, str]:
    if isinstance(fn, functools.partial):
        name, digest = _describe(fn.func, depth)
        extra = _values_text(fn.args) + _values_text(tuple(sorted(fn.keywords.items())))
        return f"partial({name})", _digest(digest, extra) if extra else digest
    if isinstance(fn, types.MethodType):
        return _describe(fn.__func__, depth)
    if isinstance(fn, types.FunctionType):
        name = fn.__qualname__
        if _is_gyreflow(fn):  # its code is gyreflow's; what it closes over is the user's
            closure = _closure_text(fn, depth)
            return f"{fn.__module__}.{name}", _digest(closure) if closure else ""
        return name, _function_digest(fn, depth, set())
    if isinstance(fn, types.BuiltinFunctionType | types.MethodDescriptorType
                  | types.WrapperDescriptorType | type):
        module = getattr(fn, "__module__", None)
        qualified = getattr(fn, "__qualname__", repr(fn))
        return (qualified if module in (None, "builtins") else f"{module}.{qualified}"), ""
    text = repr(fn)
    if " at 0x" in text or "object at" in text:  # an address: differs in every process
        return type(fn).__qualname__, ""
    return text, ""


def _is_gyreflow(fn: types.FunctionType) -> bool:
    module = fn.__module__ or ""
    return module == "gyreflow" or module.startswith("gyreflow.")


def _function_digest(fn: types.FunctionType, depth: int, seen: set[int]) -> str:
    """A digest of what ``fn`` computes; with ``depth``, of the functions of its own module it
    calls and of those it closes over too (a helper's change changes the keys)."""
    seen.add(id(fn))
    parts = [_code_text(fn.__code__), _closure_text(fn, 0),
             _values_text(fn.__defaults__ or ()),
             _values_text(tuple(sorted((fn.__kwdefaults__ or {}).items())))]
    if depth > 0:
        module_globals = fn.__globals__
        for name in sorted(_all_names(fn.__code__)):
            called = module_globals.get(name)
            if (isinstance(called, types.FunctionType) and id(called) not in seen
                    and called.__module__ == fn.__module__):
                parts.append(f"{name}={_function_digest(called, depth - 1, seen)}")
        for cell in fn.__closure__ or ():
            value = _cell_value(cell)
            if isinstance(value, types.FunctionType) and id(value) not in seen:
                parts.append("=".join(_describe(value, depth - 1)) if _is_gyreflow(value)
                             else f"{value.__qualname__}={_function_digest(value, depth - 1, seen)}")
    return _digest(*parts)


def _all_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _all_names(const)
    return names


def _code_text(code: types.CodeType) -> str:
    """The parts of a code object that decide what it computes (not its line numbers, file name
    or local variable names): stable across processes and runs of one Python version."""
    consts = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            consts.append(_code_text(const))
        else:
            consts.append(_value_text(const))
    return "|".join((code.co_code.hex(), ",".join(consts), ",".join(code.co_names),
                     str(code.co_argcount), str(code.co_flags)))


def _value_text(value: object, depth: int = 3) -> str:
    """``repr`` of simple values (sets sorted: their order follows the per-process string hash);
    the type of anything else, and of containers too deep or too long to spell out (a key function
    closing over a large lookup table is known by the table's type and length)."""
    if isinstance(value, _SIMPLE):
        return repr(value)
    if not isinstance(value, tuple | list | frozenset | set | dict):
        return type(value).__qualname__
    if depth <= 0 or len(value) > _LONGEST:
        return f"{type(value).__qualname__}[{len(value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(sorted(f"{_value_text(k, depth - 1)}:{_value_text(v, depth - 1)}"
                                     for k, v in value.items())) + "}"
    items = [_value_text(v, depth - 1) for v in value]
    if isinstance(value, frozenset | set):
        return "{" + ",".join(sorted(items)) + "}"
    return "(" + ",".join(items) + ")"


def _values_text(values) -> str:
    return ",".join(_value_text(v) for v in values)


def _cell_value(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return None


def _closure_text(fn: types.FunctionType, depth: int) -> str:
    """The values ``fn`` closes over; with ``depth``, the functions among them described too."""
    parts = []
    for cell in fn.__closure__ or ():
        value = _cell_value(cell)
        if depth > 0 and isinstance(value, types.FunctionType) and value is not fn:
            parts.append("=".join(_describe(value, depth - 1)))
        else:
            parts.append(_value_text(value))
    return ",".join(parts)


def _digest(*parts: str) -> str:
    return hashlib.blake2b("\x00".join(parts).encode("utf-8", "surrogatepass"),
                           digest_size=6).hexdigest()


# Differences ------------------------------------------------------------------------------


def plan_difference(stored: dict, now: dict) -> str | None:
    """The first way ``now`` differs from ``stored`` (signatures of :func:`plan_signature`), as
    ``operator 'count': ...``, followed by how many more differences there are; None if equal."""
    differences = list(_differences(stored, now))
    if not differences:
        return None
    more = len(differences) - 1
    return differences[0] + (f" (and {more} more difference{'s' if more > 1 else ''})"
                             if more else "")


def _role(kind: str) -> str:
    return {"source": "source", "sink": "sink"}.get(kind, "operator")


def _differences(stored: dict, now: dict):
    same_python = stored.get("python") == now.get("python")
    before = {op[0]: op for op in stored["operators"]}
    after = {op[0]: op for op in now["operators"]}
    gone = [name for name in before if name not in after]
    new = [name for name in after if name not in before]
    renamed: dict[str, str] = {}
    if len(gone) == 1 and len(new) == 1 and before[gone[0]][1:3] == after[new[0]][1:3]:
        # One operator under another name: its edges and place are compared under the new one.
        old = before.pop(gone[0])
        yield f"{_role(old[2])} {old[0]!r} ({old[1]}) is named {new[0]!r} now"
        renamed[gone[0]] = new[0]
        before[new[0]] = (new[0], *old[1:])
        gone, new = [], []
    for name in gone:
        yield (f"{_role(before[name][2])} {name!r} ({before[name][1]}) of the checkpoint is not "
               "in the pipeline now (removed or renamed)")
    for name in new:
        yield (f"{_role(after[name][2])} {name!r} ({after[name][1]}) is new: the checkpoint has "
               "no such operator")
    for name, op in after.items():
        old = before.get(name)
        if old is None:
            continue
        if op[1:3] != old[1:3]:
            yield f"{_role(op[2])} {name!r}: {op[1]} ({op[2]}) now, checkpoint has {old[1]} ({old[2]})"
            continue
        yield from _attribute_differences(f"{_role(op[2])} {name!r}", dict(old[3]), dict(op[3]),
                                          same_python)
    order_before = [renamed.get(op[0], op[0]) for op in stored["operators"]]
    kept_before = [n for n in order_before if n in after]
    kept_after = [n for n in after if n in before]
    if kept_before != kept_after:
        yield (f"operators in another order: {', '.join(kept_after)} now, checkpoint has "
               f"{', '.join(kept_before)}")
    old_edges = {(renamed.get(e[0], e[0]), renamed.get(e[1], e[1]), *e[2:])
                 for e in stored["edges"]}
    new_edges = set(now["edges"])
    for edge in sorted(new_edges - old_edges):
        yield f"edge {edge[0]!r} -> {edge[1]!r} ({edge[2]}, input {edge[3]}) is new"
    for edge in sorted(old_edges - new_edges):
        yield f"edge {edge[0]!r} -> {edge[1]!r} ({edge[2]}, input {edge[3]}) of the checkpoint is gone"


def _attribute_differences(what: str, old: dict, new: dict, same_python: bool):
    for label in sorted(set(old) | set(new), key=lambda k: (k not in new, k)):
        a, b = old.get(label), new.get(label)
        if isinstance(a, tuple) and isinstance(b, tuple):  # functions: (name, digest)
            if a[0] != b[0]:
                yield f"{what}: {label} {b[0]}, checkpoint has {a[0]}"
            elif same_python and a[1] != b[1]:
                yield (f"{what}: {label} {b[0]} has other code or values (digest {b[1]}, "
                       f"checkpoint has {a[1]})")
        elif a != b:
            yield f"{what}: {label} {_shown(b)}, checkpoint has {_shown(a)}"


def _shown(value: object) -> str:
    return "none" if value is None else str(value)
