"""``attrs.frozen`` and ``attrs.define`` with one shared ``__repr__`` instead of one compiled per class.

attrs writes and compiles the source of every generated method of every class it builds; the
``__repr__`` (an f-string in a ``try``) is the dearest, about a third of a class's cost. A plain run
builds some seventy such classes while gyreflow is imported, so each compiles the methods it needs
and shares this ``__repr__``, which reads the class's fields when it is called and prints what
attrs' own would: ``Name(field=value, ...)``, leaving out ``repr=False`` fields, with a field's own
``repr`` callable where it has one and ``...`` for an object already being printed.
"""

from __future__ import annotations

import threading

import attrs

_printing = threading.local()


def record_repr(self) -> str:
    """``Name(a=1, b='x')``: what attrs' generated ``__repr__`` prints for ``self``."""
    try:
        seen = _printing.ids
    except AttributeError:
        seen = _printing.ids = set()
    if id(self) in seen:
        return "..."
    seen.add(id(self))
    try:
        parts = []
        for field in type(self).__attrs_attrs__:
            if field.repr is False:
                continue
            value = getattr(self, field.name) if field.init else getattr(self, field.name,
                                                                          attrs.NOTHING)
            text = repr(value) if field.repr is True else field.repr(value)
            parts.append(f"{field.name}={text}")
        name = self.__class__.__qualname__.rsplit(">.", 1)[-1]
        return f"{name}({', '.join(parts)})"
    finally:
        seen.discard(id(self))


def _shared_repr(build, maybe_cls, kwargs):
    if kwargs.get("repr") is not None:  # asked for (or against) explicitly: attrs decides
        return build(maybe_cls, **kwargs)

    def wrap(cls):
        if "__repr__" not in cls.__dict__:  # a class's own __repr__ stays, as attrs keeps it
            cls.__repr__ = record_repr
        return build(cls, repr=False, **kwargs)

    return wrap if maybe_cls is None else wrap(maybe_cls)


def frozen(maybe_cls=None, **kwargs):
    """``attrs.frozen`` (same arguments) with the shared ``record_repr``."""
    return _shared_repr(attrs.frozen, maybe_cls, kwargs)


def define(maybe_cls=None, **kwargs):
    """``attrs.define`` (same arguments) with the shared ``record_repr``."""
    return _shared_repr(attrs.define, maybe_cls, kwargs)
