"""The phase-I kernel of the flow recovery (gtvmodel/kernels/feasible_flow.py): a flow strictly
inside its l2 capacities meeting a conservation system, or None when none exists.  Feasibility
is decided independently by a CVXPY problem written here (the least congestion
``min s : D^T U = B, ||u_e|| <= s c_e``).  Every test runs with both factorizations of the Newton
matrices: CHOLMOD (``gtvmodel.kernels.sparse_cholesky``, where cvxopt is installed) and SuperLU
(the path without it)."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import gtvmodel as gm
from gtvmodel.kernels import feasible_flow as ff
from gtvmodel.kernels import sparse_cholesky
from gtvmodel.kernels.feasible_flow import strictly_feasible_flow, strictly_feasible_point
from gtvmodel.kernels.sparse_cholesky import SparseCholesky

_CHOLMOD = pytest.mark.skipif(not sparse_cholesky.available(), reason="cvxopt not installed")


@pytest.fixture(autouse=True, params=["superlu", pytest.param("cholmod", marks=_CHOLMOD)])
def factorization(request, monkeypatch) -> str:
    """Each test with SuperLU alone and with CHOLMOD (skipped without cvxopt)."""
    monkeypatch.setattr(ff, "CHOLMOD", request.param == "cholmod")
    return request.param


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


# ===================================================================== polyhedral capacities

def _polytope_instance(seed: int, scale: float, ties: bool = True):
    """The flow recovery's system for the ``l_inf`` penalty (d = 3) on a random graph: fused
    edges ``u_e = p_e - q_e`` in the cross-polytope ``1^T (p_e + q_e) <= c_e`` (rows of
    ``A_ub``), tie edges ``u_ej = sign_ej t_ej`` on 2 or 3 coordinates with ``1^T t_e = c_e``
    (rows of ``A_eq``); the demands are those of a flow whose fused rows have ``||u_e||_1 =
    scale c_e`` and whose ties are strictly positive."""
    d = 3
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(40, 4, 0.3, seed=seed)
    E = np.array(sorted((min(a, b), max(a, b)) for a, b in G.edges))
    n, m = G.number_of_nodes(), len(E)
    D = sp.csr_matrix((np.r_[np.ones(m), -np.ones(m)], (np.r_[np.arange(m), np.arange(m)],
                                                        np.r_[E[:, 0], E[:, 1]])), shape=(m, n))
    K, _ = _system(D, np.zeros((n, d)), d)
    cap = rng.uniform(0.5, 2.0, m)
    tie = rng.random(m) < (0.3 if ties else 0.0)
    fused = np.flatnonzero(~tie)
    cols, x_true, ub_owner, eq_owner = [], [], [], []
    for r, e in enumerate(fused):
        u = rng.normal(size=d)
        u *= scale * cap[e] / np.abs(u).sum()
        cols += [K[:, e * d + j] for j in range(d)] + [-K[:, e * d + j] for j in range(d)]
        x_true += list(np.maximum(u, 0)) + list(np.maximum(-u, 0))
        ub_owner += [r] * (2 * d)
        eq_owner += [-1] * (2 * d)
    for r, e in enumerate(np.flatnonzero(tie)):
        js = rng.choice(d, size=int(rng.integers(2, d + 1)), replace=False)
        t = rng.dirichlet(np.ones(js.size)) * cap[e]
        cols += [rng.choice([-1.0, 1.0]) * K[:, e * d + j] for j in js]
        x_true += list(t)
        ub_owner += [-1] * js.size
        eq_owner += [r] * js.size
    A = sp.hstack(cols, format="csr")
    x_true, ub_owner, eq_owner = np.array(x_true), np.array(ub_owner), np.array(eq_owner)
    A_ub = _owner_rows(ub_owner, fused.size)
    A_eq = _owner_rows(eq_owner, int(tie.sum()))
    return A, A @ x_true, A_eq, cap[tie], A_ub, cap[fused]


def _owner_rows(owner: np.ndarray, k: int) -> sp.csr_matrix:
    cols = np.flatnonzero(owner >= 0)
    return sp.csr_matrix((np.ones(cols.size), (owner[cols], cols)), shape=(k, owner.size))


def _least_congestion_polytope(A, b, A_eq, b_eq, A_ub, b_ub) -> float:
    """``min s : A x = b, A_eq x = b_eq, x >= 0, A_ub x <= s b_ub`` (CVXPY, Clarabel)."""
    x = cp.Variable(A.shape[1])
    s = cp.Variable()
    cons = [A @ x == b, x >= 0, A_ub @ x <= s * b_ub]
    if A_eq.shape[0]:
        cons.append(A_eq @ x == b_eq)
    prob = cp.Problem(cp.Minimize(s), cons)
    prob.solve(solver=cp.CLARABEL)
    return float(s.value)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ties", [True, False])
def test_polytope_point_strictly_feasible_when_one_exists(seed: int, ties: bool) -> None:
    A, b, A_eq, b_eq, A_ub, b_ub = _polytope_instance(seed, 0.99, ties)
    assert _least_congestion_polytope(A, b, A_eq, b_eq, A_ub, b_ub) < 1.0  # one exists
    x = strictly_feasible_point(A, b, A_eq, b_eq, A_ub, b_ub)
    assert x is not None
    assert np.all(x > 0)
    assert np.all(A_ub @ x < b_ub)
    np.testing.assert_allclose(A_eq @ x, b_eq, rtol=1e-10)
    # conservation on every node (the grounded rows' cluster imbalance is rounding here)
    np.testing.assert_allclose(A @ x, b, atol=1e-10 * np.abs(b).max())


@pytest.mark.parametrize("seed", range(3))
def test_polytope_point_none_when_nothing_fits(seed: int) -> None:
    A, b, A_eq, b_eq, A_ub, b_ub = _polytope_instance(seed, 1.0, ties=False)
    b = 1.5 * b / _least_congestion_polytope(A, b, A_eq, b_eq, A_ub, b_ub)
    assert strictly_feasible_point(A, b, A_eq, b_eq, A_ub, b_ub) is None


@pytest.mark.parametrize("seed", range(3))
def test_polytope_point_soft_rows_take_the_least_change_of_demand(seed: int) -> None:
    """An inconsistent system (an imbalance no flow carries, as the gradients at weights a
    little off the optimum leave it) with ``soft`` rows: the point meets the hard rows and
    the ties exactly, and its change of the soft rows' demands is within 1 % of the least in
    the metric of ``soft`` (CVXPY: ``min delta^T B^-1 delta`` over the changes that make the
    system consistent; the kernel weighs the flows' norm too, ``1e-8`` against it)."""
    A, b, A_eq, b_eq, A_ub, b_ub = _polytope_instance(seed, 0.9, ties=True)
    rng = np.random.default_rng(seed)
    m = A.shape[0]
    on = rng.random(m) < 0.5
    w = np.where(on, rng.uniform(1.0, 3.0, m), 0.0)
    b = b + 1e-3 * rng.normal(size=m)  # inconsistent: the clusters' sums move
    x = strictly_feasible_point(A, b, A_eq, b_eq, A_ub, b_ub, sp.diags(w, format="csr"))
    assert x is not None
    assert np.all(x > 0)
    assert np.all(A_ub @ x < b_ub)
    np.testing.assert_allclose(A_eq @ x, b_eq, rtol=1e-10)
    delta = b - A @ x
    np.testing.assert_allclose(delta[~on], 0.0, atol=1e-10)
    y, dl = cp.Variable(A.shape[1]), cp.Variable(int(on.sum()))
    sel = sp.csr_matrix((np.ones(on.sum()), (np.flatnonzero(on), np.arange(on.sum()))),
                        shape=(m, int(on.sum())))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.multiply(1.0 / w[on], cp.square(dl)))),
                      [A @ y + sel @ dl == b, A_eq @ y == b_eq])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    least = float(np.sum(dl.value ** 2 / w[on]))
    assert least <= float(np.sum(delta[on] ** 2 / w[on])) <= 1.01 * least


# ===================================================================== Newton matrices

@pytest.mark.parametrize("seed", range(3))
def test_newton_matrices_equal_the_sparse_product(seed: int) -> None:
    """The phase I's Newton matrices ``A H A^T``, assembled from ``H``'s blocks by the map of
    ``_Normal`` (in the order of its first factorization), equal the product computed by
    scipy with ``H`` written out, and their factors solve them: on the recovery's system for
    the cross-polytopes (columns with two and three entries; blocks of the rows of ``A_ub``,
    the other columns alone) and random positive definite blocks, two factorizations in a
    row (the second in the first one's order)."""
    A, _, A_eq, _, A_ub, _ = _polytope_instance(seed, 0.9, ties=True)
    M = sp.vstack([A, A_eq], format="csr")
    rng = np.random.default_rng(seed)
    lin = ff._Linear(sp.csr_matrix(A_ub), np.ones(A_ub.shape[0]), np.ones(A.shape[1]))
    normal = ff._Normal(M, lin.groups)
    for _ in range(2):
        blocks = []
        for G in lin.groups:
            Q = rng.normal(size=G.shape + G.shape[1:])
            blocks.append(Q @ Q.transpose(0, 2, 1) + np.eye(G.shape[1]))
        H = ff._BlockDiagonal(lin.groups, blocks)
        rows = np.concatenate([np.repeat(G, G.shape[1], axis=1).ravel() for G in lin.groups])
        cols = np.concatenate([np.tile(G, (1, G.shape[1])).ravel() for G in lin.groups])
        Hs = sp.csr_matrix((np.concatenate([B.ravel() for B in blocks]), (rows, cols)),
                           shape=(A.shape[1],) * 2)
        v = rng.normal(size=(A.shape[1], 2))
        np.testing.assert_allclose(H @ v, Hs @ v, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(H @ v[:, 0], Hs @ v[:, 0], rtol=1e-12, atol=1e-12)
        S = (M @ Hs @ M.T).toarray()
        np.testing.assert_allclose(normal.matrix(H).toarray(), S, rtol=1e-12,
                                   atol=1e-12 * np.abs(S).max())
        fac = normal.factor(H, regularize=True)
        assert fac is not None
        y = rng.normal(size=S.shape[0])
        rhs = S @ y  # consistent (the tie rows may be implied by the node rows)
        np.testing.assert_allclose(S @ fac.solve(rhs), rhs, atol=1e-9 * np.abs(rhs).max())


def test_newton_factor_is_cholmod_where_installed(factorization: str) -> None:
    """The factorization the fixture selects is the one used (a test of the fixture)."""
    A, _, A_eq, _, A_ub, _ = _polytope_instance(0, 0.9, ties=True)
    M = sp.vstack([A, A_eq], format="csr")
    lin = ff._Linear(sp.csr_matrix(A_ub), np.ones(A_ub.shape[0]), np.ones(A.shape[1]))
    H = ff._BlockDiagonal(lin.groups, [np.broadcast_to(np.eye(G.shape[1]), G.shape + G.shape[1:])
                                       for G in lin.groups])
    fac = ff._Normal(M, lin.groups).factor(H, regularize=True)
    assert fac is not None
    assert isinstance(fac.lu, SparseCholesky) == (factorization == "cholmod")


@pytest.mark.parametrize("penalty", ["norm2", "norminf"])
def test_weights_only_certificates_as_tight_with_either_factorization(penalty: str,
                                                                       monkeypatch) -> None:
    """``certify(model, W*)`` without flows through the phase I (``Norm2`` and ``NormP(inf)``
    at ``d = 3``, half the nodes data-less, fused clusters): at an optimum solved tightly by a
    plain CVXPY problem written here, the relative gap is below 1e-8 with CHOLMOD and with
    SuperLU, and both gaps bound the true suboptimality from above (0 up to the solve's
    accuracy)."""
    n, d = 40, 3
    G = nx.connected_watts_strogatz_graph(n, 4, 0.3, seed=3)
    rng = np.random.default_rng(3)
    pen = gm.Norm2() if penalty == "norm2" else gm.NormP(np.inf)
    model = gm.GTVModel(G, dim=d, penalty=pen, lam=0.3)
    data = {i: rng.normal(size=d) + (2.0 if i < n // 2 else -2.0) for i in range(n)
            if rng.random() < 0.5}
    for i, y in data.items():
        model.set_loss(i, gm.QuadraticLoss(y))
    W = cp.Variable((n, d))
    E = np.array(list(G.edges))
    fit = sum(cp.sum_squares(W[i] - y) for i, y in data.items())  # QuadraticLoss: ||w - y||^2
    tv = cp.sum(cp.norm(W[E[:, 0]] - W[E[:, 1]], 2 if penalty == "norm2" else "inf", axis=1))
    prob = cp.Problem(cp.Minimize(fit + 0.3 * tv))
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-13, tol_gap_rel=1e-13, tol_feas=1e-13)
    calls = []
    factor = ff._Normal.factor

    def counted(self, H, regularize=False):
        calls.append(regularize)
        return factor(self, H, regularize)

    monkeypatch.setattr(ff._Normal, "factor", counted)
    cert = gm.certify(model, W.value)
    assert len(calls) >= 2  # the phase I ran (its start and Newton steps)
    assert cert.relative_gap <= 1e-8
    assert cert.gap >= cert.primal_value - prob.value - 1e-9 * max(1.0, abs(prob.value))


def test_an_indefinite_matrix_goes_to_superlu(factorization: str) -> None:
    """A symmetric matrix that is not positive definite but nonsingular: CHOLMOD refuses it
    and SuperLU (LU without pivoting) factors it; the solve is exact either way."""
    rng = np.random.default_rng(0)
    Q = sp.random(30, 30, density=0.1, random_state=1) + sp.identity(30)
    S = sp.csc_matrix(Q @ sp.diags(np.r_[-np.ones(5), np.ones(25)] * 4.0) @ Q.T)
    fac = ff._factor(S)
    assert fac is not None
    assert not isinstance(fac.lu, SparseCholesky)
    b = rng.normal(size=30)
    np.testing.assert_allclose(S @ fac.solve(b), b, atol=1e-9)
