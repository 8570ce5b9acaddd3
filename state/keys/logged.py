"""Keyed state whose snapshots write what changed: a base value per key and the changes logged after
it, folded into a new base once they weigh as much as the base (a changelog table).

A value too large to rewrite when a little of it changes (a key group's share of a graph) is stored
as a *base* under its own key plus *changes* under keys of the same key group ("slots"), so that a
snapshot writes the changes a window recorded (``record``), not the value:

- level 0: one slot per snapshot, up to ``LEVEL`` of them;
- level 1: when level 0 is full, its changes and the new ones go, together, into one level-1 slot,
  and the level-0 slots are removed;
- level 2: when level 1 is full too, its changes, level 0's and the new ones go into one level-2
  slot, and the level-1 and level-0 slots are removed (each change is written three times in all);
- the base: when level 2 is full too, or the changes weigh as much as the base (1x to 2x, by key
  group), the value is written whole as the new base and every slot is removed. The first time a
  group's level 1 fills it is full at ``LEVEL / 2 + 1`` to ``LEVEL`` slots, by key group: groups
  that change at the same pace move their changes up and fold in different windows, not all in one.

A snapshot's folds write at most a ``FOLD_SHARE``-th of the table's bases (at least one fold, and
at least ``FOLD_FLOOR`` bytes): a fold past that budget waits for a later snapshot, its changes
logged meanwhile (a full level 2 takes up to ``SPARE`` more slots; with those full it folds
whatever the budget). Groups that reach their fold together (changing at the same pace) then
write their bases over several windows, not in one.

A fold by count comes every ``(LEVEL2 + 1) * (LEVEL + 1) ** 2`` windows (9,801), so a base is
rewritten by size, after changes of about its own weight (its rewrite then costs each change about
its own bytes once more, whatever the size of the base), unless its key group changes by less than
about a 9,801st of its weight a window. A level-2 slot holds about ``(LEVEL + 1) ** 2`` windows'
changes.

A restore reads the base and the slots of a version and applies their changes in order
(``apply_many``, one pass, where the table has one; else ``apply`` each): at most twice the base's
size on top of the base.
A key changed without a recorded change (``mark_changed``, ``put``) is written whole, so code that
knows nothing of the log stays correct. Retained versions read the same slots: a slot removed by a
fold is a removal in the version that folded, and older versions still read it.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from collections.abc import Callable
from functools import cache

from gyreflow.state.keys.keyed import KeyedTable, StateKind
from gyreflow.state.keys.keygroups import key_group_of

LEVEL = 32  # slots per level of levels 0 and 1
LEVEL2 = 8  # level-2 slots, each about (LEVEL + 1) ** 2 windows' changes
SPARE = 4  # level-2 slots beyond LEVEL2 for a group whose fold by count waits for the budget
SLOTS = 1 + 2 * LEVEL + LEVEL2 + SPARE  # the base, level 0, level 1, level 2 (a group's first 65
# slot keys are what they were when there was no level 2)
FOLD_SHARE = 32  # a snapshot's folds write at most this share of the table's bases ...
FOLD_FLOOR = 4 << 20  # ... or this many bytes, whichever is more


@cache
def slot_keys(max_parallelism: int, slots: int = SLOTS) -> tuple[tuple[int, ...], ...]:
    """Per key group, ``slots`` state keys that fall in it: negative ints from -1 down, in order,
    so that a group's first is the first negative int of the group (``chunk_key``'s)."""
    found: list[list[int]] = [[] for _ in range(max_parallelism)]
    missing = max_parallelism
    key = -1
    while missing:
        keys = found[key_group_of(key, max_parallelism)]
        if len(keys) < slots:
            keys.append(key)
            if len(keys) == slots:
                missing -= 1
        key -= 1
    return tuple(tuple(keys) for keys in found)


_RAW, _PICKLED = b"r", b"p"
_LENGTH = struct.Struct("<I")


def encode_changes(changes: list) -> bytes:
    """A list of changes as one blob: changes that are bytes (compact encodings) joined with their
    lengths, others pickled once for the list and compressed."""
    if all(type(change) is bytes for change in changes):
        return _RAW + b"".join(_LENGTH.pack(len(change)) + change for change in changes)
    return _PICKLED + zlib.compress(pickle.dumps(changes, protocol=5), 1)


def decode_changes(blob: bytes) -> list:
    """The changes ``encode_changes`` stored."""
    if blob[:1] == _PICKLED:
        return pickle.loads(zlib.decompress(blob[1:]))
    changes, at, view = [], 1, memoryview(blob)
    while at < len(blob):
        (length,) = _LENGTH.unpack_from(blob, at)
        changes.append(bytes(view[at + 4:at + 4 + length]))
        at += 4 + length
    return changes


class LoggedTable(KeyedTable):
    """A keyed table of large values whose snapshots write the changes recorded for them.

    ``apply(value, change)`` returns the value after one recorded change (``value`` None: there is
    no base yet); ``apply_many(value, changes)``, if given, the value after several in order (a
    restore's one pass); ``size(value)`` estimates the bytes of a value written whole. Keys must be
    the first slot key of their key group (``slot_keys``).
    """

    __slots__ = ("_logged", "_slot_keys", "_spreads", "apply", "apply_many", "base_sizes", "logs",
                 "max_parallelism", "pending", "size")

    def __init__(self, name: str, max_parallelism: int, apply: Callable, size: Callable,
                 apply_many: Callable | None = None) -> None:
        super().__init__(name, StateKind.VALUE)
        self.max_parallelism = max_parallelism
        self.apply = apply
        self.apply_many = apply_many
        self.size = size
        self.pending: dict[object, list] = {}  # key -> changes recorded since the last snapshot
        # key -> [level-0 blobs, level-1 merges, level-2 merges] stored after its base (only for
        # stored bases)
        self.logs: dict[object, list[list]] = {}
        self.base_sizes: dict[object, int] = {}
        self._logged: dict[object, int] = {}  # key -> bytes of its slots now (``logs``)
        self._slot_keys: dict[object, tuple[int, ...]] = {}  # key -> its group's slot keys
        # key -> [its fold's share of the base: 1 to 2, the level-1 slots it moves up at]
        self._spreads: dict[object, list] = {}

    def record(self, key: object, change: object) -> None:
        """``key``'s value in ``data`` was changed by ``change`` (``apply`` repeats it)."""
        self.pending.setdefault(key, []).append(change)
        self.changed.add(key)
        self.removed.discard(key)

    def _slots(self, key: object) -> tuple[int, ...]:
        found = self._slot_keys.get(key)
        if found is None:  # hashing the key costs more than the rest of its snapshot
            mp = self.max_parallelism
            found = self._slot_keys[key] = slot_keys(mp)[key_group_of(key, mp)]
        return found

    @property
    def stored_names(self) -> tuple[str, ...]:
        """The bases are stored under the table's name, the changes under ``NAME:log``: a store's
        own compaction of a key group's versions then merges small changes, never a base with
        them (a base is written again only whole, which supersedes the older one as it is)."""
        return (self.name, f"{self.name}:log")

    def take_named_changes(self) -> list[tuple[str, dict, set]]:
        """``take_changes`` split by the stored table: bases, then changes."""
        written, removed = self.take_changes()
        bases = _base_keys(self.max_parallelism)
        return [(self.name, {k: v for k, v in written.items() if k in bases},
                 {k for k in removed if k in bases}),
                (f"{self.name}:log", {k: v for k, v in written.items() if k not in bases},
                 {k for k in removed if k not in bases})]

    def take_changes(self) -> tuple[dict[object, object], set[object]]:
        """The slot keys to write (the changes, or a base written whole) and to remove."""
        written: dict[object, object] = {}
        removed: set[object] = set()
        pending = self.pending
        budget = max(FOLD_FLOOR, sum(self.base_sizes.values()) // FOLD_SHARE)
        folded = 0  # bytes of the values written whole so far in this snapshot
        for key in self.removed:
            removed.update(self._live(key))
            removed.add(key)
            self.logs.pop(key, None)
            self.base_sizes.pop(key, None)
            self._logged.pop(key, None)
        for key in sorted(self.changed):  # in one order in every process: the same folds wait
            value = self.data.get(key)
            if value is None:
                continue
            changes = pending.get(key)
            log = self.logs.get(key)
            blob = None if changes is None or log is None else encode_changes(changes)
            if blob is None or (self._fold_due(key, log, len(blob)) and (
                    not folded or folded + self.base_sizes.get(key, 0) <= budget
                    or not self._has_room(key, log))):
                removed.update(self._live(key))
                written[key] = value
                self.logs[key] = [[], [], []]
                self.base_sizes[key] = self.size(value)
                self._logged[key] = 0
                folded += self.base_sizes[key]
                continue
            slots = self._slots(key)
            level0, level1, level2 = log
            self._logged[key] = self._logged_bytes(key, log) + len(blob)
            if len(level0) < LEVEL:
                written[slots[1 + len(level0)]] = blob
                level0.append(blob)
            elif len(level1) < self._spreads[key][1]:
                merged = (*level0, blob)
                written[slots[1 + LEVEL + len(level1)]] = merged
                removed.update(slots[1:1 + len(level0)])
                level1.append(merged)
                log[0] = []
            else:  # level 1 is full: it, level 0 and the new blob move up as one level-2 slot
                self._spreads[key][1] = LEVEL
                merged = (*level1, (*level0, blob))
                written[slots[1 + 2 * LEVEL + len(level2)]] = merged
                removed.update(self._live(key, levels=2))
                level2.append(merged)
                log[0], log[1] = [], []
        removed.difference_update(written)
        self.changed = set()
        self.removed = set()
        self.pending = {}
        return written, removed

    def _fold_due(self, key: object, log: list, size: int) -> bool:
        # By key group, so that groups changing at the same pace fold in different windows, not
        # all in one: the changes weigh 1x to 2x the base, or level 2 is full; the first time a
        # group's level 1 fills (in this process) it is full at LEVEL / 2 + 1 to LEVEL slots, so
        # that the groups' moves to level 2 and folds by count keep different phases after it.
        spread = self._spreads.get(key)
        if spread is None:  # hashing the key costs more than the rest of this
            step = key_group_of(key, self.max_parallelism) * 7 % 16
            spread = self._spreads[key] = [1 + step / 16, max(1, LEVEL - LEVEL * step // 32)]
        level0, level1, level2 = log
        if len(level0) == LEVEL and len(level1) >= spread[1] and len(level2) >= LEVEL2:
            spread[1] = LEVEL
            return True
        logged = size + self._logged_bytes(key, log)
        return logged >= spread[0] * self.base_sizes.get(key, 0)

    def _has_room(self, key: object, log: list) -> bool:
        """Whether ``key``'s next changes can be logged instead of folded (a slot is free)."""
        level0, level1, level2 = log
        return (len(level0) < LEVEL or len(level1) < self._spreads[key][1]
                or len(level2) < LEVEL2 + SPARE)

    def _logged_bytes(self, key: object, log: list) -> int:
        """The bytes of ``key``'s slots (kept as they are written: summing them per snapshot
        cost as much as the rest of it)."""
        found = self._logged.get(key)
        if found is None:
            found = self._logged[key] = sum(map(len, _blobs(log)))
        return found

    def _live(self, key: object, levels: int = 3) -> list:
        """The slot keys holding ``key``'s changes now (of its first ``levels`` levels)."""
        log = self.logs.get(key)
        if log is None:
            return []
        slots = self._slots(key)
        live = [*slots[1:1 + len(log[0])], *slots[1 + LEVEL:1 + LEVEL + len(log[1])]]
        if levels > 2:
            live.extend(slots[1 + 2 * LEVEL:1 + 2 * LEVEL + len(log[2])])
        return live

    def after_restore(self, relaid: bool) -> None:
        """``data`` holds what a version stored (bases and slots): apply each key's changes to its
        base; ``relaid`` (key groups moved): every value is written whole next."""
        data = self.data
        stored, self.data = data, {}
        self.logs, self.base_sizes, self.pending, self._logged = {}, {}, {}, {}
        slot_table = slot_keys(self.max_parallelism)
        for key in [k for k in stored if k in _base_keys(self.max_parallelism)]:
            slots = slot_table[key_group_of(key, self.max_parallelism)]
            value = stored[key]
            size = self.size(value)
            log = [_present(stored, slots[1:1 + LEVEL]),
                   _present(stored, slots[1 + LEVEL:1 + 2 * LEVEL]),
                   _present(stored, slots[1 + 2 * LEVEL:1 + 2 * LEVEL + LEVEL2 + SPARE])]
            changes = [change for blob in _blobs(log) for change in decode_changes(blob)]
            if self.apply_many is not None:
                value = self.apply_many(value, changes) if changes else value
            else:
                for change in changes:
                    value = self.apply(value, change)
            self.data[key] = value
            self.logs[key] = log
            self.base_sizes[key] = size
        self.changed = set(self.data) if relaid else set()
        self.removed = set()
        if relaid:
            # The new layout writes every base whole (its first snapshot needs nothing older), and
            # the slots read with them are removed in the same snapshot: left in the store, they
            # would be read again with the new base, and their changes applied a second time.
            self.removed = {slot for key in self.logs for slot in self._live(key)}
            self.logs = {}

    def export(self) -> tuple:
        """What another process needs to go on with this table (see ``take_over``)."""
        return (self.data, self.changed, self.removed, self.pending, self.logs, self.base_sizes)

    def take_over(self, exported: tuple) -> None:
        """Go on from ``export``'s tuple (a plain table's ``(data, changed, removed)`` too)."""
        self.data, self.changed, self.removed = exported[:3]
        self._logged = {}
        if len(exported) > 3:
            self.pending, self.logs, self.base_sizes = exported[3:]
        else:  # no log known: every value is written whole next
            self.pending, self.logs, self.base_sizes = {}, {}, {}


def logged_table(state, name: str, apply: Callable, size: Callable,
                 apply_many: Callable | None = None) -> LoggedTable:
    """The table ``name`` of keyed state ``state`` (a ``KeyedStateStore``) as a ``LoggedTable``,
    made on first use (a plain table of that name, made by code that knew nothing of the log, is
    taken over)."""
    table = state.tables.get(name)
    if type(table) is LoggedTable:
        return table
    logged = LoggedTable(name, state.max_parallelism, apply, size, apply_many)
    if table is not None:
        logged.take_over(table.export())
    state.tables[name] = logged
    return logged


@cache
def _base_keys(max_parallelism: int) -> frozenset:
    return frozenset(slots[0] for slots in slot_keys(max_parallelism))


def _blobs(log: list) -> list:
    """A key's logged blobs, oldest first: level 2's merges, level 1's, then level 0."""
    level0, level1, level2 = log
    found = [blob for merged in level2 for blobs in merged for blob in blobs]
    found.extend(blob for blobs in level1 for blob in blobs)
    found.extend(level0)
    return found


def _present(stored: dict, slots) -> list:
    """The values of ``slots`` up to the first one missing."""
    found = []
    for slot in slots:
        if slot not in stored:
            break
        found.append(stored[slot])
    return found
