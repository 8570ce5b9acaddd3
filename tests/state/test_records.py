"""Classes built by ``gyreflow.state.records`` print, compare, pickle and refuse assignment exactly as
the same classes built by ``attrs.frozen`` / ``attrs.define`` do (attrs' generated methods are the
oracle); the windows users write print as before."""

from __future__ import annotations

import pickle

import attrs
import pytest

from gyreflow.state import records


def shapes(frozen, define):
    """The same class shapes, built with the decorators given: attrs' own or ``records``'."""

    @frozen
    class Plain:
        a: int
        b: str = "x"
        c: tuple = ()

    @frozen(eq=False)
    class Hidden:
        shown: int
        secret: str = attrs.field(default="", repr=False)
        custom: int = attrs.field(default=3, repr=lambda v: f"<{v}>")
        later: int = attrs.field(init=False, default=7)

    @frozen
    class Child(Plain):
        d: object = None

    @frozen
    class Own:
        a: int

        def __repr__(self) -> str:
            return "own"

    @define
    class Box:
        items: list = attrs.field(factory=list)

    return Plain, Hidden, Child, Own, Box


def instances(frozen, define) -> list:
    plain, hidden, child, own, box = shapes(frozen, define)
    loop = box()
    loop.items.append(loop)  # printed as "..." where it recurs
    return [plain(1), plain(2, "y", (1, "z")), hidden(5, "pw"), hidden(6, custom=9),
            child(1, d=plain(3)), child(2, d=[hidden(1)]), own(1), box([1, 2]), loop, box()]


def test_a_record_prints_as_attrs_prints_it():
    ours = [repr(x) for x in instances(records.frozen, records.define)]
    theirs = [repr(x) for x in instances(attrs.frozen, attrs.define)]
    assert ours == theirs
    assert ours[:4] == ["Plain(a=1, b='x', c=())", "Plain(a=2, b='y', c=(1, 'z'))",
                        "Hidden(shown=5, custom=<3>, later=7)", "Hidden(shown=6, custom=<9>, later=7)"]
    assert ours[8] == "Box(items=[...])"


def equalities(frozen, define) -> tuple:
    """Which pairs of a set of instances compare equal (==, !=), which hash alike, and which
    classes are hashable at all, for classes built with ``frozen`` and ``define``."""

    @frozen
    class Keyed:
        name: str = attrs.field(eq=str.lower)
        note: str = attrs.field(default="", eq=False)
        value: float = 0.0

    @frozen
    class Sub(Keyed):
        extra: int = 0

    @define
    class Mutable:
        items: list = attrs.field(factory=list)

    nan = float("nan")
    things = [Keyed("A"), Keyed("a", "other note"), Keyed("b"), Keyed("a", value=nan),
              Keyed("a", value=nan), Sub("a"), Sub("A", extra=0), Mutable([1]), Mutable([1]),
              Mutable([2]), "a", None]
    things[4] = Keyed("A", value=nan)
    same = nan  # one NaN object: a field equal to itself only where == says so, as in attrs
    things.append(Keyed("a", value=same))
    things.append(Keyed("A", value=same))
    pairs = [(i, j, a == b, a != b) for i, a in enumerate(things) for j, b in enumerate(things)]
    hashable = [getattr(type(x), "__hash__", None) is not None for x in things]
    hashes = [(i, j, hash(a) == hash(b)) for i, a in enumerate(things) for j, b in enumerate(things)
              if hashable[i] and hashable[j] and a == b]
    return pairs, hashable, hashes


def test_a_record_compares_and_hashes_as_attrs_makes_it():
    assert equalities(records.frozen, records.define) == equalities(attrs.frozen, attrs.define)


def test_a_record_compares_hashes_and_is_frozen_as_attrs_makes_it():
    plain, hidden, child, _own, box = shapes(records.frozen, records.define)
    assert plain(1) == plain(1) and plain(1) != plain(2) and hash(plain(1)) == hash(plain(1))
    assert hidden(1) != hidden(1)  # eq=False: identity, as attrs
    assert child(1) != plain(1)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        plain(1).a = 2
    item = box()
    item.items = [1]
    assert item == box([1])
    assert attrs.evolve(plain(1), b="y") == plain(1, "y")


def test_a_public_window_prints_and_pickles_as_before():
    from gyreflow.api import AllWindow, Session, SizeTumblingWindow, Sliding, Tumbling

    assert [repr(w) for w in (SizeTumblingWindow(3), Tumbling(10), AllWindow())] == [
        "SizeTumblingWindow(size=3)", "Tumbling(size=10)", "AllWindow()"]
    for window in (SizeTumblingWindow(3), Tumbling(10), Sliding(10, 5), Session(2)):
        assert pickle.loads(pickle.dumps(window)) == window
        assert repr(pickle.loads(pickle.dumps(window))) == repr(window)
