"""Channel messages: batches of records (plain lists), window barriers and the end of input."""

from __future__ import annotations


class Barrier:
    """Marks the end of window ``window`` on one channel; ``checkpoint`` says whether the job driver
    asked for a snapshot of it (asynchronous barrier snapshots: the request travels with the data)."""

    __slots__ = ("checkpoint", "window")

    def __init__(self, window: int, checkpoint: bool = True) -> None:
        self.window = window
        self.checkpoint = checkpoint

    def __repr__(self) -> str:
        return f"Barrier({self.window})" if self.checkpoint else f"Barrier({self.window}, checkpoint=False)"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Barrier) and other.window == self.window
                and other.checkpoint == self.checkpoint)

    def __hash__(self) -> int:
        return hash(("barrier", self.window, self.checkpoint))


class EndOfInput:
    """Marks that no more messages follow on a channel."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END_OF_INPUT"

    def __reduce__(self):
        return "END_OF_INPUT"


END_OF_INPUT = EndOfInput()
