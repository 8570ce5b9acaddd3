"""Keyed state: value, list and map state per key, grouped by key group for snapshots and rescaling."""

from __future__ import annotations

import enum
from collections.abc import Iterator

from gyreflow.state.keys.keygroups import key_group_of


class StateKind(enum.Enum):
    """The shape of a piece of keyed state."""

    VALUE = "value"
    LIST = "list"
    MAP = "map"


class KeyedTable:
    """One named piece of keyed state: a dict from key to value plus the keys changed since the last snapshot.

    Operators on the hot path read and write ``data`` directly and report what they changed with
    ``mark_changed`` once per window; everything else goes through the typed views below.
    """

    __slots__ = ("changed", "data", "kind", "name", "removed")

    def __init__(self, name: str, kind: StateKind) -> None:
        self.name = name
        self.kind = kind
        self.data: dict[object, object] = {}
        self.changed: set[object] = set()
        self.removed: set[object] = set()

    def mark_changed(self, keys) -> None:
        """Record that ``keys`` were written since the last snapshot."""
        self.changed.update(keys)

    def put(self, key: object, value: object) -> None:
        """Set ``key`` to ``value``."""
        self.data[key] = value
        self.changed.add(key)
        self.removed.discard(key)

    def delete(self, key: object) -> None:
        """Remove ``key`` if present."""
        if self.data.pop(key, _MISSING) is not _MISSING:
            self.removed.add(key)
            self.changed.discard(key)

    def take_changes(self) -> tuple[dict[object, object], set[object]]:
        """Return ``(changed key -> value, removed keys)`` since the last call and reset the tracking."""
        data = self.data
        changed = {key: data[key] for key in self.changed if key in data}
        removed = self.removed
        if removed:
            # A key deleted, then written again in ``data`` directly (the hot path, and
            # ``mark_changed``, do not undo its deletion as ``put`` does): it is live, written.
            back = [key for key in removed if key in data]
            for key in back:
                changed[key] = data[key]
            removed.difference_update(back)
        self.changed = set()
        self.removed = set()
        return changed, removed

    @property
    def stored_names(self) -> tuple[str, ...]:
        """The names the table is stored under."""
        return (self.name,)

    def take_named_changes(self) -> list[tuple[str, dict, set]]:
        """``take_changes`` by stored table name."""
        return [(self.name, *self.take_changes())]

    def after_restore(self, relaid: bool) -> None:
        """``data`` was read back from a snapshot; ``relaid`` (key groups moved): every key is
        written again in the next snapshot."""
        self.changed = set(self.data) if relaid else set()
        self.removed = set()

    def export(self) -> tuple:
        """What another process needs to go on with this table (see ``take_over``)."""
        return (self.data, self.changed, self.removed)

    def take_over(self, exported: tuple) -> None:
        """Go on from ``export``'s tuple."""
        self.data, self.changed, self.removed = exported[:3]


class TransientTable(KeyedTable):
    """A keyed table that lives in process memory only: its snapshots write nothing, a restore
    finds it empty. For state a restored task never reads (it is rebuilt before it is used)."""

    __slots__ = ()

    def take_changes(self) -> tuple[dict[object, object], set[object]]:
        """Nothing to write; the tracking is reset."""
        self.changed = set()
        self.removed = set()
        return {}, set()


_MISSING = object()


class ValueState:
    """One value per key.

    >>> store = KeyedStateStore(max_parallelism=8)
    >>> counts = store.value_state("counts")
    >>> counts.put("a", 1); counts.get("a"), counts.get("b", 0)
    (1, 0)
    """

    __slots__ = ("table",)

    def __init__(self, table: KeyedTable) -> None:
        self.table = table

    def get(self, key: object, default: object = None) -> object:
        """Return the value of ``key`` or ``default``."""
        return self.table.data.get(key, default)

    def put(self, key: object, value: object) -> None:
        """Set the value of ``key``."""
        self.table.put(key, value)

    def delete(self, key: object) -> None:
        """Forget ``key``."""
        self.table.delete(key)


class ListState:
    """A list of values per key.

    >>> store = KeyedStateStore(max_parallelism=8)
    >>> seen = store.list_state("seen")
    >>> seen.append("a", 1); seen.append("a", 2); seen.get("a")
    [1, 2]
    """

    __slots__ = ("table",)

    def __init__(self, table: KeyedTable) -> None:
        self.table = table

    def get(self, key: object) -> list:
        """Return a copy of the list of ``key`` (empty if none)."""
        return list(self.table.data.get(key, ()))

    def append(self, key: object, value: object) -> None:
        """Append ``value`` to the list of ``key``."""
        data = self.table.data
        current = data.get(key)
        if current is None:
            data[key] = [value]
        else:
            current.append(value)
        self.table.changed.add(key)
        self.table.removed.discard(key)

    def clear(self, key: object) -> None:
        """Empty the list of ``key``."""
        self.table.delete(key)


class MapState:
    """A dict per key.

    >>> store = KeyedStateStore(max_parallelism=8)
    >>> edges = store.map_state("edges")
    >>> edges.put("a", "b", 1.5); edges.get("a", "b"), edges.items("a")
    (1.5, [('b', 1.5)])
    """

    __slots__ = ("table",)

    def __init__(self, table: KeyedTable) -> None:
        self.table = table

    def get(self, key: object, map_key: object, default: object = None) -> object:
        """Return the entry ``map_key`` of ``key``'s map, or ``default``."""
        return self.table.data.get(key, {}).get(map_key, default)

    def put(self, key: object, map_key: object, value: object) -> None:
        """Set the entry ``map_key`` of ``key``'s map."""
        self.table.data.setdefault(key, {})[map_key] = value
        self.table.changed.add(key)
        self.table.removed.discard(key)

    def items(self, key: object) -> list[tuple[object, object]]:
        """Return the entries of ``key``'s map."""
        return list(self.table.data.get(key, {}).items())

    def remove(self, key: object, map_key: object) -> None:
        """Remove one entry of ``key``'s map."""
        entries = self.table.data.get(key)
        if entries is not None and entries.pop(map_key, _MISSING) is not _MISSING:
            self.table.changed.add(key)


_VIEWS = {StateKind.VALUE: ValueState, StateKind.LIST: ListState, StateKind.MAP: MapState}


class KeyedStateStore:
    """The keyed state of one task: named tables, each split by key group when snapshotted.

    Working state lives in process memory; a ``StateBackend`` makes it durable per window.
    """

    def __init__(self, max_parallelism: int, key_groups: range | None = None) -> None:
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups if key_groups is not None else range(max_parallelism)
        self.tables: dict[str, KeyedTable] = {}
        self.durable = True  # the backend's commits outlive the machine (``StateBackend.durable``)

    def table(self, name: str, kind: StateKind = StateKind.VALUE) -> KeyedTable:
        """Return the table ``name``, creating it on first use."""
        table = self.tables.get(name)
        if table is None:
            table = self.tables[name] = KeyedTable(name, kind)
        elif table.kind is not kind:
            msg = f"state {name!r} is a {table.kind.value} state, not a {kind.value} state"
            raise TypeError(msg)
        return table

    def transient_table(self, name: str) -> KeyedTable:
        """Return the table ``name`` that snapshots leave out (``TransientTable``)."""
        table = self.tables.get(name)
        if type(table) is not TransientTable:
            transient = TransientTable(name, StateKind.VALUE)
            if table is not None:
                transient.take_over(table.export())
            table = self.tables[name] = transient
        return table

    def value_state(self, name: str) -> ValueState:
        """Return the value state ``name``."""
        return ValueState(self.table(name, StateKind.VALUE))

    def list_state(self, name: str) -> ListState:
        """Return the list state ``name``."""
        return ListState(self.table(name, StateKind.LIST))

    def map_state(self, name: str) -> MapState:
        """Return the map state ``name``."""
        return MapState(self.table(name, StateKind.MAP))

    def view(self, name: str, kind: StateKind):
        """Return the typed view of table ``name``."""
        return _VIEWS[kind](self.table(name, kind))

    def split_by_key_group(
        self, entries: dict[object, object]
    ) -> Iterator[tuple[int, dict[object, object]]]:
        """Yield ``(key group, entries of that group)`` for a dict of keyed entries."""
        groups: dict[int, dict[object, object]] = {}
        mp = self.max_parallelism
        for key, value in entries.items():
            groups.setdefault(key_group_of(key, mp), {})[key] = value
        yield from sorted(groups.items(), key=lambda item: item[0])
