"""Key groups: a process-independent hash of keys and the key-group-to-task assignment."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

DEFAULT_MAX_PARALLELISM = 128

_INT64 = struct.Struct("<q")
_FLOAT = struct.Struct("<d")


def stable_hash(key: object) -> int:
    """Return a 32-bit hash of ``key`` that is identical in every process, machine and run.

    Python's ``hash()`` of ``str`` and ``bytes`` is randomised per process, so it can never decide where
    a key lives. Supported keys (``KEY_TYPES``): ``str``, ``bytes``, ``int``, ``float``, ``bool``,
    ``None``, ``decimal.Decimal``, ``datetime.datetime``, ``datetime.date`` and tuples of these (nested
    tuples too). Keys that Python treats as equal share one encoding (``1``, ``1.0``, ``True`` and
    ``Decimal("1")``; aware datetimes of one instant in different time zones), so records with equal
    keys always meet in the same task.

    >>> stable_hash("word") == stable_hash("word")
    True
    >>> stable_hash(("a", 1)) != stable_hash(("a", 2))
    True
    """
    return zlib.crc32(_encode(key))


def _encode(key: object) -> bytes:
    # A type tag keeps "1" and b"1" apart, while keys Python treats as equal dict keys (1, 1.0,
    # True, Decimal("1")) share one encoding: records with equal keys must meet in the same task.
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, float) and key.is_integer():
        key = int(key)
    if isinstance(key, int):  # bool is an int: True == 1
        if -(2**63) <= key < 2**63:
            return b"i" + _INT64.pack(int(key))
        return b"I" + str(key).encode()
    if isinstance(key, bytes):
        return b"y" + key
    if isinstance(key, float):
        return b"f" + _FLOAT.pack(key)
    if key is None:
        return b"n"
    if isinstance(key, tuple):
        parts = [_encode(item) for item in key]
        return b"t" + b"".join(_INT64.pack(len(p)) + p for p in parts)
    return _encode_other(key)


def _encode_other(key: object) -> bytes:
    # decimal and datetime are imported by the first key of theirs: most jobs key by str or int,
    # and importing both costs every run a few milliseconds of start-up.
    from datetime import UTC, date, datetime
    from decimal import Decimal

    if isinstance(key, Decimal):
        if key.is_finite() and key == key.to_integral_value():
            return _encode(int(key))
        as_float = float(key)
        if as_float == key:  # Decimal("0.5") == 0.5: one encoding for both
            return _encode(as_float)
        return b"D" + str(key.normalize()).encode()
    if isinstance(key, datetime):
        if key.utcoffset() is not None:  # equal instants are equal keys, whatever the zone
            key = key.astimezone(UTC)
            return b"Z" + key.replace(tzinfo=None).isoformat().encode()
        return b"T" + key.isoformat().encode()
    if isinstance(key, date):
        return b"d" + key.isoformat().encode()
    msg = (f"cannot partition by key {key!r} of type {type(key).__name__}: keys must be "
           f"{KEY_TYPES}; {KEY_ADVICE}")
    raise TypeError(msg)


KEY_TYPES = ("str, bytes, int, float, bool, None, decimal.Decimal, datetime.datetime, datetime.date "
             "or tuples of these")
KEY_ADVICE = "return a tuple of its fields from the key_by function instead"


def key_group_of(key: object, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> int:
    """Return the key group of ``key``: ``stable_hash(key) % max_parallelism``.

    >>> 0 <= key_group_of("word", 128) < 128
    True
    """
    return stable_hash(key) % max_parallelism


def task_of_key_group(key_group: int, parallelism: int, max_parallelism: int) -> int:
    """Return the index of the task that owns ``key_group`` when an operator runs ``parallelism`` tasks.

    >>> [task_of_key_group(g, 2, 4) for g in range(4)]
    [0, 0, 1, 1]
    """
    return key_group * parallelism // max_parallelism


def key_group_range(task_index: int, parallelism: int, max_parallelism: int) -> range:
    """Return the key groups owned by task ``task_index`` (the inverse of ``task_of_key_group``).

    >>> key_group_range(1, 2, 4)
    range(2, 4)
    """
    start = -(-task_index * max_parallelism // parallelism)
    stop = -(-(task_index + 1) * max_parallelism // parallelism)
    return range(start, stop)


def owner_table(parallelism: int, max_parallelism: int,
                assignment: tuple[int, ...] | None = None) -> list[int]:
    """The task index owning each key group: ``assignment`` when an operator has one (a
    rebalance gave it), else the ranges of ``task_of_key_group``.

    >>> owner_table(2, 4), owner_table(2, 4, (1, 0, 0, 0))
    ([0, 0, 1, 1], [1, 0, 0, 0])
    """
    if assignment is None:
        return [g * parallelism // max_parallelism for g in range(max_parallelism)]
    if len(assignment) != max_parallelism or not all(0 <= t < parallelism for t in assignment):
        msg = (f"a key-group assignment needs one task index from 0 to {parallelism - 1} for each "
               f"of the {max_parallelism} key groups (state.max_parallelism)")
        raise ValueError(msg)
    return list(assignment)


def task_key_groups(task_index: int, parallelism: int, max_parallelism: int,
                    assignment: tuple[int, ...] | None = None) -> range | tuple[int, ...]:
    """The key groups task ``task_index`` owns: its range, or those ``assignment`` gives it.

    >>> task_key_groups(1, 2, 4), task_key_groups(0, 2, 4, (1, 0, 1, 0))
    (range(2, 4), (1, 3))
    """
    if assignment is None:
        return key_group_range(task_index, parallelism, max_parallelism)
    groups = tuple(g for g, t in enumerate(owner_table(parallelism, max_parallelism, assignment))
                   if t == task_index)
    runs = contiguous_runs(groups)
    return runs[0] if len(runs) == 1 else groups


def contiguous_runs(groups) -> list[range]:
    """``groups`` (ascending) as ranges of consecutive key groups: what storage splits by.

    >>> contiguous_runs((0, 1, 2, 5, 7, 8))
    [range(0, 3), range(5, 6), range(7, 9)]
    """
    if isinstance(groups, range):
        return [groups] if groups.step == 1 else [range(g, g + 1) for g in groups]
    runs: list[range] = []
    start = previous = None
    for group in groups:
        if previous is not None and group == previous + 1:
            previous = group
            continue
        if start is not None:
            runs.append(range(start, previous + 1))
        start = previous = group
    if start is not None:
        runs.append(range(start, previous + 1))
    return runs


def short_of(key_groups: range, reached: Iterable[tuple[range, int]],
             version: int) -> tuple[range, int] | None:
    """The first run of ``key_groups`` whose stored ranges all stopped before ``version``, with the
    version they reached (0: no stored range holds it), or None when every key group has a range
    that reached ``version``.

    ``reached`` lists each stored key-group range with the newest version written to it. Storage
    splits by the ranges of the layout that wrote it: after a rescale or a rebalance the ranges of
    the older layout stop at the window before the change, and the new layout's ranges go on. So a
    key group's state reached a version when any range holding it did; when none did, writes were
    lost.

    >>> short_of(range(0, 8), [(range(0, 8), 2), (range(0, 4), 5), (range(4, 8), 3)], 5)
    (range(4, 8), 3)
    >>> short_of(range(0, 4), [(range(0, 8), 2), (range(0, 4), 5)], 5) is None
    True
    """
    best = dict.fromkeys(key_groups, 0)
    for stored, at in reached:
        for group in range(max(stored.start, key_groups.start), min(stored.stop, key_groups.stop)):
            best[group] = max(best[group], at)
    start = None
    for group in key_groups:
        if start is not None and (best[group] >= version or best[group] != best[start]):
            return range(start, group), best[start]
        if start is None and best[group] < version:
            start = group
    return None if start is None else (range(start, key_groups.stop), best[start])


class KeyGroupCache:
    """Memoise ``key -> task index`` for one (parallelism, max_parallelism) pair.

    Hashing costs more than a dict lookup; real key sets repeat, so a bounded cache pays off.
    """

    __slots__ = ("_cache", "_limit", "max_parallelism", "parallelism")

    def __init__(self, parallelism: int, max_parallelism: int, limit: int = 1 << 20) -> None:
        if parallelism > max_parallelism:
            msg = (
                f"parallelism {parallelism} exceeds state.max_parallelism {max_parallelism}: "
                "raise state.max_parallelism or lower the parallelism"
            )
            raise ValueError(msg)
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self._limit = limit
        self._cache: dict[object, int] = {}

    def task_of(self, key: object) -> int:
        """Return the index of the task that owns ``key``."""
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError:  # unhashable keys still get a clear error from stable_hash
            return task_of_key_group(
                key_group_of(key, self.max_parallelism), self.parallelism, self.max_parallelism
            )
        task = task_of_key_group(
            stable_hash(key) % self.max_parallelism, self.parallelism, self.max_parallelism
        )
        if len(self._cache) >= self._limit:
            self._cache.clear()
        self._cache[key] = task
        return task
