"""The maximum-flow kernel of the flow recovery (gtvmodel/kernels/max_flow.py): a flow in box
capacities meeting a conservation system, or None when none exists.  Feasibility is decided
independently by a CVXPY problem written here (the least congestion ``min s : A x = b,
|x_m| <= s c_m``)."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from gtvmodel.kernels.max_flow import box_feasible_flow


def _instance(seed: int, scale: float, n: int = 60, m: int = 150):
    """A random graph (possibly disconnected), ``A = -D^T``, capacities, and net inflows
    ``b = A x0`` of a flow ``x0`` of congestion ``scale``."""
    rng = np.random.default_rng(seed)
    e = np.array(nx.gnm_random_graph(n, m, seed=seed).edges)
    k = len(e)
    D = sp.csr_matrix((np.r_[np.ones(k), -np.ones(k)], (np.r_[np.arange(k), np.arange(k)],
                                                        np.r_[e[:, 0], e[:, 1]])), shape=(k, n))
    c = rng.uniform(0.1, 3.0, k)
    x0 = rng.uniform(-1.0, 1.0, k)
    x0 *= scale * c / np.abs(x0).max()
    return (-D.T).tocsr(), (-D.T) @ x0, c


def _congestion(A, b, c) -> float:
    x, s = cp.Variable(A.shape[1]), cp.Variable()
    cp.Problem(cp.Minimize(s), [A @ x == b, cp.abs(x) <= s * c]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    return float(s.value)


@pytest.mark.parametrize("seed", range(6))
def test_meets_the_demands_inside_the_capacities(seed: int) -> None:
    A, b, c = _instance(seed, 1.0)  # congestion 1: some flows must saturate
    x = box_feasible_flow(A, b, c)
    assert x is not None
    assert np.abs(A @ x - b).max() <= 1e-12 * max(1.0, np.abs(b).max())
    assert np.all(np.abs(x) <= c)


@pytest.mark.parametrize("seed", range(8))
def test_none_exactly_when_the_least_congestion_exceeds_one(seed: int) -> None:
    # x0 over its capacities; scale 1.15: the least congestion is below 1 on 5 of the 8 seeds
    A, b, c = _instance(100 + seed, 1.15)
    s = _congestion(A, b, c)
    assert abs(s - 1.0) > 1e-6  # the instance decides clearly
    x = box_feasible_flow(A, b, c)
    assert (x is None) == (s > 1.0), s
    if x is not None:
        assert np.abs(A @ x - b).max() <= 1e-12 * max(1.0, np.abs(b).max())
        assert np.all(np.abs(x) <= c)


def test_rejects_matrices_that_are_not_incidences() -> None:
    A = sp.csr_matrix(np.array([[1.0, 1.0], [-1.0, 2.0]]))
    assert box_feasible_flow(A, np.zeros(2), np.ones(2)) is None
    assert box_feasible_flow(sp.csr_matrix((3, 0)), np.zeros(3), np.zeros(0)) is None
