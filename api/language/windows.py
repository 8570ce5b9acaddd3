"""Windows: how a source's input is cut into numbered windows (ids 1, 2, 3, ...)."""

from __future__ import annotations

import attrs

from gyreflow.state.records import frozen


@frozen
class Window:
    """Base of the window kinds; a source task cuts its own input into windows."""

    def describe(self) -> str:
        """A short text for ``explain``."""
        return type(self).__name__


@frozen
class SizeTumblingWindow(Window):
    """``size`` records per source task per window (the last window may be shorter).

    >>> SizeTumblingWindow(3).window_of(7)   # the 8th record of a source task
    3
    """

    size: int = attrs.field(validator=attrs.validators.ge(1))

    def window_of(self, position: int) -> int:
        """The window id of the record at 0-based ``position`` in a source task's input."""
        return position // self.size + 1

    def describe(self) -> str:
        return f"SizeTumblingWindow({self.size})"


@frozen
class TimeTumblingWindow(Window):
    """Processing-time windows of ``seconds``: a window ends when its time is up (checked per batch)."""

    seconds: float = attrs.field(validator=attrs.validators.gt(0))

    def describe(self) -> str:
        return f"TimeTumblingWindow({self.seconds}s)"


@frozen
class AllWindow(Window):
    """The whole bounded input is one window: a batch job."""

    def describe(self) -> str:
        return "AllWindow()"


# --- event-time window assigners (for ``KeyedStream.window`` after ``with_timestamps``) ---------


@frozen
class Tumbling:
    """Event-time windows ``[k * size, (k + 1) * size)`` seconds, aligned to the epoch."""

    size: float = attrs.field(validator=attrs.validators.gt(0))

    def spec(self) -> tuple:
        return ("tumbling", float(self.size))


@frozen
class Sliding:
    """Event-time windows ``[k * slide, k * slide + size)``: each record is in ``size / slide``
    of them (``0 < slide <= size``)."""

    size: float = attrs.field(validator=attrs.validators.gt(0))
    slide: float = attrs.field(validator=attrs.validators.gt(0))

    def __attrs_post_init__(self) -> None:
        if self.slide > self.size:
            msg = f"Sliding: slide ({self.slide}) must not exceed size ({self.size})"
            raise ValueError(msg)

    def spec(self) -> tuple:
        return ("sliding", float(self.size), float(self.slide))


@frozen
class Session:
    """Event-time sessions per key: an event at ``t`` opens ``[t, t + gap)``; sessions of a key that
    overlap or touch merge; a session ends at its last event's time plus ``gap``."""

    gap: float = attrs.field(validator=attrs.validators.gt(0))

    def spec(self) -> tuple:
        return ("session", float(self.gap))
