"""Windows: how a source's input is cut into numbered windows (ids 1, 2, 3, ...)."""

from __future__ import annotations

import numbers

import attrs

from gyreflow.runtime.errors import PipelineDefinitionError
from gyreflow.state.records import frozen


class WindowSpecError(PipelineDefinitionError, ValueError):
    """A window or window assigner built with a size, slide or gap it cannot cut windows with.

    >>> try:
    ...     SizeTumblingWindow(0)
    ... except WindowSpecError as error:
    ...     print(error)
    SizeTumblingWindow(size=0): size must be a whole number of records, 1 or more
    """


def _whole_count(instance, attribute, value) -> None:
    """Refuse a count below 1 or not a whole number, naming the window kind and the value (the
    attrs validator's own message names neither the class nor the user's call)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return
    msg = (f"{type(instance).__name__}({attribute.name}={value!r}): {attribute.name} must be a "
           f"whole number of records, 1 or more")
    raise WindowSpecError(msg)


def _positive_seconds(instance, attribute, value) -> None:
    """Refuse a duration that is not a number above 0, naming the window kind and the value."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and value > 0:
        return
    msg = (f"{type(instance).__name__}({attribute.name}={value!r}): {attribute.name} must be a "
           f"number of seconds above 0")
    raise WindowSpecError(msg)


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

    size: int = attrs.field(validator=_whole_count)

    def window_of(self, position: int) -> int:
        """The window id of the record at 0-based ``position`` in a source task's input."""
        return position // self.size + 1

    def describe(self) -> str:
        return f"SizeTumblingWindow({self.size})"


@frozen
class TimeTumblingWindow(Window):
    """Processing-time windows of ``seconds``: a window ends when its time is up (checked per batch)."""

    seconds: float = attrs.field(validator=_positive_seconds)

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

    size: float = attrs.field(validator=_positive_seconds)

    def spec(self) -> tuple:
        return ("tumbling", float(self.size))


@frozen
class Sliding:
    """Event-time windows ``[k * slide, k * slide + size)``: each record is in ``size / slide``
    of them (``0 < slide <= size``)."""

    size: float = attrs.field(validator=_positive_seconds)
    slide: float = attrs.field(validator=_positive_seconds)

    def __attrs_post_init__(self) -> None:
        if self.slide > self.size:
            msg = f"Sliding: slide ({self.slide}) must not exceed size ({self.size})"
            raise WindowSpecError(msg)

    def spec(self) -> tuple:
        return ("sliding", float(self.size), float(self.slide))


@frozen
class Session:
    """Event-time sessions per key: an event at ``t`` opens ``[t, t + gap)``; sessions of a key that
    overlap or touch merge; a session ends at its last event's time plus ``gap``."""

    gap: float = attrs.field(validator=_positive_seconds)

    def spec(self) -> tuple:
        return ("session", float(self.gap))
