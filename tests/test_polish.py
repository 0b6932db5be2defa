"""The polish of ``solve_exact`` (``gtvmodel.solve.polish``, issue 17): weights against oracles
written here (the exact fused-lasso path of ``test_exact.py``, closed forms, a numpy Newton on
the smooth objective), certificates never worse and sound against a hand-written CVXPY
problem, the skipped cases and the argument check.  The polish is that of the interior-point
route, so the solves here ask for it (``method="interior"``): by default ``solve_exact`` now
takes the exact direct route on Norm1 chains and trees with quadratic losses.
"""

from __future__ import annotations

import warnings

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl
from _refs import flsa_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel.solve.polish import polish

EPS = np.finfo(float).eps


# ---------------------------------------------------------------- independent oracles
def _sigmoid(t):
    return 0.5 * (1.0 + np.tanh(0.5 * t))


def newton_oracle(nodes, edges, A, lam, data, kind, W0, l2=0.0):
    """Newton's method in numpy/scipy on ``sum_i L_i(w_i) + l2 ||w_i||^2 + lam sum_e A_e
    ||w_a - w_b||_2`` (``L_i`` the mean squared error or logistic loss of ``data[i] = (X,
    y)``, zero without data), smooth where no edge is fused; from ``W0``.  Returns ``W*`` and
    ``min_e ||w_a - w_b||``."""
    n, d = W0.shape
    a, b = edges[:, 0], edges[:, 1]
    E = len(a)
    D = sp.csr_matrix((np.r_[np.ones(E), -np.ones(E)], (np.r_[np.arange(E), np.arange(E)],
                                                        np.r_[a, b])), shape=(E, n))
    Dk = sp.kron(D, sp.eye(d)).tocsr()
    c = lam * A

    def parts(W, hess):
        f, g, H = l2 * (W**2).sum(), 2 * l2 * W, [2 * l2 * np.eye(d) for _ in range(n)]
        for i in range(n):
            if i not in data:
                continue
            X, y = data[i]
            t = X @ W[i]
            if kind == "squared":
                f += ((t - y) ** 2).mean()
                g[i] += 2 * X.T @ (t - y) / len(y)
                H[i] = H[i] + 2 * X.T @ X / len(y)
            else:  # logistic, labels in {-1, 1}
                f += np.logaddexp(0.0, -y * t).mean()
                g[i] += X.T @ (-y * _sigmoid(-y * t)) / len(y)
                s = _sigmoid(t)
                H[i] = H[i] + (X * (s * (1 - s))[:, None]).T @ X / len(y)
        Z = W[a] - W[b]
        r = np.linalg.norm(Z, axis=1)
        f += (c * r).sum()
        if not hess:
            return f
        N = Z / r[:, None]
        g = g + D.T @ (c[:, None] * N)
        He = (c / r)[:, None, None] * (np.eye(d)[None] - N[:, :, None] * N[:, None, :])
        Hs = sp.block_diag(H, format="csr") + Dk.T @ sp.block_diag(list(He), format="csr") @ Dk
        return f, g, Hs.tocsc(), r.min()

    W = W0.copy()
    for _ in range(40):
        f, g, H, _ = parts(W, True)
        if np.abs(g).max() < 1e-13:
            break
        step = spl.spsolve(H, -g.ravel()).reshape(n, d)
        t = 1.0
        while parts(W + t * step, False) > f + 1e-14 * abs(f) and t > 1e-10:
            t /= 2
        W = W + t * step
    f, g, H, rmin = parts(W, True)
    assert np.abs(g).max() < 1e-10, "the oracle did not converge"
    return W, rmin


def _grid_problem(k=8, d=5, m=5, seed=1):
    rng = np.random.default_rng(seed)
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(k, k))
    halves = np.arange(k * k) % k >= k // 2
    true = np.where(halves[:, None], [[-1, 2, -3, 4, -5]], [[1, 2, 3, 4, 5]])[:, :d]
    data = {}
    for i in range(k * k):
        X = rng.normal(size=(m, d))
        data[i] = (X, X @ true[i] + 0.1 * rng.normal(size=m))
    return G, data


def _model(G, data, lam, kind="squared", penalty=None, l2=0.0):
    d = next(iter(data.values()))[0].shape[1]
    model = gm.GTVModel(G, d, penalty=penalty or gm.Norm2(), lam=lam)
    cls = gm.SquaredLoss if kind == "squared" else gm.LogisticLoss
    for i, (X, y) in data.items():
        model.set_loss(i, cls(X, y, l2=l2))
    return model


# ---------------------------------------------------------------- accuracy against oracles
@pytest.mark.parametrize("lam", [0.001, 0.01])
def test_grid_weights_match_newton_oracle(lam):
    """8 x 8 grid, squared loss, Norm2, no edge fused: the interior-point weights are ~1e-7
    from the oracle (benchmarks/RESULTS.md), the polished ones within 1e-9."""
    G, data = _grid_problem()
    model = _model(G, data, lam)
    ipm = model.solve_exact(method="interior", polish=False)
    sol = model.solve_exact(method="interior")
    edges = np.array(G.edges)
    W_star, rmin = newton_oracle(len(G), edges, np.ones(len(edges)), lam, data, "squared",
                                 ipm.weights)
    assert rmin > 1e-4  # the oracle's objective is smooth there
    err_ipm = np.abs(ipm.weights - W_star).max()
    err = np.abs(sol.weights - W_star).max()
    assert sol.info["polish"]["status"] == "applied"
    assert err <= 1e-9 and err < err_ipm, (err, err_ipm)
    assert sol.info["polish"]["gap_after"] <= sol.info["polish"]["gap_before"]
    assert sol.certificate.gap == sol.info["certified_gap"] == sol.info["polish"]["gap_after"]
    assert sol.objective == pytest.approx(model.objective(W_star), rel=1e-14, abs=1e-14)
    assert sol.timings["polish"] > 0


def test_logistic_sbm_weights_match_newton_oracle():
    """A small SBM with logistic losses (``l2 = 1e-3``), nodes without data, Norm2 at a lambda
    where no edge is fused."""
    rng = np.random.default_rng(3)
    G = nx.stochastic_block_model([12, 12], [[0.5, 0.05], [0.05, 0.5]], seed=3)
    true = np.array([[2.0, -1.0, 0.5], [-2.0, 1.0, 0.5]])
    data = {}
    for i in range(24):
        if i % 5 == 4:
            continue  # no data
        X = rng.normal(size=(8, 3))
        data[i] = (X, np.where(X @ true[i // 12] + 0.5 * rng.normal(size=8) > 0, 1.0, -1.0))
    model = gm.GTVModel(G, 3, lam=0.001)
    for i in range(24):
        model.set_loss(i, gm.LogisticLoss(*data[i], l2=1e-3) if i in data
                       else gm.ZeroLoss(l2=1e-3))
    ipm = model.solve_exact(method="interior", polish=False)
    sol = model.solve_exact(method="interior")
    W_star, rmin = newton_oracle(24, np.array(G.edges), np.ones(G.number_of_edges()), 0.001,
                                 data, "logistic", ipm.weights, l2=1e-3)
    assert rmin > 1e-4
    assert sol.info["polish"]["status"] == "applied"
    # (the interior-point answer is already accurate here: the l2 term makes P well conditioned)
    assert np.abs(sol.weights - W_star).max() <= 1e-9


@pytest.mark.parametrize("seed", [2, 3])
def test_fused_lasso_chain_matches_exact_path(seed, fused_lasso_chain):
    """The 60-node fused-lasso chain (conftest.py; Norm1, fused groups at every lambda):
    within 1e-12 of the exact path solution after the polish."""
    a, model = fused_lasso_chain(seed)
    lams = [0.1, 0.5, 2.0, 10.0]
    exact = flsa_path(a, lams)
    for lam in lams:
        model.lam = lam
        sol = model.solve_exact(method="interior")
        assert sol.info["polish"]["status"] == "applied"
        assert sol.info["polish"]["clusters"] == np.unique(np.round(exact[lam], 9)).size
        np.testing.assert_allclose(sol.weights.ravel(), exact[lam], atol=1e-12, rtol=0)


def test_l1_zeros_match_soft_thresholded_path():
    """With ``eta |w_i|`` on every node the fused-lasso signal approximator's solution is the
    fused solution soft-thresholded by ``eta / 2`` (Friedman et al. 2007, Proposition 1):
    clusters at zero are held there by the polish."""
    rng = np.random.default_rng(7)
    n, eta, lam = 40, 1.5, 0.8
    a = np.repeat(rng.normal(size=4) * 2, 10) + 0.5 * rng.normal(size=n)
    fused = flsa_path(a, [lam])[lam]
    exact = np.sign(fused) * np.maximum(np.abs(fused) - eta / 2, 0.0)
    assert (exact == 0).sum() >= 5
    model = gm.GTVModel(nx.path_graph(n), 1, penalty=gm.Norm1(), lam=lam)
    for i in range(n):
        model.set_loss(i, gm.QuadraticLoss([a[i]], l1=eta))
    sol = model.solve_exact(method="interior")
    assert sol.info["polish"]["status"] == "applied"
    np.testing.assert_allclose(sol.weights.ravel(), exact, atol=1e-12, rtol=0)


@pytest.mark.parametrize("side", [1 - 1e-6, 1 + 1e-6])
@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.Norm1()])
def test_two_nodes_at_the_fusing_threshold(side, penalty):
    """``||w_1 - a_1||^2 + ||w_2 - a_2||^2 + lambda phi(w_1 - w_2)``: the nodes fuse at
    ``lambda = ||a_1 - a_2||_*`` (the dual norm); just below it they stay ``lambda / 2`` apart
    along the subgradient, just above they meet at the mean."""
    a1, a2 = np.array([1.0, 0.5]), np.array([-0.5, -0.25])
    dual = np.linalg.norm(a1 - a2) if isinstance(penalty, gm.Norm2) else np.abs(a1 - a2).max()
    lam = side * dual
    model = gm.GTVModel(nx.path_graph(2), 2, penalty=penalty, lam=lam)
    model.set_loss(0, gm.QuadraticLoss(a1))
    model.set_loss(1, gm.QuadraticLoss(a2))
    # the reference ladder (1e-13 first): the default aims at a certified gap of 1e-10, which
    # leaves the weights up to ~1e-5 off at the threshold (P is 2-strongly convex:
    # ||W - W*||^2 <= gap); measured 3.8e-6 with Norm2 at side 1 + 1e-6
    sol = model.solve_exact(method="interior")
    mid = (a1 + a2) / 2
    if isinstance(penalty, gm.Norm2):
        u = (a1 - a2) * min(1.0, lam / dual)  # the flow; w_1 = a_1 - u / 2
    else:
        u = np.clip(a1 - a2, -lam, lam)
    expect = np.array([a1 - u / 2, a2 + u / 2]) if side < 1 else np.array([mid, mid])
    assert sol.info["polish"]["status"] in ("applied", "rejected")
    np.testing.assert_allclose(sol.weights, expect, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- never worse, and sound
def _reference(n, d, edges, A, lam, pen, losses):
    """``P*`` by a hand-written CVXPY problem, and the numpy objective ``P`` (MATH.md §2)."""
    def value(W):
        total = 0.0
        for i, (kind, par, l1, l2) in losses.items():
            w = W[i]
            if kind == "quadratic":
                total += ((w - par) ** 2).sum()
            elif kind == "squared":
                total += ((par[0] @ w - par[1]) ** 2).mean()
            elif kind == "logistic":
                total += np.logaddexp(0.0, -par[1] * (par[0] @ w)).mean()
            total += l1 * np.abs(w).sum() + l2 * (w**2).sum()
        Z = W[edges[:, 0]] - W[edges[:, 1]] if len(edges) else np.zeros((0, d))
        rows = {"norm2": np.linalg.norm(Z, axis=1), "norm1": np.abs(Z).sum(axis=1),
                "sq": 0.5 * (Z**2).sum(axis=1)}[pen]
        return total + lam * (A * rows).sum()

    W = cp.Variable((n, d))
    terms = []
    for i, (kind, par, l1, l2) in losses.items():
        w = W[i]
        if kind == "quadratic":
            terms.append(cp.sum_squares(w - par))
        elif kind == "squared":
            terms.append(cp.sum_squares(par[0] @ w - par[1]) / len(par[1]))
        elif kind == "logistic":
            terms.append(cp.sum(cp.logistic(-cp.multiply(par[1], par[0] @ w))) / len(par[1]))
        terms += [l1 * cp.norm1(w), l2 * cp.sum_squares(w)]
    for e, (p, q) in enumerate(edges):
        z = W[p] - W[q]
        terms.append(lam * A[e] * {"norm2": cp.norm(z, 2), "norm1": cp.norm1(z),
                                   "sq": 0.5 * cp.sum_squares(z)}[pen])
    prob = cp.Problem(cp.Minimize(cp.sum(terms) if terms else cp.Constant(0.0)))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-11, tol_gap_rel=1e-11, tol_feas=1e-11)
    Wr = W.value if W.value is not None else np.zeros((n, d))
    return value(Wr), value


@st.composite
def instances(draw):
    """Small models with fused clusters (neighbours sharing their data), isolated nodes, nodes
    without data, l1/l2 regularizers and lambda from far below to above the fusing range."""
    n, d = draw(st.integers(2, 7)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = np.array([pr for pr in pairs if rng.random() < 0.5] or [(0, 1)])
    A = rng.uniform(0.5, 2.0, len(edges))
    pen = draw(st.sampled_from(["norm2", "norm1", "sq"]))
    lam = float(10 ** draw(st.floats(-3, 1)))
    groups = rng.integers(0, max(1, n // 2), n)  # nodes of a group share data: fused clusters
    centres = rng.normal(size=(n, d)) * 2
    losses = {}
    for i in range(n):
        kind = draw(st.sampled_from(["zero", "quadratic", "squared", "logistic"]))
        l1 = float(draw(st.sampled_from([0.0, 0.0, 0.3])))
        l2 = float(draw(st.sampled_from([0.0, 0.1]))) if kind != "logistic" else 0.1
        if kind == "quadratic":
            par = centres[groups[i]]
        elif kind in ("squared", "logistic"):
            X = np.random.default_rng(groups[i]).normal(size=(4, d))
            y = X @ centres[groups[i]]
            par = (X, np.sign(y) + (y == 0)) if kind == "logistic" else (X, y)
        else:
            par = None
        losses[i] = (kind, par, l1, l2)
    return n, d, edges, A, pen, lam, losses


def _build(n, d, edges, A, pen, lam, losses):
    G = nx.Graph()
    G.add_nodes_from(range(n))
    G.add_weighted_edges_from([(int(p), int(q), float(w))
                               for (p, q), w in zip(edges, A, strict=True)])
    penalty = {"norm2": gm.Norm2(), "norm1": gm.Norm1(), "sq": gm.SquaredNorm2()}[pen]
    model = gm.GTVModel(G, d, penalty=penalty, lam=lam)
    for i, (kind, par, l1, l2) in losses.items():
        reg = {"l1": l1, "l2": l2}
        model.set_loss(i, gm.ZeroLoss(**reg) if kind == "zero" else
                       gm.QuadraticLoss(par, **reg) if kind == "quadratic" else
                       gm.SquaredLoss(*par, **reg) if kind == "squared" else
                       gm.LogisticLoss(*par, **reg))
    return model


def _check_never_worse(inst):
    n, d, edges, A, pen, lam, losses = inst
    model = _build(*inst)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ipm = model.solve_exact(method="interior", polish=False)
        except gm.GTVError:
            return  # nothing to polish
        sol = model.solve_exact(method="interior")
    info = sol.info["polish"]
    assert info["status"] in ("applied", "rejected", "skipped"), info
    if info["status"] == "applied":
        assert info["gap_after"] <= info["gap_before"]
        assert info["objective_after"] <= info["objective_before"] * (1 + 8 * EPS) + 8 * EPS
        assert sol.certificate.gap == info["gap_after"]
    else:  # the interior-point answer is kept as it was
        np.testing.assert_array_equal(sol.weights, ipm.weights)
    # soundness: P(W) - P* <= gap, with P(W_ref) >= P* from the hand-written problem
    p_ref, value = _reference(n, d, edges, model.edge_weights, lam, pen, losses)
    assert value(sol.weights) - p_ref <= sol.certificate.gap + 1e-12 * (1 + abs(p_ref))


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_polish_never_worsens_the_certificate(inst):
    _check_never_worse(inst)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_polish_never_worsens_the_certificate_sweep(inst):
    _check_never_worse(inst)


def test_rejected_polish_keeps_the_answer():
    """A polished point is kept only when its certificate is at least as good: against a
    certificate with gap 0 (none can be better) the polish is rejected and the answer kept."""
    G, data = _grid_problem(k=4, d=2)
    model = _model(G, data, 0.01)
    ipm = model.solve_exact(method="interior", polish=False)
    perfect = gm.certify(model, ipm.weights, ipm.flows)
    perfect.gap = 0.0
    done = polish(model, ipm.weights, ipm.flows, perfect, 1e-6)
    assert not done.applied and done.info["status"] == "rejected"
    assert done.weights is ipm.weights and done.certificate is perfect


def test_misread_fused_edge_is_rejected_after_one_damped_step():
    """Two nodes, ``||w - a_i||^2`` with ``a = (+-1, 0)``, ``Norm2`` at ``lambda = 5``: the
    optimum is fused at 0 (``lambda >= 2 ||a_0 - a_1||``: the flow 2 is below the capacity
    5).  An answer 2e-9 from it whose flow sits at the capacity reads the edge as not fused;
    Newton on ``phi``'s kink then needs a damped step and the polish is rejected at once,
    keeping the answer and its certificate (the case of the 100 x 100 grid)."""
    model = gm.GTVModel(nx.path_graph(2), 2, penalty=gm.Norm2(), lam=5.0)
    model.set_losses({0: gm.QuadraticLoss([1.0, 0.0]), 1: gm.QuadraticLoss([-1.0, 0.0])})
    W = np.array([[1e-9, 0.0], [-1e-9, 0.0]])
    U = np.array([[-5.0, 0.0]])  # at the capacity: the edge reads as not fused
    cert = gm.certify(model, W, U)
    done = polish(model, W, U, cert, 1e-10)
    assert done.info["status"] == "rejected" and "line search" in done.info["reason"]
    assert not done.applied and done.weights is W and done.certificate is cert
    # the fused structure, read from the flows the optimum has, is polished exactly
    ok = polish(model, W, np.array([[-2.0, 0.0]]), cert, 1e-10)
    assert ok.applied and np.array_equal(ok.weights, np.zeros((2, 2)))


# ---------------------------------------------------------------- skipped cases, arguments
def _small(loss=None, penalty=None):
    model = gm.GTVModel(nx.path_graph(3), 2, penalty=penalty or gm.Norm2(), lam=0.3)
    for i in range(3):
        model.set_loss(i, loss(i) if loss else gm.QuadraticLoss([i, -i]))
    return model


@pytest.mark.parametrize("make, reason", [
    (lambda: _small(penalty=gm.NormP(3)), "has no polish"),
    (lambda: _small(loss=lambda i: gm.HingeLoss(np.eye(2), [1.0, -1.0])), "has no Hessian"),
    (lambda: _small(penalty=gm.Norm2()), "node constraints"),
    (lambda: _small(penalty=gm.Norm2()), "symbolic losses"),
])
def test_unsupported_models_are_skipped_with_the_reason(make, reason):
    model = make()
    if reason == "node constraints":
        model.add_constraint(1, gm.Box(-0.1, 0.1))
    if reason == "symbolic losses":
        model.set_loss(1, cp.sum_squares(model.var(1) - 1.0))
    sol = model.solve_exact(method="interior")
    assert sol.info["polish"]["status"] == "skipped"
    assert reason in sol.info["polish"]["reason"]
    assert "polish" not in sol.timings


def test_polish_off_and_without_certificate():
    model = _small()
    assert "polish" not in model.solve_exact(polish=False).info
    info = model.solve_exact(certify=False).info["polish"]
    assert info == {"status": "skipped", "reason": "certify=False"}


def test_inaccurate_status_is_not_polished():
    """An answer the solver calls inaccurate keeps its status (raised or, when accepted,
    returned as it is): the polish is skipped with the status as its reason."""
    model = _small(penalty=gm.Norm2())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sol = model.solve_exact("SCS", max_iters=5, accept_inaccurate=True)
    assert sol.status == "optimal_inaccurate"
    assert sol.info["polish"] == {"status": "skipped",
                                  "reason": "solver status 'optimal_inaccurate'"}


@pytest.mark.parametrize("bad", ["x", 1, None])
def test_bad_polish_argument_raises(bad):
    with pytest.raises(gm.ParameterError, match="polish"):
        _small().solve_exact(polish=bad)


def test_l_inf_consensus_at_a_large_scale_is_polished_to_rounding():
    """The l_inf penalty's polish (whole rows fused, NormInf.fused_rows): a path whose two data
    nodes are fitted exactly by one w of size 1e5 at lambda = 3.3e4 (the consensus); Clarabel
    alone was certified only to 0.0132 on such an instance (soundness family "radius", seed
    571 under numpy 1.24).  The reference is the exact fit, known by construction."""
    rng = np.random.default_rng(5)
    model = gm.GTVModel(nx.path_graph(4), 3, penalty=gm.NormInf(), lam=3.3e4)
    X1, X2 = rng.normal(size=(1, 3)), rng.normal(size=(2, 3))
    w = rng.uniform(5e4, 1.2e5, 3)
    model.set_loss(1, gm.SquaredLoss(X1, X1 @ w))
    model.set_loss(2, gm.SquaredLoss(X2, X2 @ w))
    sol = gm.solve_exact(model)
    assert sol.info["polish"]["status"] == "applied"
    assert sol.certificate.relative_gap <= 1e-12
    np.testing.assert_allclose(sol.weights, np.tile(w, (4, 1)), rtol=1e-12, atol=1e-9)
