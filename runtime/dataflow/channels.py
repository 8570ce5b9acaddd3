"""Channel messages: batches of records (plain lists), window barriers and the end of input."""

from __future__ import annotations


class Barrier:
    """Marks the end of window ``window`` on one channel."""

    __slots__ = ("window",)

    def __init__(self, window: int) -> None:
        self.window = window

    def __repr__(self) -> str:
        return f"Barrier({self.window})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Barrier) and other.window == self.window

    def __hash__(self) -> int:
        return hash(("barrier", self.window))


class EndOfInput:
    """Marks that no more messages follow on a channel."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END_OF_INPUT"

    def __reduce__(self):
        return "END_OF_INPUT"


END_OF_INPUT = EndOfInput()
