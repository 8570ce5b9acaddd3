"""KickStarter's trimming of the subtrees a window cut (ASPLOS 2017), for ``RepairingCompute``:
a vertex about to start again keeps its value when a neighbour left standing still offers it,
smallest values first, so that a window restarts only the vertices whose value the graph no
longer gives; with the array steps it shares with the repair (the subtrees of given roots, the
smallest offer per vertex)."""

from __future__ import annotations

import numpy as np

from gyreflow.runtime.dataflow.graph.arrays import distinct

NO_PARENT, PARENT, RESTARTED = 0, 1, 2  # ``link`` codes: a root or unreached, a parent, started again
_REVERSE = {"out": "in", "in": "out", "both": "both"}
_NONE = np.zeros(0, np.int64)
_BANDS = 16  # a trimming step takes at least a 16th of the undecided vertices
_DEEPEST = 256  # parent chains longer than this are not followed to their end (nothing anchors)


class SubtreeTrimming:
    """The trimming steps of ``RepairingCompute`` (which defines ``edges``, ``offer``,
    ``known``, ``weighted``, ``_symmetric``, ``_local_edges`` and ``_along``)."""

    def _trim(self, part, values, roots: np.ndarray) -> np.ndarray:
        """KickStarter's trimming of the subtrees of ``roots``, smallest values first: a vertex
        that a neighbour of the task offers its very value, from one no larger, takes that
        neighbour (the smallest id) as its parent and keeps its value, and its subtree stands
        with it, unwalked; the others start again, and their children join the vertices still
        to decide. An anchor counts only when its parent chain meets no vertex started again or
        undecided (``_chain_clear``), so a kept value rests on no removed edge and is what the
        graph left gives (a later reset of the anchor reaches it as a child); an anchor whose
        value is not smaller (a component label) counts only when its chain stays on the task
        up to its root as well, since only a smaller value says it is not below the vertex
        where the chain leaves the task. Taking the smallest values first decides every vertex
        an anchor's chain can meet before it is asked, so no vertex starts again that an anchor
        could have kept (values that are not numbers, or too many distinct ones, go by larger
        bands: as exact, a little less thrifty). Returns the positions to start again."""
        ids, parents, links = values["id"], values["parent"], values["link"]
        plain = values["value"]
        numbers = plain.dtype.kind in "iuf"
        # symmetric: the edges a vertex is offered along are the ones its children hang from,
        # read once a step (``edges`` gives every ``direction`` edge, with its weight)
        shared = self._symmetric(part)
        read = None
        marked = np.zeros(part.num_local, dtype=bool)  # to start again, or undecided
        known = np.zeros(part.num_local, dtype=bool)  # parent chains found clear
        rooted = np.zeros(part.num_local, dtype=bool)  # ... and ending at a root of the task
        pending = distinct(roots)
        marked[pending] = True
        found = []
        while len(pending):
            if numbers:
                here = plain[pending]
                low = here.min()
                band = here == low
                if int(band.sum()) * _BANDS < len(pending):  # many distinct values: a wider band
                    k = len(pending) // _BANDS
                    band = here <= np.partition(here, k)[k]
                level, pending = pending[band], pending[~band]
            else:
                level, pending = pending, _NONE
            if shared:
                rows, columns, weights = self.edges(part, level)
                local = columns < part.num_local
                read = rows[local], columns[local], weights[local]
            targets, senders = self._anchors(part, values, level, marked, read)
            if len(targets):
                # an equal value does not say that the anchor is not below the vertex: its
                # chain must stay on the task
                equal = np.asarray(plain[senders] == plain[targets], dtype=bool)
                clear = np.zeros(len(senders), dtype=bool)
                for among, memo in ((~equal, known), (equal, rooted)):
                    if among.any():
                        clear[among] = self._chain_clear(part, values, senders[among], marked,
                                                         memo, local=memo is rooted)
                targets, senders = targets[clear], senders[clear]
            if len(targets):
                marked[self._adopt(part, values, targets, senders)] = False
                level = level[marked[level]]
            found.append(level)
            if not len(level):
                continue
            if shared:
                rows, columns, _ = read
                failed = marked[rows]
                rows, columns = rows[failed], columns[failed]
            else:
                rows, columns = self._local_edges(part, level)
            hit = ~marked[columns] & (links[columns] == PARENT)
            rows, columns = rows[hit], columns[hit]
            children = distinct(columns[np.asarray(parents[columns] == ids[rows], dtype=bool)])
            marked[children] = True
            pending = np.concatenate([pending, children]) if len(pending) else children
        return np.concatenate(found) if len(found) > 1 else found[0]

    @staticmethod
    def _chain_clear(part, values, at: np.ndarray, blocked: np.ndarray,
                     known: np.ndarray, local: bool = False) -> np.ndarray:
        """A mask of the vertices at ``at`` whose parent chain among the task's vertices meets
        no vertex ``blocked`` and none started again; with ``local``, only chains that stay on
        the task up to their root (a chain that leaves it could come back below a blocked
        vertex). The chains are walked a level at a time over the distinct vertices not yet
        decided (they meet soon: many vertices hang from few hubs), and each vertex takes its
        parent's answer on the way back. ``known`` marks the vertices found clear so far, where
        a walk stops; it gains the ones found here (within one trimming a clear chain stays
        clear: vertices are blocked later only below blocked ones, and a vertex re-anchors only
        on a clear chain)."""
        n = part.num_local
        parents, links = values["parent"], values["link"]
        state = np.zeros(n, dtype=np.int8)  # 0 undecided, 1 clear, 2 not
        touched = [at]
        steps = []  # (vertices, their parents' positions): a vertex's answer is its parent's
        current = distinct(at)
        for _ in range(_DEEPEST):
            bad = blocked[current] | (links[current] == RESTARTED)
            state[current[bad]] = 2
            ends = ~bad & (known[current] | (links[current] != PARENT))  # clear, or a root
            state[current[ends]] = 1
            current = current[~bad & ~ends]
            if not len(current):
                break
            above, found = part.column_positions(parents[current])
            away = found & (above >= n)  # another task's parent: its reset would reach these
            state[current[~found]] = 2  # a parent that is not known: nothing is promised
            state[current[away]] = 2 if local else 1
            here = found & ~away
            current, above = current[here], above[here]
            steps.append((current, above))
            touched.append(current)
            current = distinct(above[state[above] == 0])
        else:
            state[current] = 2
        for vertices, above in reversed(steps):
            state[vertices] = state[above]
        touched = np.concatenate(touched)
        known[touched[state[touched] == 1]] = True
        return state[at] == 1

    @staticmethod
    def _adopt(part, values, targets: np.ndarray, senders: np.ndarray) -> np.ndarray:
        """Each vertex at ``targets`` takes, of its ``senders`` (pairwise), the one of the
        smallest id as its parent; returns the distinct targets."""
        ids = values["id"]
        order = np.lexsort((ids[senders], targets)) if ids.dtype != object else np.array(
            sorted(range(len(targets)), key=lambda i: (targets[i], ids[senders[i]])),
            dtype=np.int64)
        targets, senders = targets[order], senders[order]
        first = np.ones(len(targets), dtype=bool)
        first[1:] = targets[1:] != targets[:-1]
        targets, senders = targets[first], senders[first]
        part.changing(targets)
        values["parent"][targets] = ids[senders]
        values["link"][targets] = PARENT
        return targets

    def _anchors(self, part, values, asked: np.ndarray, mask: np.ndarray,
                 read: tuple | None = None) -> tuple:
        """``(targets, senders)``: the pairs of a vertex at ``asked`` and a neighbour of the task,
        neither started again nor about to be (``mask``), that offers it exactly its value
        from one no larger (``read``: the edges of ``asked`` to the task's vertices along
        which their neighbours offer, when the caller has them)."""
        n = part.num_local
        plain, links = values["value"], values["link"]
        symmetric = self._symmetric(part)
        if read is not None:
            rows, columns, weights = read
        else:
            if self.weighted and symmetric:  # the asked vertices' own edges carry the weights
                rows, columns, weights = self.edges(part, asked)
            else:
                rows, columns, weights = part.edges(asked, _REVERSE[self.direction])
            local = columns < n
            rows, columns, weights = rows[local], columns[local], weights[local]
        usable = ~mask[columns] & (links[columns] != RESTARTED)
        rows, columns, weights = rows[usable], columns[usable], weights[usable]
        known = np.asarray(self.known(plain[columns]), dtype=bool)
        rows, columns, weights = rows[known], columns[known], weights[known]
        if not len(rows):
            return _NONE, _NONE
        if not self.weighted:
            offered = self.offer(plain, columns, np.ones(len(columns)))
        elif symmetric:
            offered = self.offer(plain, columns, weights)
        else:  # the senders' own edges say the weights
            rows, offered, columns = self._along(part, plain, columns, rows)
        good = (np.asarray(offered == plain[rows], dtype=bool)
                & np.asarray(plain[columns] <= plain[rows], dtype=bool))
        return rows[good], columns[good]


def subtrees(values: np.ndarray, roots: list, children=None) -> np.ndarray:
    """A mask of the vertices (``values``: a repairing program's, by position) whose parent chain
    among these vertices reaches one of ``roots`` (ids), the roots included: one array step per
    level of the subtrees. With ``children`` (positions -> ``(rows, columns)``: the edges from
    those positions along which values travel, to positions of these vertices) each step looks
    at the edges of the level found, so the cost is the subtrees' edges; without, it follows one
    sort of every vertex's parent."""
    ids, parents = values["id"], values["parent"]
    frontier = np.flatnonzero(np.isin(ids, np.array(roots, dtype=ids.dtype)))
    mask = np.zeros(len(values), dtype=bool)
    if children is not None:
        mask[subtrees_at(values, frontier, children)] = True
        return mask
    linked = np.flatnonzero(values["link"] == PARENT)
    order = linked[np.argsort(parents[linked], kind="stable")]
    by_parent = parents[order]
    while len(frontier):
        mask[frontier] = True
        found = ids[frontier]
        lo = np.searchsorted(by_parent, found, side="left")
        hi = np.searchsorted(by_parent, found, side="right")
        counts = hi - lo
        if not counts.sum():
            break
        at = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))
        found_children = order[at]
        frontier = found_children[~mask[found_children]]
    return mask


def subtrees_at(values: np.ndarray, roots: np.ndarray, children) -> np.ndarray:
    """The positions of the vertices whose parent chain reaches the vertices at
    ``roots``, the roots included, walked level by level along ``children`` (positions ->
    ``(rows, columns)``: the edges from them to positions of these vertices): the cost is the
    subtrees' edges."""
    ids, parents, links = values["id"], values["parent"], values["link"]
    seen = np.zeros(len(values), dtype=bool)  # a vertex is walked once, whatever the parents say
    found = []
    frontier = distinct(roots)
    while len(frontier):
        seen[frontier] = True
        found.append(frontier)
        rows, columns = children(frontier)
        hit = (links[columns] == PARENT) & ~seen[columns]
        rows, columns = rows[hit], columns[hit]
        hit = np.asarray(parents[columns] == ids[rows], dtype=bool)
        frontier = distinct(columns[hit])
    return np.concatenate(found) if len(found) > 1 else (found[0] if found else _NONE)


def smallest(positions: np.ndarray, values: np.ndarray, senders: np.ndarray,
             size: int | None = None):
    """``(positions, values, senders)`` with each position once (sorted): its smallest value, and
    of the senders of that value the smallest (``size``: positions are below it; numbers then
    take two dense passes instead of a sort when there are many).

    >>> p, v, s = smallest(np.array([2, 0, 2, 2]), np.array([5, 1, 3, 3]), np.array([7, 8, 9, 4]))
    >>> p.tolist(), v.tolist(), s.tolist()
    ([0, 2], [1, 3], [8, 4])
    """
    if (values.dtype.kind in "iuf" and senders.dtype.kind in "iu" and size is not None
            and 16 * len(positions) >= size):  # few messages: a sort of them beats dense passes
        best = np.full(size, np.inf if values.dtype.kind == "f" else np.iinfo(values.dtype).max,
                       dtype=values.dtype)
        np.minimum.at(best, positions, values)
        tie = values == best[positions]
        first = np.full(size, np.iinfo(senders.dtype).max, dtype=senders.dtype)
        np.minimum.at(first, positions[tie], senders[tie])
        present = np.zeros(size, dtype=bool)
        present[positions] = True
        at = np.flatnonzero(present)
        return at, best[at], first[at]
    if len(positions) < 2:
        return positions, values, senders
    if values.dtype == object or senders.dtype == object:
        order = sorted(range(len(positions)),
                       key=lambda i: (positions[i], values[i], senders[i]))
        order = np.array(order, dtype=np.int64)
    else:
        order = np.lexsort((senders, values, positions))
    positions = positions[order]
    first = np.ones(len(positions), dtype=bool)
    first[1:] = positions[1:] != positions[:-1]
    return positions[first], values[order][first], senders[order][first]
