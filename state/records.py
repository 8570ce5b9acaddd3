"""``attrs.frozen`` and ``attrs.define`` with shared ``__repr__``, ``__eq__`` and ``__hash__``.

attrs writes and compiles the source of every generated method of every class it builds; the
``__repr__`` (an f-string in a ``try``) is the dearest, about a third of a class's cost, and
``__eq__`` with ``__hash__`` about a fifth. A plain run builds some seventy such classes while
gyreflow is imported, so each compiles only its ``__init__`` and shares these methods, which read
the class's fields when they are called and do what attrs' own do: ``Name(field=value, ...)``
leaving out ``repr=False`` fields (a field's own ``repr`` callable where it has one, ``...`` for an
object already being printed); equal when of the same class with equal fields (``eq=False`` fields
left out, a field's ``eq`` key applied); frozen classes hash their ``hash`` fields, mutable ones
are unhashable. Any other ``eq``/``hash`` setting is attrs' own.
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


def record_eq(self, other) -> bool:
    """attrs' ``__eq__``: the same class and equal fields (``NotImplemented`` for another class)."""
    if other.__class__ is not self.__class__:
        return NotImplemented
    result = True
    for field in self.__class__.__attrs_attrs__:
        if field.eq:
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if field.eq_key is not None:
                mine, theirs = field.eq_key(mine), field.eq_key(theirs)
            result = mine == theirs  # ``a == b and c == d ...``, as attrs writes it
            if not result:
                return result
    return result


def record_ne(self, other) -> bool:
    """attrs' ``__ne__``: the negation of ``__eq__``."""
    result = self.__eq__(other)
    if result is NotImplemented:
        return NotImplemented
    return not result


def record_hash(self) -> int:
    """attrs' ``__hash__`` of a frozen class: its class and the fields that hash (those compared)."""
    values = [self.__class__.__qualname__]
    for field in self.__class__.__attrs_attrs__:
        if field.hash is True or (field.hash is None and field.eq is True):
            value = getattr(self, field.name)
            values.append(value if field.eq_key is None else field.eq_key(value))
    return hash(tuple(values))


_ATTRS_DECIDE_EQ = ("eq", "order", "hash", "unsafe_hash", "cache_hash", "cmp")


def _shared(build, maybe_cls, kwargs, is_frozen):
    def wrap(cls):
        options = dict(kwargs)
        if options.get("repr") is None and "__repr__" not in cls.__dict__:  # else attrs decides
            options["repr"] = False
            cls.__repr__ = record_repr
        own = any(name in cls.__dict__ for name in ("__eq__", "__ne__", "__hash__"))
        if not own and all(options.get(name) is None for name in _ATTRS_DECIDE_EQ):
            options["eq"] = False
            cls.__eq__, cls.__ne__ = record_eq, record_ne
            cls.__hash__ = record_hash if is_frozen else None  # attrs: a mutable one is unhashable
        return build(cls, **options)

    return wrap if maybe_cls is None else wrap(maybe_cls)


def frozen(maybe_cls=None, **kwargs):
    """``attrs.frozen`` (same arguments) with the shared methods."""
    return _shared(attrs.frozen, maybe_cls, kwargs, is_frozen=True)


def define(maybe_cls=None, **kwargs):
    """``attrs.define`` (same arguments) with the shared methods."""
    return _shared(attrs.define, maybe_cls, kwargs, is_frozen=kwargs.get("frozen", False))
