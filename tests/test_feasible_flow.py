"""The phase-I kernel of the flow recovery (gtvmodel/kernels/feasible_flow.py): a flow strictly
inside its l2 capacities meeting a conservation system, or None when none exists.  Feasibility
is decided independently by a CVXPY problem written here (the least congestion
``min s : D^T U = B, ||u_e|| <= s c_e``)."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from gtvmodel.kernels.feasible_flow import strictly_feasible_flow


def _instance(seed: int, d: int, scale: float):
    """A connected random graph, capacities, and node demands ``B = -D^T U0`` of a flow
    ``U0`` whose congestion is ``scale`` (so a flow of congestion <= scale exists)."""
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(40, 4, 0.3, seed=seed)
    E = np.array(sorted((min(a, b), max(a, b)) for a, b in G.edges))
    n, m = G.number_of_nodes(), len(E)
    D = sp.csr_matrix((np.r_[np.ones(m), -np.ones(m)], (np.r_[np.arange(m), np.arange(m)],
                                                        np.r_[E[:, 0], E[:, 1]])), shape=(m, n))
    cap = rng.uniform(0.5, 2.0, m)
    U0 = rng.normal(size=(m, d))
    U0 *= (scale * cap / np.linalg.norm(U0, axis=1))[:, None]
    B = -(D.T @ U0)
    return D, cap, B


def _system(D: sp.csr_matrix, B: np.ndarray, d: int):
    """``A vec(U) = b`` for ``-D^T U = B`` with row-major ``vec``."""
    A = sp.kron(-D.T, sp.identity(d), format="csr")
    return A, B.ravel()


def _least_congestion(D, cap, B, d):
    U = cp.Variable((D.shape[0], d))
    s = cp.Variable()
    prob = cp.Problem(cp.Minimize(s), [-(D.T @ U) == B, cp.norm(U, 2, axis=1) <= s * cap])
    prob.solve(solver=cp.CLARABEL)
    return float(s.value)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("d", [1, 3])
def test_finds_a_strictly_feasible_flow_when_one_exists(seed: int, d: int) -> None:
    D, cap, B = _instance(seed, d, scale=0.999)
    assert _least_congestion(D, cap, B, d) < 1.0  # the independent check: one exists
    A, b = _system(D, B, d)
    x = strictly_feasible_flow(A, b, cap, d)
    assert x is not None
    U = x.reshape(-1, d)
    assert np.all(np.linalg.norm(U, axis=1) < cap)
    # conservation holds on every node but one grounded per connected cluster, where the
    # imbalance of the cluster's demands (0 here, up to rounding) remains: so everywhere
    np.testing.assert_allclose(-(D.T @ U), B, atol=1e-10 * np.abs(B).max())


@pytest.mark.parametrize("seed", range(3))
def test_none_when_no_flow_fits(seed: int) -> None:
    d = 2
    D, cap, B = _instance(seed, d, scale=1.0)
    B = 1.5 * B / _least_congestion(D, cap, B, d)  # least congestion 1.5: nothing fits
    A, b = _system(D, B, d)
    assert strictly_feasible_flow(A, b, cap, d) is None
