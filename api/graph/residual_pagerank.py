"""PageRank of a changing graph by residual propagation: each window's changes leave residuals
near them, and only the vertices whose residual is above a threshold push it on (Maiter's
delta-based accumulative iteration, GraphBolt, the push of Andersen, Chung and Lang).

The program keeps, per vertex, ``y``: the solution of ``y = 1 + d * P^T y``, where ``P`` is
row-stochastic over the out-edges (``P[u, v]`` is the number of edges ``u -> v`` over ``u``'s
out-degree) and a dangling vertex sends nothing. Graphalytics PageRank is exactly
``r = y / sum(y)``: summing ``r = 1 / S + d * P^T r`` over the vertices gives
``n / S = 1 - d + d * delta`` (``delta`` the dangling vertices' rank), so ``1 / S`` is the
teleport plus the dangling share, ``(1 - d) / n + d * delta / n``. Unlike the ranks, ``y`` is
local: a new vertex, a removed one or a changed out-degree changes ``y`` only through the residual
``res = 1 + d * P^T y - y`` of the vertices near the change, never through ``n`` or the dangling
total, which the normalisation ``sum(y)`` (one aggregate) takes care of when the result is read.

A window, as supersteps:

1. every vertex sends its share ``d * y / out-degree`` (nothing when ``y`` is 0, as in the first
   window and in a static computation), and the tasks sum ``y``, its largest value, the dangling
   vertices' ``y`` and the degrees;
2. the residual of every vertex, exactly, from what it received: ``res = 1 + received - y``. In an
   undirected graph the part of the residual along ``deg`` (``c * deg``, ``c`` the residuals'
   sum over the degrees', known from the aggregates) is taken at once: ``P^T deg = deg`` there,
   so pushing ``c * deg`` for ever adds exactly ``c * deg / (1 - d)`` to ``y``. What is left sums
   to zero and shrinks by about ``d * lambda_2`` per superstep instead of ``d``;
3. and on: the vertices whose ``|res|`` is above ``eps`` move it into ``y`` and send
   ``d * res / out-degree`` along their out-edges (the pushing rows' edges only); the others keep
   it. Once more than a tenth of a task's vertices are above, every vertex of the task pushes, as
   one sparse product: a residual below ``eps`` pushed too only brings ``y`` nearer. The window
   ends at the first superstep where no vertex is above, and there every vertex's rank is set to
   ``y / sum(y)``.

A task that holds the whole graph (one task for the graph) does all of it in superstep 1, in
rounds along its own edges, and the window ends there. Undirected, it also takes the residuals'
part along the degrees again in every round, by their degree-weighted sum: a small component
that got residual (two new vertices joined to each other) leaves the large one, after the first
taking, a part along its degrees that pushes alone would shrink only by ``d`` a round. Rounds
in which few vertices push look only at those that received something. Undirected, once more
than a tenth are above, conjugate gradients on the symmetric form of the same equations take
the place of the pushes of every residual (``_conjugate_gradients``): a round is still one
sparse product, but the residuals shrink faster.

The residual is computed again from ``y`` in every window (one sparse product), so what a window
changed, a removed vertex or a restore never has to be traced: the stored state is ``y`` (with the
last residual and the rank shown), kept like any incremental program's values.

Why the result is within ``tolerance``. Let ``G = (I - d P^T)^{-1} = sum_k (d P^T)^k``: its
entries are non-negative and ``G 1 = y*``. Then ``y* - y = G res``, so with
``rho = max |res|``: ``|y* - y| <= rho * G 1 = rho * y*`` entry by entry, hence
``(1 - rho) y* <= y <= (1 + rho) y*`` and ``S = sum(y)`` is within the same factors of ``S*``.
Each rank ``r = y / S`` is then within a factor ``(1 + rho) / (1 - rho)`` of ``r*``:
``|r - r*| <= 2 rho / (1 - rho) * r* <= 2 rho (1 + rho) / (1 - rho)**2 * max(y) / S``, which is
below ``2.061 * rho * max(y) / S`` for ``rho <= 0.01``. The threshold is therefore
``eps = min(0.01, tolerance * S / (2.1 * max(y)))``, with ``S`` and ``max(y)`` aggregated in the
previous superstep: in the last superstep nothing pushed, so those are the sum and the maximum of
the final ``y`` and every residual is at most ``eps``, and every rank is within ``tolerance`` of
the exact fixed point (rounding aside). The 1-norm bound ``|y - y*|_1 <= |res|_1 / (1 - d)``
would ask the sum of all residuals, not each one, to be that small. The bound is tightest at the
largest rank, and the tolerance is absolute: at 1e-10 on 200,000 vertices ``eps`` is about 1e-7
of ``y``, so a window's residuals reach nearly every vertex before they are all below it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sparse

from gyreflow.api.graph.arrays import ArrayVertexCompute
from gyreflow.api.graph.views import Aggregator

NO_LIMIT = 2**31 - 1
VALUE = np.dtype([("y", np.float64), ("residual", np.float64), ("rank", np.float64)])
DENSE = 0.1  # above this share of a task's vertices over the threshold, every one pushes (one
# sparse product sends for all; a residual below the threshold pushed too only brings y nearer)
_MARGIN = 2.1  # 2 (1 + rho) / (1 - rho)**2 for rho <= 0.01 is below 2.061: see the module
_MOST = 0.01  # the largest threshold: the bound above assumes rho <= 0.01
_SAMPLE = 16  # every 16th vertex with edges estimates the part along the degrees left over


class ResidualPageRank(ArrayVertexCompute):
    """Graphalytics PageRank, every rank within ``tolerance`` of the exact fixed point of the
    window's graph: incremental (each window from the last one's ``y``, pushing only residuals
    above the threshold) or static (from nothing; a first window is the same). See the module.

    ``damping`` must be below 1 (at 1 the unnormalised ranks have no fixed point).
    """

    combine = "sum"
    always_active = True  # the window ends by ``terminate``: a dangling vertex pushes no message
    aggregators = {"mass": Aggregator.sum(0.0), "top": Aggregator.max(0.0),
                   "dangling": Aggregator.sum(0.0), "degrees": Aggregator.sum(0),
                   "widest": Aggregator.max(0), "pushed": Aggregator.sum(0),
                   "solved": Aggregator.sum(0)}

    def __init__(self, damping: float = 0.85, tolerance: float = 1e-9,
                 max_iterations: int = NO_LIMIT) -> None:
        if not 0.0 <= damping < 1.0:
            msg = f"damping must be at least 0 and below 1, got {damping!r}"
            raise ValueError(msg)
        if not tolerance > 0:
            msg = f"tolerance must be positive, got {tolerance!r}"
            raise ValueError(msg)
        self.damping = float(damping)
        self.tolerance = float(tolerance)
        self.max_iterations = max_iterations

    def init(self, ids: np.ndarray, given: np.ndarray) -> np.ndarray:
        """``y`` and the residual 0 (the residual is computed in the window's second superstep);
        no rank yet."""
        values = np.zeros(len(ids), dtype=VALUE)
        values["rank"] = np.nan
        return values

    @staticmethod
    def result(ids: np.ndarray, values: np.ndarray) -> np.ndarray:
        """The rank, ``y / sum(y)`` as the window's last superstep set it."""
        return values["rank"]

    def compute(self, part, inbox) -> np.ndarray:
        """Superstep 1: send the shares of ``y``; 2: the residuals (and, undirected, take their
        part along the degrees); then push the residuals above the threshold."""
        values = part.values  # changed in place: the engine keeps its own copy of the start
        if part.num_local == 0:  # no vertex here (perhaps another task holds the whole graph)
            return values
        if part.iteration == 1 and part.num_local == part.num_vertices == len(part.columns):
            return self._solve_here(part, values)
        y, degree = values["y"], part.out_degree
        d = self.damping
        if part.iteration == 1:
            if y.any():
                part.send_along(_shares(d * y, degree))
            part.aggregate("mass", float(y.sum()))
            part.aggregate("top", float(y.max()) if len(y) else 0.0)
            part.aggregate("dangling", float(y[degree == 0].sum()))
            part.aggregate("degrees", int(degree.sum()))
            part.aggregate("widest", int(degree.max()) if len(degree) else 0)
            part.aggregate("pushed", 1)  # the residuals are not known yet
            return values
        residual = values["residual"]
        if len(inbox):
            received = inbox.dense(0.0, float)
            if part.iteration == 2:
                residual[:] = 1.0 + received - y
            else:
                residual += received
        elif part.iteration == 2:
            residual[:] = 1.0 - y
        mass, top = part.aggregated("mass"), part.aggregated("top")
        absorbed = False
        if part.iteration == 2:
            mass, absorbed = self._absorb(part, values, mass, top)
        threshold = self.threshold(mass, top)
        pushing = np.flatnonzero(np.abs(residual) > threshold)
        if len(pushing) > DENSE * len(y):  # many push: every residual goes, in one product
            y += residual
            part.send_along(_shares(d * residual, degree))
            residual[:] = 0.0
        elif len(pushing):
            pushed = residual[pushing]
            y[pushing] += pushed
            residual[pushing] = 0.0
            shares = np.zeros(len(y))
            shares[pushing] = _shares(d * pushed, degree[pushing])
            sending = pushing[degree[pushing] > 0]
            if len(sending):
                part.send_along(shares, where=sending)
        elif not absorbed:  # nothing moved here: perhaps the last superstep, so show the ranks
            values["rank"] = y / mass if mass > 0 else np.nan
        part.aggregate("mass", float(y.sum()))
        part.aggregate("top", float(y.max()) if len(y) else 0.0)
        part.aggregate("pushed", len(pushing) + int(absorbed))
        return values

    def _solve_here(self, part, values: np.ndarray) -> np.ndarray:
        """The task holds the whole graph: the residuals, their pushes and the ranks in this one
        superstep, pushing along its edges until no residual is above the threshold of the
        ``y`` it reached (the same bound as across supersteps). Undirected, the part along the
        degrees is taken first by the residuals' sum and then, round by round, by their
        degree-weighted sum: a small component's residual (a new pair of vertices) would
        otherwise leave the large one a part along its degrees that shrinks by ``d`` a round."""
        d = self.damping
        y = values["y"].copy()
        degree = part.out_degree.astype(float)
        spread = np.divide(d, degree, out=np.zeros(len(y)), where=degree > 0)
        edges = part.in_edges  # a row's in-edges: what a vertex receives is one product
        ones = sparse.csr_matrix((np.ones(edges.nnz), edges.indices, edges.indptr),
                                 shape=edges.shape)
        residual = 1.0 - y
        if y.any():
            residual += ones @ (y * spread)
        out = part.out_edges  # a row's out-edges: where a pushing vertex sends
        symmetric = edges is out and degree.any()
        linked = np.flatnonzero(degree > 0)[::_SAMPLE] if symmetric else None
        widest = float(degree.max()) if symmetric else 0.0
        n = len(y)
        lengths = np.diff(out.indptr)
        degrees = float(degree.sum())
        first = True
        mass, top = float(y.sum()), float(y.max())  # ``top`` is kept at least the maximum
        candidates = None  # the vertices whose residual grew in a sparse round (None: all)
        rounds = 0  # every round sends along the edges once: at most ``max_iterations``
        while rounds < self.max_iterations:
            rounds += 1
            if candidates is None:
                if symmetric:
                    c = (residual.sum() / degrees if first
                         else float(np.median(residual[linked] / degree[linked])))
                    first = False
                    if abs(c) * widest > self.threshold(mass, top) / 4:
                        y += (c / (1.0 - d)) * degree
                        residual -= c * degree
                        mass += c * degrees / (1.0 - d)
                        top += abs(c) * widest / (1.0 - d)
                threshold = self.threshold(mass, top)
                above = np.abs(residual) > threshold
                count = int(np.count_nonzero(above))
                if not count:
                    mass, top = float(y.sum()), float(y.max())
                    if self.threshold(mass, top) >= threshold:
                        break  # every residual checked against the final y's threshold
                    continue
                if count > DENSE * n and symmetric:  # many are above: conjugate gradients
                    y, residual, taken = self._conjugate_gradients(
                        ones, y, residual, degree, spread, self.max_iterations - rounds + 1)
                    rounds += taken - 1
                    mass, top = float(y.sum()), float(y.max())
                    continue
                if count > DENSE * n:  # many vertices push: every residual goes, in whole-array
                    # steps (pushing one below the threshold too only brings y nearer; what is
                    # left is then exactly what the pushes send)
                    y += residual
                    mass += float(residual.sum())
                    top += max(float(residual.max()), 0.0)
                    residual = ones @ (residual * spread)
                    continue
                pushing = np.flatnonzero(above)
            else:
                pushing = candidates[np.abs(residual[candidates]) > self.threshold(mass, top)]
                if not len(pushing):
                    candidates = None  # check every residual against the exact sum and maximum
                    continue
            pushed = residual[pushing]
            y[pushing] += pushed
            residual[pushing] = 0.0
            mass += float(pushed.sum())
            top = max(top, float(y[pushing].max()))
            counts = lengths[pushing]
            columns = out.indices[_row_entries(out.indptr, pushing, counts)]
            sent = np.repeat(pushed * spread[pushing], counts)
            if 16 * len(columns) < n:
                np.add.at(residual, columns, sent)
                candidates = np.unique(columns)
            else:
                residual += np.bincount(columns, sent, n)
                candidates = np.flatnonzero(np.bincount(columns, minlength=n))
        values["y"], values["residual"] = y, residual
        mass = float(y.sum())
        values["rank"] = y / mass if mass > 0 else np.nan
        part.aggregate("mass", mass)
        part.aggregate("top", float(y.max()))
        part.aggregate("pushed", 0)
        part.aggregate("solved", 1)
        return values

    def _conjugate_gradients(self, ones, y: np.ndarray, residual: np.ndarray,
                             degree: np.ndarray, spread: np.ndarray, limit: int) -> tuple:
        """Undirected, many residuals above the threshold: ``y`` moved by conjugate gradients
        until the residuals they track are all below it (at most ``limit`` rounds); returns ``y``,
        its exact residual (one product more), which the pushes go on from if rounding left some
        above, and the rounds taken.

        With ``A`` symmetric, ``(I - d A D^-1) y = 1`` is ``S z = D^-1/2 1`` for ``z = D^-1/2 y``
        and ``S = I - d D^-1/2 A D^-1/2``, symmetric and positive definite (its eigenvalues lie
        in ``[1 - d, 1 + d]``), and the residual of ``y`` is ``D^1/2`` times that of ``z``. A
        round costs one sparse product, as a push of every residual does, but the residual
        shrinks by about ``(sqrt(k) - 1) / (sqrt(k) + 1)`` a round (``k`` the spread of the
        eigenvalues that are left), not by ``d * lambda_2``. On a 200,000-vertex social graph
        with 1,000,000 edges: 14 rounds for a window that changed 0.1% of the edges, where the
        pushes of every residual took 19 to 21, and 15 from nothing instead of 22 to 23. A vertex
        without edges receives nothing: its ``y`` is 1 at once."""
        d = self.damping
        lone = degree == 0
        y[lone] += residual[lone]
        residual[lone] = 0.0
        root = np.sqrt(degree)
        inverse = np.divide(1.0, root, out=np.zeros(len(y)), where=~lone)
        left = residual * inverse  # the residual of z
        direction = left.copy()
        norm = float(left @ left)
        taken = 0
        while taken < limit and norm > 0.0:
            taken += 1
            product = direction - d * inverse * (ones @ (direction * inverse))
            step = norm / float(direction @ product)
            y += step * root * direction
            left -= step * product
            if np.abs(left * root).max() <= self.threshold(float(y.sum()), float(y.max())):
                break
            before, norm = norm, float(left @ left)
            direction *= norm / before
            direction += left
        return y, 1.0 - y + ones @ (y * spread), max(taken, 1)

    def _absorb(self, part, values, mass: float, top: float) -> tuple[float, bool]:
        """Undirected: move the residuals' part along the degrees, ``c * deg``, into ``y`` at once
        (``P^T deg = deg``: pushing it for ever adds ``c * deg / (1 - d)``). Returns the sum of
        ``y`` after it and whether it moved anything; every task decides alike, from the
        aggregates."""
        degrees = part.aggregated("degrees")
        if not degrees or part.in_edges is not part.out_edges:
            return mass, False
        d = self.damping
        # The residuals' sum, from the aggregates: every share sent lands on a vertex.
        total = part.num_vertices - mass + d * (mass - part.aggregated("dangling"))
        c = total / degrees
        after = mass + c * degrees / (1.0 - d)
        if abs(c) * part.aggregated("widest") <= self.threshold(after, top):
            return mass, False  # below the threshold everywhere: an unchanged window stays so
        degree = part.out_degree
        values["y"] += (c / (1.0 - d)) * degree
        values["residual"] -= c * degree
        return after, True

    def threshold(self, mass: float, top: float) -> float:
        """``eps``: the largest residual left, for a rank error within the tolerance (see the
        module); ``top`` 0 (nothing known yet) takes ``max(y) <= sum(y)``."""
        if mass <= 0 or top <= 0:
            return min(_MOST, self.tolerance / _MARGIN)
        return min(_MOST, self.tolerance * mass / (_MARGIN * top))

    def terminate(self, iteration: int, aggregates: dict[str, Any]) -> bool:
        """Stop after the first superstep in which no vertex pushed (after the first one when a
        task holding the whole graph solved it there)."""
        return aggregates["pushed"] == 0 and (iteration >= 2 or aggregates["solved"] > 0)

    def removal_scope(self, values: np.ndarray) -> frozenset:
        """Nothing starts again: the residuals of the next window say what a removal changed."""
        return frozenset()

    def restarts(self, values: np.ndarray, scope: frozenset) -> np.ndarray:
        """No vertex."""
        return np.zeros(len(values), dtype=bool)


def _shares(amounts: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """``amounts / degree``, 0 for the dangling vertices (they send nothing)."""
    return np.divide(amounts, degree, out=np.zeros(len(amounts)), where=degree > 0)


def _row_entries(indptr: np.ndarray, rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The positions in a CSR matrix's ``indices`` of the entries of ``rows`` (``counts`` of
    each), row by row."""
    starts = indptr[rows].astype(np.int64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))
