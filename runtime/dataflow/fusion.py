"""Operator fusion: consecutive stateless operators of a chain run as one comprehension per batch.

A chain such as ``flat_map(str.split).map(lambda w: (w, 1))`` would build one list per operator and
walk each; fused, every record goes through all the user functions inside a single list
comprehension compiled for the chain (``[f1(x1) for x0 in batch for x1 in f0(x0)]``), so no
intermediate list is built and no per-operator call is made per batch. A fused run holds at most one
operator that changes the number of records (a ``filter`` or ``flat_map``), so each operator's record
counts follow from the batch's size before and after, and per-operator metrics stay exact. When a user
function raises, the line of the compiled comprehension it raised on names the operator, and the
comprehension's variables the record (no function is called again: it may have side effects).
"""

from __future__ import annotations

from collections.abc import Callable

from gyreflow.runtime.dataflow.operators import (
    FilterOperator,
    FlatMapOperator,
    MapOperator,
    Operator,
)
from gyreflow.runtime.errors import RecordError, locate_failure

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
        self.run, self.stages = _compile(operators)
        resizing = [i for i, op in enumerate(operators) if isinstance(op, _RESIZING)]
        self.resizing = resizing[0] if resizing else len(operators)

    def process(self, batch: list) -> None:
        """Run every fused function over ``batch`` and pass the result on."""
        remaining = iter(batch)
        try:
            result = self.run(remaining)
        except Exception as exc:
            raise self._locate(batch, remaining, exc) from exc
        size, kept = len(batch), len(result)
        for index, op in enumerate(self.operators):
            op.records_in += size if index <= self.resizing else kept
            op.records_out += size if index < self.resizing else kept
        if result:
            self.out(result)

    def process_input(self, ordinal: int, batch: list) -> None:
        """A fused run has one input."""
        self.process(batch)

    def _locate(self, batch: list, remaining, error: Exception) -> RecordError:
        """The operator whose function raised (by the line of the compiled comprehension) and the
        record it was given (the comprehension's variable for it, else the chain's input record)."""
        tb, frame, line = error.__traceback__, None, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == _FILENAME:  # the innermost: the comprehension's
                frame, line = tb.tb_frame, tb.tb_lineno
            tb = tb.tb_next
        if line not in self.stages:
            return RecordError(self.name, None, error, located=False)
        stage, var = self.stages[line]
        name = self.operators[stage].name
        if frame is not None and var in frame.f_locals:
            return RecordError(name, frame.f_locals[var], error)
        if var == "x0":
            return locate_failure(name, batch, remaining, error)
        return RecordError(name, None, error, located=False)


_FILENAME = "<fused chain>"


def _compile(operators: list[Operator]) -> tuple[Callable[[list], list],
                                                 dict[int, tuple[int, str]]]:
    """One list comprehension over a batch that applies every operator's function in order, and the
    line of its source that calls each operator's function (line -> the operator's index and the
    variable that holds its input record): a failure's traceback names the line, so the clauses are
    written one a line."""
    names = {f"f{i}": op.fn for i, op in enumerate(operators)}
    var, clauses, element, stages = "x0", [], None, {}
    last = len(operators) - 1
    first_clause = 5  # def, return [, element, for x0 in batch, then the clauses
    for i, op in enumerate(operators):
        call = f"f{i}({var})"
        if isinstance(op, MapOperator) and i == last:
            element = call
            stages[3] = (i, var)
            continue
        stages[first_clause + len(clauses)] = (i, var)
        if isinstance(op, MapOperator):  # ``for x in [expr]`` is compiled as a plain assignment
            clauses.append(f"for x{i + 1} in [{call}]")
            var = f"x{i + 1}"
        elif isinstance(op, FilterOperator):
            clauses.append(f"if {call}")
        else:
            clauses.append(f"for x{i + 1} in {call}")
            var = f"x{i + 1}"
    body = "".join(f"        {clause}\n" for clause in clauses)
    source = (f"def run(batch):\n"
              f"    return [\n"
              f"        {element or var}\n"
              f"        for x0 in batch\n"
              f"{body}"
              f"    ]\n")
    namespace = dict(names)
    exec(compile(source, _FILENAME, "exec"), namespace)  # the source is built above
    return namespace["run"], stages


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
