"""Logistic nodes in Algorithm 1 and their certificates (issue 16 item 3): the certificate of
an iterate is a continuous, reproducible function of it (1e-15 perturbations move the gap by
less than 1e-10 relative, also where a node's demand leaves its conjugate domain and the
repair must move flows), and stays sound against an independent CVXPY problem; the Newton prox
with its predictor and its cubic-bound steps agrees with an independent CVXPY prox."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm


def _logistic_model(penalty: gm.Penalty, seed: int = 3) -> gm.GTVModel:
    """Logistic nodes on a small-world graph, every third one hinge instead (conjugates from
    the certificate's CVXPY split), one node without data constrained to ``w >= 0`` (its
    conjugate domain is the cone ``s <= 0``: the flows of an iterate push its demand out of
    it, and the repair has to move them)."""
    G = nx.connected_watts_strogatz_graph(14, 4, 0.3, seed=seed)
    rng = np.random.default_rng(seed)
    model = gm.GTVModel(G, 3, penalty=penalty, lam=0.4)
    for v in G.nodes:
        if v == 5:
            continue  # zero loss
        X = rng.standard_normal((6, 3))
        y = np.where(X @ [1.0, -2.0, 0.5] + 0.3 * rng.normal(size=6) > 0, 1.0, -1.0)
        model.set_loss(v, gm.HingeLoss(X, y, l2=0.05) if v % 3 == 0
                       else gm.LogisticLoss(X, y, l2=0.05))
    model.add_constraint(5, gm.NonNeg())
    return model


def _reference(model: gm.GTVModel, penalty_rows) -> float:
    """P* by an independent CVXPY problem (exponential cones), solved tightly."""
    n, d = model.num_nodes, model.dim
    W = cp.Variable((n, d))
    terms = []
    for i, v in enumerate(model.nodes):
        loss = model.loss(v)
        if loss is None or not loss.has_data:
            continue
        X, y = loss.X, loss.y
        margin = cp.multiply(y, X @ W[i])
        fit = cp.pos(1 - margin) if loss.kind == "hinge" else cp.logistic(-margin)
        terms.append(cp.sum(fit) / X.shape[0] + 0.05 * cp.sum_squares(W[i]))
    D = model.incidence
    diffs = D @ W
    obj = cp.sum(terms) + model.lam * cp.sum(cp.multiply(model.edge_weights,
                                                         penalty_rows(diffs)))
    prob = cp.Problem(cp.Minimize(obj), [W[list(model.nodes).index(5)] >= 0])
    prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    return float(prob.value)


def _mixed_model(penalty: gm.Penalty, seed: int = 1) -> gm.GTVModel:
    """Squared, Huber, quadratic (with ``l1``), logistic and zero-loss nodes, boxes and a ball
    (``tests/test_torch_backend.py``'s model with its hinge nodes logistic: a hinge node's
    conjugate comes from the CVXPY split at its solver's accuracy, ~1e-9 relative): an iterate
    of Algorithm 1 leaves the demand of node 7 (zero loss, ``w >= 0``) outside its cone."""
    G = nx.connected_watts_strogatz_graph(24, 4, 0.3, seed=seed)
    G.add_node(24)
    rng = np.random.default_rng(seed)
    model = gm.GTVModel(G, 3, penalty=penalty, lam=0.4)
    for v in G.nodes:
        X = rng.standard_normal((5, 3))
        y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=5)
        labels = np.where(X[:, 0] > 0, 1.0, -1.0)
        kind = v % 4
        if kind == 0:
            model.set_loss(v, gm.SquaredLoss(X, y) if v % 8 else gm.HuberLoss(X, y, 0.5))
        elif kind == 1:
            model.set_loss(v, gm.QuadraticLoss(rng.normal(size=3) * 2, l1=0.1 * (v % 3)))
        elif kind == 2:
            model.set_loss(v, gm.LogisticLoss(X, labels, l2=0.05 if v % 8 == 2 else 0.1))
    model.add_constraint(1, gm.Box(-0.5, 0.5))
    model.add_constraint(9, gm.NormBall(0.8, p=2))
    model.add_constraint(7, gm.Box(lo=0.0))
    return model


@pytest.mark.parametrize("penalty, iters", [(gm.NormP(3), 30), (gm.Norm2(), 45),
                                            (gm.NormP(1.5), 60)],
                         ids=["NormP(3)", "Norm2", "NormP(1.5)"])
def test_certificate_is_a_continuous_function_of_the_iterate(penalty, iters):
    """1e-15 relative perturbations of an iterate and its flows move the gap and the dual
    value by less than 1e-10 relative (the convex projection of the flows, used before the
    closed-form shrink, moved them by 6e-8 to 7e-7 relative here: its solver's stopping
    point)."""
    model = _mixed_model(penalty)
    res = gm.solve_primal_dual(model, max_iter=iters, tol=0.0, record_every=iters,
                               certificate_budget=None)
    W, U = res.weights, res.flows
    base = gm.certify(model, W, U, fallback=False)
    assert np.isfinite(base.gap) and base.dual_feasible
    assert any("shrank the flows" in r for r in base.repairs)
    rng = np.random.default_rng(0)
    scale = max(1.0, abs(base.primal_value))
    for _ in range(3):
        W1 = W * (1.0 + 1e-15 * rng.standard_normal(W.shape))
        U1 = U * (1.0 + 1e-15 * rng.standard_normal(U.shape))
        cert = gm.certify(model, W1, U1, fallback=False)
        assert abs(cert.gap - base.gap) <= 1e-10 * scale
        assert abs(cert.dual_value - base.dual_value) <= 1e-10 * scale


@pytest.mark.parametrize("penalty, rows", [
    (gm.Norm2(), lambda Z: cp.norm(Z, 2, axis=1)),
    (gm.NormP(3), lambda Z: cp.hstack([cp.pnorm(Z[e], 3) for e in range(Z.shape[0])])),
], ids=["Norm2", "NormP(3)"])
def test_certificate_after_the_domain_shrink_is_sound(penalty, rows):
    """The shrink's flows give a valid bound: gap >= P(W) - P* and D <= P* for an independent
    CVXPY problem."""
    model = _logistic_model(penalty)
    res = gm.solve_primal_dual(model, max_iter=40, tol=0.0, record_every=40,
                               certificate_budget=None)
    cert = gm.certify(model, res.weights, res.flows, fallback=False)
    assert np.isfinite(cert.gap) and cert.dual_feasible
    assert any("shrank the flows" in r for r in cert.repairs)
    p_star = _reference(model, rows)
    assert cert.gap >= cert.primal_value - p_star - 1e-9
    assert cert.dual_value <= p_star + 1e-9


def _cvxpy_logistic_prox(X: np.ndarray, y: np.ndarray, l2: float, v: np.ndarray,
                         tau: float) -> np.ndarray:
    """``argmin (1/m) sum_r log(1 + exp(-y_r x_r^T z)) + l2 ||z||^2 + ||z - v||^2 / (2 tau)``
    by CVXPY (exponential cones), tightly."""
    z = cp.Variable(X.shape[1])
    obj = (cp.sum(cp.logistic(-cp.multiply(y, X @ z))) / X.shape[0] + l2 * cp.sum_squares(z)
           + cp.sum_squares(z - v) / (2.0 * tau))
    cp.Problem(cp.Minimize(obj)).solve(solver=cp.CLARABEL, tol_gap_abs=1e-12,
                                       tol_gap_rel=1e-12, tol_feas=1e-12)
    return np.asarray(z.value)


def test_newton_prox_with_predictor_and_cubic_stop_matches_cvxpy():
    """Repeated calls of the logistic batch's prox as Algorithm 1 makes them (warm starts from
    the last answer through the first-order predictor, steps that change, a far jump, tiny and
    huge tau: full steps taken without a line search where the cubic bound allows, and the
    quadratic-convergence stop) agree with an independent CVXPY prox to 1e-8."""
    from gtvmodel.terms.losses import LossBatch

    rng = np.random.default_rng(7)
    k, d = 5, 3
    losses = []
    for i in range(k):
        X = rng.standard_normal((4 + i, d)) * (0.3 + i)
        y = np.where(rng.standard_normal(4 + i) > 0, 1.0, -1.0)
        losses.append(gm.LogisticLoss(X, y, l2=0.0 if i % 2 else 0.1))
    batch = LossBatch(gm.LogisticLoss, np.arange(k), losses, k, d)
    V, tau = rng.standard_normal((k, d)), np.array([1e-3, 0.1, 1.0, 10.0, 1e3])
    Z = batch.prox(V, tau)
    for move, factor in ((0.01, 1.0), (1e-6, 1.0), (20.0, 1.0), (0.05, 3.0), (0.02, 0.1)):
        V, tau = V + move * rng.standard_normal(V.shape), tau * factor
        Z = batch.prox(V, tau, W0=Z)
        for i, ls in enumerate(losses):
            ref = _cvxpy_logistic_prox(ls.X, ls.y, ls.l2, V[i], float(tau[i]))
            np.testing.assert_allclose(Z[i], ref, rtol=0, atol=1e-8 * max(1.0, np.abs(ref).max()))
