"""The DSL's errors: a statement gyreflow cannot run (``DslError``) and a query that names what does
not exist or uses what is not supported (``QueryError``)."""

from __future__ import annotations


class DslError(Exception):
    """A statement gyreflow cannot run: ``where`` names the statement, line and column."""

    def __init__(self, message: str, *, statement: int | None = None, line: int | None = None,
                 column: int | None = None, hint: str | None = None) -> None:
        self.message, self.statement, self.line, self.column, self.hint = (
            message, statement, line, column, hint)
        super().__init__(str(self))

    @property
    def where(self) -> str:
        parts = []
        if self.statement is not None:
            parts.append(f"statement {self.statement}")
        if self.line is not None:
            parts.append(f"line {self.line}" + (f", column {self.column}" if self.column else ""))
        return ", ".join(parts)

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class QueryError(DslError):
    """A query that names what does not exist or uses what is not supported."""
