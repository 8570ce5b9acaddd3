"""The ids of array graph messages between workers cross once: later pieces to the same vertices
carry a slot number, and the receiving side gives back exactly the pieces that were sent."""

from __future__ import annotations

import pickle
import random

import numpy as np

from gyreflow.runtime.workers.loop_ids import MIN_IDS, SentIds, TakenIds
from gyreflow.runtime.workers.worker_stand_ins import LoopExchange


def piece(ids: list[int], seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    return (None, np.array(ids, dtype=np.int64), rng.random(len(ids)), None)


def same(a: tuple, b: tuple) -> bool:
    return all((x is None and y is None) or np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_unpacked_pieces_equal_the_sent_ones_and_repeated_ids_travel_as_a_slot():
    rng = random.Random(3)
    id_sets = [sorted(rng.sample(range(10_000), MIN_IDS + k)) for k in range(4)]
    sent, taken = SentIds(), TakenIds()
    ids_bytes = 0
    for step in range(200):
        # Two source tasks on the sending worker (limit 2), each with its ids of the moment, a
        # short piece (travels as it is) and a piece of the target's own positions now and then.
        pieces = [piece(id_sets[rng.randrange(4)], step), piece(id_sets[rng.randrange(4)], 1000 + step),
                  piece([1, 2, 3], step)]
        if step % 7 == 0:
            pieces.append((np.arange(5), None, np.ones(5), None))
        wire = pickle.loads(pickle.dumps(sent.pack(("w", 1, 0), pieces, limit=2)))
        ids_bytes += sum(p[1][1].nbytes for p in wire
                         if type(p[1]) is tuple and p[1][1] is not None)
        got = taken.unpack(("w", 1, 0), wire)
        assert len(got) == len(pieces)
        assert all(same(g, p) for g, p in zip(got, pieces, strict=True)), f"superstep {step}"
    every_time = 200 * 2 * 8 * (MIN_IDS + 1.5)
    assert ids_bytes < every_time / 2


class _Worker:
    """What ``LoopExchange`` uses of its worker: a peer runs task 1."""

    count, index = 2, 0

    def __init__(self) -> None:
        self.sent_ids = SentIds()
        self.local_tasks = {7: 1}
        self.items: list[tuple] = []

    def send(self, target: int, item: tuple) -> None:
        self.items.append((target, item))


def test_a_task_sending_to_the_same_vertices_sends_their_ids_to_the_peer_once():
    worker = _Worker()
    loop = LoopExchange(worker, 7)
    ids = list(range(100, 100 + 2 * MIN_IDS, 2))
    for step in range(2, 6):
        loop.put(1, step, [piece(ids, step)], None)
    arrays = [item[4][0][1] for _, item in worker.items]
    assert [type(a) for a in arrays] == [tuple] * 4
    assert [a[1] is None for a in arrays] == [False, True, True, True]
    assert np.array_equal(arrays[0][1], ids)
