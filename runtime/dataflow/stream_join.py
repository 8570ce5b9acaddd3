"""The regular stream join: two keyed streams joined across windows, each key's rows of both sides
kept in keyed state, each window joining what it brought with everything so far.

A window ``w`` emits, per key it touched, ``new left x (old right + new right)`` and ``old left x new
right`` (new x new once), so its cost follows its own rows and their matches, not the rows so far.
Outer joins emit a new row that has no match yet (on the other side, so far) with ``None`` for the
other side at the window's end, and its later matches as they come; nothing is retracted.

State is a changelog table (``state.keys.logged``) with one value per key group (``key -> entry``):
a snapshot writes the rows the window added and the keys it expired, not the key groups' rows, and
a bounded number of changes is folded into a new base now and then. With ``ttl`` (windows), a row
of window ``a`` is dropped at the end of window ``a + ttl``: it meets the rows of windows ``a`` to
``a + ttl``, as ``join_table``'s values do.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable

from gyreflow.runtime.dataflow.operators import Operator
from gyreflow.runtime.errors import RecordError
from gyreflow.state.keys.keygroups import key_group_of
from gyreflow.state.keys.logged import logged_table, slot_keys

HOWS = ("inner", "left", "right", "full")

# An entry per key: [left rows, right rows, left runs, right runs]; a run is [window, count] of the
# rows a window added to that side (kept only with a ttl, to drop the oldest rows first).
LEFT, RIGHT, LEFT_RUNS, RIGHT_RUNS = range(4)


def apply_change(value: dict | None, change: tuple) -> dict:
    """A key group's ``key -> entry`` after one window's change ``(window, added, expired, bound)``:
    ``added`` is ``(key, side, rows)`` appended; each key of ``expired`` loses its rows of windows
    up to ``bound`` (and goes when it has none left)."""
    groups = {} if value is None else value
    window, added, expired, bound = change
    for key, side, rows in added:
        entry = groups.get(key)
        if entry is None:
            entry = groups[key] = [[], [], [], []]
        entry[side].extend(rows)
        runs = entry[side + 2]
        if runs and runs[-1][0] == window:
            runs[-1][1] += len(rows)
        else:
            runs.append([window, len(rows)])
    for key in expired:
        entry = groups.get(key)
        if entry is not None and drop_through(entry, bound):
            del groups[key]
    return groups


def drop_through(entry: list, bound: int) -> bool:
    """Drop an entry's rows of windows up to ``bound``; whether it has no row left."""
    for side in (LEFT, RIGHT):
        runs = entry[side + 2]
        dropped = 0
        while runs and runs[0][0] <= bound:
            dropped += runs.pop(0)[1]
        if dropped:
            del entry[side][:dropped]
    return not entry[LEFT] and not entry[RIGHT]


def group_bytes(value: dict) -> int:
    """The bytes of a key group's entries written whole (the base a fold writes)."""
    return len(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def key_pair(key, left, right) -> tuple:
    """The default output of a join: ``(key, left, right)``."""
    return (key, left, right)


class StreamJoinOperator(Operator):
    """Join of two keyed inputs across windows (``how``: inner, left, right, full); emits
    ``fn(left, right)`` (``None`` for the missing side of an outer row), ``(key, left, right)``
    when ``fn`` is None."""

    emits_on_finish = True

    def __init__(self, name: str, left_key: Callable, right_key: Callable, fn: Callable | None,
                 how: str = "inner", ttl: int | None = None) -> None:
        super().__init__(name)
        if how not in HOWS:
            msg = f"join how={how!r}: one of {', '.join(HOWS)}"
            raise ValueError(msg)
        self.keys = (left_key, right_key)
        self.fn = fn
        self.how = how
        self.ttl = ttl
        self.new: tuple[dict, dict] = ({}, {})  # this window's rows per key, per side
        self.groups: dict = {}  # key -> the slot key of its key group (memoised)
        self.expiring: dict[int, set] = {}  # window -> keys that got rows in it (with a ttl)

    def open(self, ctx) -> None:
        super().open(ctx)
        self.table = logged_table(ctx.state, self.name, apply_change, group_bytes)
        self.slots = slot_keys(ctx.state.max_parallelism)
        self.max_parallelism = ctx.state.max_parallelism

    def restored(self) -> None:
        """Rebuild the windows whose rows may expire from the restored entries."""
        self.new = ({}, {})
        self.expiring = {}
        if self.ttl is None:
            return
        for entries in self.table.data.values():
            for key, entry in entries.items():
                for runs in (entry[LEFT_RUNS], entry[RIGHT_RUNS]):
                    for window, _ in runs:
                        self.expiring.setdefault(window, set()).add(key)

    def process(self, batch: list) -> None:
        self.process_input(0, batch)

    def process_input(self, ordinal: int, batch: list) -> None:
        self.records_in += len(batch)
        key_fn, new = self.keys[ordinal], self.new[ordinal]
        record = None
        try:
            for record in batch:
                key = key_fn(record)
                rows = new.get(key)
                if rows is None:
                    new[key] = [record]
                else:
                    rows.append(record)
        except Exception as exc:
            raise RecordError(self.name, record, exc) from exc

    def _slot(self, key) -> int:
        slot = self.groups.get(key)
        if slot is None:
            if len(self.groups) > 1 << 16:  # keys that come once (ids) would only fill it
                self.groups.clear()
            slot = self.groups[key] = self.slots[key_group_of(key, self.max_parallelism)][0]
        return slot

    def finish(self, window: int) -> None:
        lefts, rights = self.new
        self.new = ({}, {})
        table, data = self.table, self.table.data
        fn = self.fn
        outer_left, outer_right = self.how in ("left", "full"), self.how in ("right", "full")
        changes: dict[int, list] = {}  # slot -> (key, side, rows) added
        out: list = []
        pair = None
        try:
            for key in [*lefts, *(k for k in rights if k not in lefts)]:  # in the order they came
                slot = self._slot(key)
                entries = data.get(slot)
                if entries is None:
                    entries = data[slot] = {}
                entry = entries.get(key)
                if entry is None:
                    entry = entries[key] = [[], [], [], []]
                old_left, old_right = entry[LEFT], entry[RIGHT]
                new_left, new_right = lefts.get(key, ()), rights.get(key, ())
                if new_left:
                    for left in new_left:  # new left x every right so far (the new ones too)
                        for right in old_right:
                            pair = (left, right)
                            out.append(key_pair(key, left, right) if fn is None else fn(left, right))
                        for right in new_right:
                            pair = (left, right)
                            out.append(key_pair(key, left, right) if fn is None else fn(left, right))
                    if outer_left and not old_right and not new_right:
                        for left in new_left:
                            pair = (left, None)
                            out.append(key_pair(key, left, None) if fn is None else fn(left, None))
                if new_right:
                    for right in new_right:  # old left x new right
                        for left in old_left:
                            pair = (left, right)
                            out.append(key_pair(key, left, right) if fn is None else fn(left, right))
                    if outer_right and not old_left and not new_left:
                        for right in new_right:
                            pair = (None, right)
                            out.append(key_pair(key, None, right) if fn is None else fn(None, right))
                added = changes.setdefault(slot, [])
                for side, rows in ((LEFT, new_left), (RIGHT, new_right)):
                    if rows:
                        entry[side].extend(rows)
                        runs = entry[side + 2]
                        if runs and runs[-1][0] == window:
                            runs[-1][1] += len(rows)
                        else:
                            runs.append([window, len(rows)])
                        added.append((key, side, rows))
                if self.ttl is not None:
                    self.expiring.setdefault(window, set()).add(key)
        except RecordError:
            raise
        except Exception as exc:
            raise RecordError(self.name, pair, exc) from exc
        expired = self._expire(window, data, changes) if self.ttl is not None else {}
        bound = window - self.ttl if self.ttl is not None else 0
        for slot in changes.keys() | expired.keys():
            if data.get(slot):
                table.record(slot, (window, changes.get(slot, []), expired.get(slot, []), bound))
            else:  # every key of the group expired: its base and changes go
                table.pending.pop(slot, None)
                table.delete(slot)
        self._emit(out)

    def _expire(self, window: int, data: dict, changes: dict) -> dict[int, list]:
        """Drop the rows of windows up to ``window - ttl``; the expired keys by slot."""
        bound = window - self.ttl
        expired: dict[int, list] = {}
        for at in sorted(w for w in self.expiring if w <= bound):
            for key in self.expiring.pop(at):
                slot = self._slot(key)
                entries = data.get(slot)
                entry = None if entries is None else entries.get(key)
                if entry is None:
                    continue
                expired.setdefault(slot, []).append(key)
                if drop_through(entry, bound):
                    del entries[key]
        return expired
