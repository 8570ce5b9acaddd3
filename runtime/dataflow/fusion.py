"""Operator fusion: consecutive stateless operators of a chain run as one comprehension per batch.

A chain such as ``flat_map(str.split).map(lambda w: (w, 1))`` would build one list per operator and
walk each; fused, every record goes through all the user functions inside a single list
comprehension compiled for the chain (``[f1(x1) for x0 in batch for x1 in f0(x0)]``), so no
intermediate list is built and no per-operator call is made per batch. A fused run holds at most one
operator that changes the number of records (a ``filter`` or ``flat_map``), so each operator's record
counts follow from the batch's size before and after, and per-operator metrics stay exact. When a user
function raises, the batch is run again through the operators one by one, which names the operator
and the record that failed (``locate_failure``).
"""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.runtime.dataflow.operators import (
    FilterOperator,
    FlatMapOperator,
    MapOperator,
    Operator,
)

_STATELESS = (MapOperator, FilterOperator, FlatMapOperator)
_RESIZING = (FilterOperator, FlatMapOperator)


def _discard(batch: list) -> None:
    """The output of a run nothing is wired to yet."""


class FusedOperator:
    """Runs ``operators`` (stateless, at most one resizing) as one compiled comprehension."""

    def __init__(self, operators: list[Operator]) -> None:
        self.operators = operators
        self.name = operators[0].name
        self.out: Callable[[list], None] = _discard
        self.run = _compile(operators)
        resizing = [i for i, op in enumerate(operators) if isinstance(op, _RESIZING)]
        self.resizing = resizing[0] if resizing else len(operators)

    def process(self, batch: list) -> None:
        """Run every fused function over ``batch`` and pass the result on."""
        try:
            result = self.run(batch)
        except Exception:  # noqa: BLE001 - replayed one operator at a time to name the culprit
            result = self._replay(batch)
        size, kept = len(batch), len(result)
        for index, op in enumerate(self.operators):
            op.records_in += size if index <= self.resizing else kept
            op.records_out += size if index < self.resizing else kept
        if result:
            self.out(result)

    def process_input(self, ordinal: int, batch: list) -> None:
        """A fused run has one input."""
        self.process(batch)

    def _replay(self, batch: list) -> list:
        """Run ``batch`` through the operators one by one: the failing one raises its located error.
        The operators' own counters and outputs are restored whatever happens."""
        ops = self.operators
        saved = [(op.records_in, op.records_out, op.out) for op in ops]
        result: list = []
        for upstream, downstream in zip(ops, ops[1:], strict=False):
            upstream.out = downstream.process
        ops[-1].out = result.extend
        try:
            ops[0].process(batch)
        finally:
            for op, (records_in, records_out, out) in zip(ops, saved, strict=True):
                op.records_in, op.records_out, op.out = records_in, records_out, out
        return result  # the functions did not raise a second time


def _compile(operators: list[Operator]) -> Callable[[list], list]:
    """One list comprehension over a batch that applies every operator's function in order."""
    names = {f"f{i}": op.fn for i, op in enumerate(operators)}
    var, clauses, element = "x0", [], None
    last = len(operators) - 1
    for i, op in enumerate(operators):
        call = f"f{i}({var})"
        if isinstance(op, MapOperator):
            if i == last:
                element = call
            else:  # ``for x in [expr]`` is compiled as a plain assignment
                clauses.append(f"for x{i + 1} in [{call}]")
                var = f"x{i + 1}"
        elif isinstance(op, FilterOperator):
            clauses.append(f"if {call}")
        else:
            clauses.append(f"for x{i + 1} in {call}")
            var = f"x{i + 1}"
    source = (f"def run(batch):\n"
              f"    return [{element or var} for x0 in batch {' '.join(clauses)}]\n")
    namespace = dict(names)
    exec(compile(source, "<fused chain>", "exec"), namespace)  # the source is built above
    return namespace["run"]


def fuse(operators: list[Operator]) -> list:
    """The processing steps of a chain: runs of two or more stateless operators (with at most one
    that changes the record count) become a ``FusedOperator``; the others stay as they are (a
    filter on columns too: it filters a column batch whole)."""
    steps: list = []
    run: list[Operator] = []

    def close_run() -> None:
        if len(run) > 1:
            steps.append(FusedOperator(list(run)))
        else:
            steps.extend(run)
        run.clear()

    for op in operators:
        if type(op) in _STATELESS and not getattr(op, "takes_columns", False):
            if isinstance(op, _RESIZING) and any(isinstance(o, _RESIZING) for o in run):
                close_run()
            run.append(op)
        else:
            close_run()
            steps.append(op)
    close_run()
    return steps
