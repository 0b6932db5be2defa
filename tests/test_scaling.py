"""Conventions users bring (docs/conventions.md, "Conventions users bring"): SquaredLoss's
``scaling`` option against independent formulas (value, gradient, CVXPY expression, conjugate,
prox, batches, file spec), and each peer's formulation, written here in CVXPY, against
gtvmodel's mapped model: prox-tv's 1-D TV, SnapVX's network lasso, strat_models' Laplacian
regularization and scikit-learn's Lasso-style ``1/(2m)`` loss."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.io import load_model, save_model

FACTOR = {"mean": lambda m: 1.0 / m, "sum": lambda m: 1.0, "half": lambda m: 0.5,
          "half_mean": lambda m: 0.5 / m}
OPTS = dict(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)


def _samples(m=6, d=3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, d)), rng.normal(size=m), rng.normal(size=d)


@pytest.mark.parametrize("scaling", list(FACTOR))
def test_scaled_loss_hooks_match_the_formula(scaling):
    X, y, w = _samples()
    s = FACTOR[scaling](len(y))
    loss = gm.SquaredLoss(X, y, scaling=scaling)
    assert loss.value(w) == pytest.approx(s * np.sum((y - X @ w) ** 2), rel=1e-12)
    assert np.allclose(loss.gradient(w), 2 * s * X.T @ (X @ w - y), rtol=1e-12)
    x = cp.Variable(3)
    x.value = w
    assert loss.expression(x).value == pytest.approx(loss.value(w), rel=1e-12)
    v, tau = np.array([0.3, -1.0, 2.0]), 0.7  # prox: argmin L(u) + ||u - v||^2 / (2 tau)
    prox = np.linalg.solve(2 * s * X.T @ X + np.eye(3) / tau, 2 * s * X.T @ y + v / tau)
    assert np.allclose(loss.prox(v, tau), prox, atol=1e-10)
    u = cp.Variable(3)  # conjugate: sup_u v^T u - s ||y - X u||^2
    conj = cp.Problem(cp.Maximize(v @ u - s * cp.sum_squares(y - X @ u)))
    conj.solve(**OPTS)
    assert loss.conjugate(v) == pytest.approx(conj.value, rel=1e-7, abs=1e-9)
    given_X, given_y = loss.samples()
    assert np.array_equal(given_X, X) and np.array_equal(given_y, y)
    assert repr(loss).endswith(")") and (scaling == "mean") == ("scaling" not in repr(loss))


def test_scaling_through_set_data_batches_and_files(tmp_path):
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(9, 2)), rng.normal(size=9)
    index = np.array([0, 0, 0, 2, 2, 2, 2, 3, 3])
    model = gm.GTVModel(nx.path_graph(4), 2, lam=0.2)
    model.set_data(X, y, "squared", node_index=index, scaling="sum")  # one loss per group
    W = rng.normal(size=(4, 2))
    sums = [np.sum((y[index == i] - X[index == i] @ W[i]) ** 2) for i in range(4)]
    assert np.allclose(model.loss_values(W), sums, rtol=1e-12)
    assert all(model.loss(i).scaling == "sum" for i in (0, 2, 3))
    sol = gm.solve_exact(model)  # batches, certificate
    assert sol.certificate.gap <= 1e-6 * max(1.0, model.objective(sol.weights))
    save_model(model, tmp_path / "m.gtv")
    back = load_model(tmp_path / "m.gtv")  # the file holds the rescaled samples
    assert np.allclose(back.loss_values(W), sums, rtol=1e-12)
    with pytest.raises(gm.ParameterError, match="scaling"):
        gm.SquaredLoss(X, y, scaling="total")


def _chain_signal(n=8, seed=2):
    rng = np.random.default_rng(seed)
    return np.where(np.arange(n) < n // 2, 1.0, -1.0) + 0.3 * rng.normal(size=n)


def test_prox_tv_1d_total_variation():
    """prox-tv's ``tv1_1d(y, lam)``: ``min_x 1/2 ||x - y||^2 + lam sum_i |x_{i+1} - x_i|``."""
    a, lam = _chain_signal(), 0.4
    x = cp.Variable(a.size)
    peer = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(x - a) + lam * cp.norm1(cp.diff(x))))
    peer.solve(**OPTS)
    # scaling="half" on one sample X = [[1]] per node: 1/2 (a_i - w_i)^2, lambda unchanged
    half = gm.GTVModel(nx.path_graph(a.size), 1, penalty=gm.Norm1(), lam=lam)
    half.set_data(np.ones((a.size, 1)), a, "squared", node_index=np.arange(a.size),
                  scaling="half")
    sol = gm.solve_exact(half)
    assert np.allclose(sol.weights[:, 0], x.value, atol=1e-6)
    assert half.objective(sol.weights) == pytest.approx(peer.value, rel=1e-6)
    # the default losses instead: QuadraticLoss ||w - a||^2 is twice prox-tv's term, so the
    # same minimizer needs lambda doubled (the objective is doubled)
    quad = gm.GTVModel(nx.path_graph(a.size), 1, penalty=gm.Norm1(), lam=2 * lam)
    quad.set_losses({i: gm.QuadraticLoss([a[i]]) for i in range(a.size)})
    sol2 = gm.solve_exact(quad)
    assert np.allclose(sol2.weights[:, 0], x.value, atol=1e-6)
    assert quad.objective(sol2.weights) == pytest.approx(2 * peer.value, rel=1e-6)


def _network(seed=3, n=6, m=5, d=2):
    rng = np.random.default_rng(seed)
    G = nx.cycle_graph(n)
    for u, v in G.edges:
        G.edges[u, v]["weight"] = float(rng.uniform(0.5, 2.0))
    data = {i: (rng.normal(size=(m, d)), rng.normal(size=m)) for i in range(n)}
    return G, data


def _peer(G, data, fit, edge_term):
    n, d = G.number_of_nodes(), next(iter(data.values()))[0].shape[1]
    W = cp.Variable((n, d))
    obj = sum(fit(A, b, W[i]) for i, (A, b) in data.items())
    obj = obj + sum(G.edges[u, v]["weight"] * edge_term(W[u] - W[v]) for u, v in G.edges)
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(**OPTS)
    return prob.value, W.value


def _ours(G, data, penalty, lam, **loss_options):
    model = gm.GTVModel(G, 2, penalty=penalty, lam=lam)
    model.set_data(data, **loss_options)
    sol = gm.solve_exact(model)
    return model.objective(sol.weights), sol.weights


def test_snapvx_network_lasso():
    """SnapVX / network lasso (Hallac, Leskovec, Boyd 2015): ``sum_i ||A_i x_i - b_i||^2 + lam
    sum_e w_e ||x_j - x_k||_2`` -- sums, not means: ``scaling="sum"``, lambda unchanged."""
    G, data = _network()
    lam = 0.8
    value, W = _peer(G, data, lambda A, b, x: cp.sum_squares(A @ x - b),
                     lambda z: lam * cp.norm(z, 2))
    ours, Wg = _ours(G, data, gm.Norm2(), lam, scaling="sum")
    assert ours == pytest.approx(value, rel=1e-6)
    assert np.allclose(Wg, W, atol=1e-5)


def test_strat_models_laplacian_regularization():
    """strat_models (Tuck, Barratt, Boyd 2021): data losses summed over each stratum's samples
    and ``sum_e W_e ||theta_u - theta_v||_2^2``; gtvmodel's SquaredNorm2 is ``1/2 ||.||^2``,
    so ``lambda = 2`` (and ``scaling="sum"``)."""
    G, data = _network(seed=4)
    value, W = _peer(G, data, lambda A, b, x: cp.sum_squares(A @ x - b), cp.sum_squares)
    ours, Wg = _ours(G, data, gm.SquaredNorm2(), 2.0, scaling="sum")
    assert ours == pytest.approx(value, rel=1e-6)
    assert np.allclose(Wg, W, atol=1e-5)


def test_sklearn_lasso_style_half_mean_with_l1():
    """scikit-learn's Lasso: ``1/(2m) ||y - X w||^2 + alpha ||w||_1`` per node, plus the TV
    term: ``scaling="half_mean", l1=alpha``."""
    G, data = _network(seed=5)
    alpha, lam = 0.05, 0.3
    value, W = _peer(G, data,
                     lambda A, b, x: cp.sum_squares(b - A @ x) / (2 * len(b))
                     + alpha * cp.norm1(x),
                     lambda z: lam * cp.norm(z, 2))
    ours, Wg = _ours(G, data, gm.Norm2(), lam, scaling="half_mean", l1=alpha)
    assert ours == pytest.approx(value, rel=1e-6)
    assert np.allclose(Wg, W, atol=1e-5)
