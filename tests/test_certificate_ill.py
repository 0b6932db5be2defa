"""Certificates on ill-conditioned data (issue 16, item 4): sound first, then tight.

A node whose samples ``X_i`` have singular values from 1 down to ``sqrt(ratio)`` (Gram ratio
``e_min/e_max = ratio``) pays ``(delta^T v)^2 / (4 e_min)`` of the gap for a flow error
``delta`` of its demand along the weak direction ``v``; the repair's affine variant matches
the demand to the candidate's gradient there (``certificates.kinds.STIFF_RTOL``).  Null
directions are told from the singular values of ``X_i`` (``NULL_SV_RTOL``), not from the
eigenvalues of the formed Gram matrix.

Reference: ``P*`` of a hand-written CVXPY problem (one variable per node, Clarabel at tight
tolerances), its point evaluated in numpy: an upper bound of ``P*``, so ``gap >= P(W) - P_ref``
is necessary for soundness; tightness compares the gap with ``P(W) - P_ref``.
"""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.certificates.kinds import NULL_SV_RTOL, STIFF_RTOL, node_kinds
from gtvmodel.certificates.sharded_certificate import needs_gather

LAM = 0.3


def _weak(rng: np.random.Generator, m: int, d: int, ratio: float) -> np.ndarray:
    """``m x d`` samples with singular values log-spaced from 1 to ``sqrt(ratio)``."""
    U, _ = np.linalg.qr(rng.standard_normal((m, d)))
    V, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (U * np.logspace(0, 0.5 * np.log10(ratio), d)) @ V.T


def ill_instance(ratio: float, seed: int = 0, n: int = 12, d: int = 5):
    """A connected graph (a ring with chords); nodes 0 and 1 ill-conditioned (Gram ratio
    ``ratio``, scales 1 and 2), every third node from 2 on with ``m_i = d - 2 < d``, nodes
    ``5, 11`` without data, the rest well-conditioned; noisy labels (``X_i^T y_i`` has a part
    along the weak directions).  Returns ``(model, data, edges)``."""
    rng = np.random.default_rng(seed)
    G = nx.cycle_graph(n)
    G.add_edges_from([(0, 6), (1, 4), (3, 9)])
    w_true = rng.standard_normal(d)
    data = {}
    for i in range(n):
        if i in (5, 11):
            continue
        if i < 2:
            X = _weak(rng, 3 * d, d, ratio) * (1 + i)
        elif i % 3 == 2:
            X = rng.standard_normal((d - 2, d))
        else:
            X = rng.standard_normal((2 * d, d))
        data[i] = (X, X @ (w_true + 0.3 * rng.standard_normal(d))
                   + 0.1 * rng.standard_normal(X.shape[0]))
    model = gm.GTVModel(G, dim=d, lam=LAM)
    for i, (X, y) in data.items():
        model.set_loss(i, gm.SquaredLoss(X, y))
    return model, data, list(G.edges())


def objective(W: np.ndarray, data, edges) -> float:
    """``P(W)`` in numpy, from the raw data."""
    fit = sum(float(np.sum((X @ W[i] - y) ** 2)) / len(y) for i, (X, y) in data.items())
    return fit + LAM * sum(float(np.linalg.norm(W[i] - W[j])) for i, j in edges)


def reference(n: int, d: int, data, edges) -> float:
    """``P_ref >= P*``: the hand-written problem solved tightly by Clarabel, its point
    evaluated in numpy."""
    W = cp.Variable((n, d))
    fit = [cp.sum_squares(X @ W[i] - y) / len(y) for i, (X, y) in data.items()]
    tv = [cp.norm(W[i] - W[j], 2) for i, j in edges]
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(fit)) + LAM * cp.sum(cp.hstack(tv))))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-10)
    # Clarabel may call its last point inaccurate at these tolerances: the numpy value of
    # any point bounds P* from above, and this one is within ~1e-11 of it here
    assert prob.status in ("optimal", "optimal_inaccurate")
    return objective(np.asarray(W.value), data, edges)


@pytest.fixture(scope="module", params=[1e-9, 1e-11, 1e-13])
def case(request):
    ratio = request.param
    model, data, edges = ill_instance(ratio)
    P_ref = reference(model.num_nodes, model.dim, data, edges)
    sol = gm.solve_exact(model, certify=False)
    return ratio, model, data, edges, P_ref, sol


def test_ill_conditioned_nodes_are_stiff_not_null(case):
    ratio, model, data, *_ = case
    kinds = node_kinds(model)
    # the weak directions of nodes 0 and 1 are resolved by the singular values: not null
    assert kinds.stiff.tolist() == [0, 1]
    assert 0 not in kinds.subspace and 1 not in kinds.subspace
    for B, e in zip(kinds.stiff_bases, kinds.stiff_values, strict=True):
        # every direction of an ill-conditioned node is stiff (full rank: all d of them)
        assert B.shape == (5, 5) and np.allclose(B.T @ B, np.eye(5), atol=1e-12)
        assert NULL_SV_RTOL ** 2 < e.min() / e.max() <= STIFF_RTOL
        assert np.allclose(e.min() / e.max(), ratio, rtol=1e-2)
    # m_i < d nodes and nodes without data are subspace conditions
    assert {i for i in range(model.num_nodes) if i % 3 == 2 or i in (5, 11)} <= \
        set(kinds.subspace.tolist())


def test_exact_solution_certified_to_1e_9(case):
    ratio, model, data, edges, P_ref, sol = case
    cert = gm.certify(model, sol.weights, sol.flows)
    P = objective(sol.weights, data, edges)
    assert abs(cert.primal_value - P) <= 1e-12 * max(1.0, abs(P))
    assert cert.gap >= P - P_ref  # sound
    assert cert.relative_gap <= 1e-9, cert.summary()


def test_algorithm1_iterate_certified_close_to_its_suboptimality(case):
    # a near-optimal iterate (300 iterations: P(W) - P* = 9e-9 at every ratio): flow errors
    # along the weak directions used to cost (delta^T v)^2 / (4 e_min) -- gaps of 3e-4, 3e-2
    # and 5e-3 at ratios 1e-9, 1e-11, 1e-13 (33,000x to 3,300,000x the suboptimality, and 1e-3
    # at ratio 1e-13 however long Algorithm 1 ran); now the ill-conditioned nodes carry none
    # of it and the gap is the iterate's edge complementarity, 2.8e-7 at every ratio
    ratio, model, data, edges, P_ref, _ = case
    res = gm.solve_primal_dual(model, max_iter=300, tol=0.0, record_every=None)
    cert = gm.certify(model, res.weights, res.flows, fallback=False)
    true = objective(res.weights, data, edges) - P_ref
    assert true > 1e-9  # not converged: the comparison means something
    assert cert.gap >= true  # sound
    assert cert.gap <= 100 * true, (cert.gap, true, cert.repairs)
    assert cert.node_gaps[node_kinds(model).stiff].sum() <= 1e-6 * cert.gap
    assert any("stiff directions" in r for r in cert.repairs)


def test_ill_node_without_subspace_conditions():
    # no zero-loss or rank-deficient node: every affine condition spans R^d and the solver
    # states them in the standard basis (the demand of node 0 matched to its gradient); the
    # gap of an Algorithm 1 iterate used to be 1,500x its suboptimality (5.4e-3 for 3.7e-6)
    rng = np.random.default_rng(0)
    d, n = 4, 6
    data = {}
    for i in range(n):
        X = rng.standard_normal((8, d))
        if i == 0:
            X = _weak(rng, 8, d, 1e-11)
        data[i] = (X, X @ np.ones(d) + 0.1 * rng.standard_normal(8))
    model = gm.GTVModel(nx.cycle_graph(n), dim=d, lam=LAM)
    for i, (X, y) in data.items():
        model.set_loss(i, gm.SquaredLoss(X, y))
    edges = list(nx.cycle_graph(n).edges())
    assert node_kinds(model).subspace.size == 0 and node_kinds(model).stiff.tolist() == [0]
    # a sharded (dask) certificate gathers to the serial one, which has the affine variant
    assert "ill-conditioned" in needs_gather(model)
    P_ref = reference(n, d, data, edges)
    for iters in (40, 60):
        res = gm.solve_primal_dual(model, max_iter=iters, tol=0.0, record_every=None)
        cert = gm.certify(model, res.weights, res.flows, fallback=False)
        true = objective(res.weights, data, edges) - P_ref
        assert true <= cert.gap <= 1.5 * true + 1e-10, (iters, cert.gap, true)


def test_perturbed_candidates_are_sound(case):
    ratio, model, data, edges, P_ref, sol = case
    rng = np.random.default_rng(1)
    v = node_kinds(model).stiff_bases[0][:, 0]  # the weakest direction of node 0
    for eps in (1e-8, 1e-5, 1e-2):
        W = sol.weights + eps * rng.standard_normal(sol.weights.shape)
        W[0] += 1e3 * eps * v  # cheap in the objective, a large move of the weights
        U = sol.flows + eps * rng.standard_normal(sol.flows.shape)
        for flows in (U, None):
            cert = gm.certify(model, W, flows)
            assert cert.gap >= objective(W, data, edges) - P_ref, (eps, cert.summary())


def test_sample_svd_matches_the_gram_matrices():
    rng = np.random.default_rng(3)
    d = 4
    model = gm.GTVModel(nx.path_graph(4), dim=d, lam=1.0)
    Xs = [rng.standard_normal((m, d)) * s for m, s in ((2, 1.0), (4, 1e3), (9, 1e-3))]
    Xs.append(np.vstack([1e3 * Xs[0], 1e-3 * Xs[0]]))  # rank 2, rows scaled 1e-3 and 1e3
    for i, X in enumerate(Xs):
        model.set_loss(i, gm.SquaredLoss(X, rng.standard_normal(len(X))))
    (batch,) = model.structure().batches
    e, V = batch.sample_svd()
    for j, X in enumerate(Xs):
        Q = X.T @ X / len(X)
        assert np.allclose(V[j] @ np.diag(e[j]) @ V[j].T, Q, rtol=0, atol=1e-13 * e[j, -1])
        assert np.allclose(V[j].T @ V[j], np.eye(d), atol=1e-13)
        assert np.all(np.diff(e[j]) >= 0)
    # rank deficiency (m < d, collinear rows) gives null directions, from singular values
    # about 1e-16 relative; no direction is stiff
    kinds = node_kinds(model)
    assert kinds.subspace.tolist() == [0, 3] and kinds.stiff.size == 0
    assert [B.shape[1] for B in kinds.subspace_bases] == [2, 2]
