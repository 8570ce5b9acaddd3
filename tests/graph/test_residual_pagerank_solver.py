"""The conjugate-gradient rounds of incremental PageRank's whole-graph solve
(``ResidualPageRank._conjugate_gradients``) on random undirected multigraphs, against an exact
sparse solve of ``(I - d A D^-1) y = 1`` (scipy's ``spsolve``) and a residual computed with dense
numpy: self-loops, repeated edges, vertices without edges, starts from nothing and from a nearby
``y``, and the round limit.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import spsolve

from gyreflow.api.graph.residual_pagerank import ResidualPageRank

DAMPING = 0.85


def symmetric_counts(n: int, pairs: list[tuple[int, int]]) -> sparse.csr_matrix:
    """``A[u, v]``: the number of edges between ``u`` and ``v`` (a self-loop once, on the
    diagonal), as the rows of a task's in-edges give them to the program."""
    rows, columns = [], []
    for u, v in pairs:
        rows.append(u)
        columns.append(v)
        if u != v:
            rows.append(v)
            columns.append(u)
    data = np.ones(len(rows))
    return sparse.coo_matrix((data, (rows, columns)), shape=(n, n)).tocsr()


@st.composite
def graphs(draw):
    n = draw(st.integers(1, 40))
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)),
                          max_size=4 * n))
    start = draw(st.sampled_from(["nothing", "near", "random"]))
    return n, pairs, start, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=150, deadline=None)
@given(graphs(), st.sampled_from([1e-6, 1e-10]))
def test_rounds_reach_the_exact_solution(graph, tolerance):
    n, pairs, start, seed = graph
    counts = symmetric_counts(n, pairs)
    dense = counts.toarray()
    degree = dense.sum(axis=1)
    spread = np.divide(DAMPING, degree, out=np.zeros(n), where=degree > 0)
    system = sparse.identity(n, format="csc") - sparse.csc_matrix(dense * spread)  # d A D^-1
    exact = np.atleast_1d(spsolve(system, np.ones(n)))
    rng = np.random.default_rng(seed)
    y = {"nothing": np.zeros(n), "near": exact * (1 + 0.01 * rng.standard_normal(n)),
         "random": rng.random(n) * 5}[start]
    residual = 1.0 - y + dense @ (y * spread)
    program = ResidualPageRank(DAMPING, tolerance)

    y, left, taken = program._conjugate_gradients(counts, y.copy(), residual.copy(), degree,
                                                  spread, 10_000)

    # The residual it returns is the exact one of the y it returns.
    want = 1.0 - y + dense @ (y * spread)
    assert np.allclose(left, want, rtol=0, atol=1e-12 * max(1.0, float(np.abs(y).max())))
    # Within the bound the program relies on: every y within max|residual| of y* relatively.
    rho = float(np.abs(left).max())
    assert np.all(np.abs(y - exact) <= rho * exact + 1e-11 * exact)
    assert rho <= program.threshold(float(y.sum()), float(y.max())) * 1.001 + 1e-12
    assert 1 <= taken <= max(1, n) + 5  # exact arithmetic would end within n rounds


def test_the_round_limit_is_kept():
    n = 200
    rng = np.random.default_rng(5)
    counts = symmetric_counts(n, [tuple(rng.integers(0, n, 2)) for _ in range(800)])
    degree = np.asarray(counts.sum(axis=1)).ravel()
    spread = np.divide(DAMPING, degree, out=np.zeros(n), where=degree > 0)
    program = ResidualPageRank(DAMPING, 1e-12)
    y, left, taken = program._conjugate_gradients(counts, np.zeros(n), np.ones(n), degree,
                                                  spread, 2)
    assert taken == 2
    assert np.allclose(left, 1.0 - y + counts @ (y * spread), rtol=0, atol=1e-12)
    assert np.abs(left).max() > program.threshold(float(y.sum()), float(y.max()))
