"""The ids of array graph messages between two workers, sent once: a task sends to the same vertices
superstep after superstep (PageRank: every superstep), so after the first time a piece's ids travel
as the number of a slot that both workers keep, and only the values cross again.

A piece of array messages to another task's vertices is ``(None, ids, values, counts)`` (see
``array_context.split_outgoing``). On the wire its ids become ``(slot, ids)`` (keep them in
``slot``) or ``(slot, None)`` (the ids kept in ``slot``). The slots are per connection, graph vertex
and target task; a connection delivers in order, so the receiver's slots follow the sender's, and
both go with the worker processes (a restarted job starts with none).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

MIN_IDS = 64  # smaller id arrays travel as they are (comparing them saves nothing)


def _slotted(ids) -> bool:
    """Whether ``ids`` is an id array that travels by slot. numpy is not imported here: a job
    without arrays never loads it (63 ms of every worker job's start), and an array means it is."""
    numpy = sys.modules.get("numpy")
    return (numpy is not None and type(ids) is numpy.ndarray and ids.dtype == numpy.int64
            and len(ids) >= MIN_IDS)


class SentIds:
    """The sending side: the id arrays sent to one target, by slot, at most ``limit`` (the tasks
    of the vertex on this worker: each sends its own) per target task."""

    def __init__(self) -> None:
        self.slots: dict[tuple, list] = {}
        self.turns: dict[tuple, int] = {}

    def pack(self, key: tuple, pieces: list, limit: int) -> list:
        """``pieces`` as they travel to ``key`` = (worker, vertex, target task)."""
        slots = None
        packed = []
        for piece in pieces:
            positions, ids, values, counts = piece
            if positions is not None or not _slotted(ids):
                packed.append(piece)
                continue
            if slots is None:
                slots = self.slots.setdefault(key, [])
            for slot, sent in enumerate(slots):
                if sent is ids or (len(sent) == len(ids) and _equal(sent, ids)):
                    packed.append((None, (slot, None), values, counts))
                    break
            else:
                if len(slots) < max(limit, 1):
                    slot = len(slots)
                    slots.append(ids)
                else:  # replace the slots in turn
                    slot = self.turns[key] = (self.turns.get(key, -1) + 1) % len(slots)
                    slots[slot] = ids
                packed.append((None, (slot, ids), values, counts))
        return packed


class TakenIds:
    """The receiving side: the id arrays kept per (worker, vertex, target task) and slot."""

    def __init__(self) -> None:
        self.slots: dict[tuple, dict[int, np.ndarray]] = {}

    def unpack(self, key: tuple, pieces: list) -> list:
        """``pieces`` as they were before ``SentIds.pack``."""
        unpacked = []
        for piece in pieces:
            ids = piece[1]
            if type(ids) is not tuple:
                unpacked.append(piece)
                continue
            slot, sent = ids
            slots = self.slots.setdefault(key, {})
            if sent is None:
                sent = slots[slot]
            else:
                slots[slot] = sent
            unpacked.append((None, sent, piece[2], piece[3]))
        return unpacked


def _equal(first, second) -> bool:
    """``numpy.array_equal`` (both are arrays: numpy is loaded)."""
    return sys.modules["numpy"].array_equal(first, second)
