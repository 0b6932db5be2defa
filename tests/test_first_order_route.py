"""``solve_exact(method=...)`` (issue 16 item 4): the first-order route (Algorithm 1 run until
the certified relative gap (34) is <= 1e-9) against independent CVXPY formulations written
here, its certificate against the true suboptimality, the ``"auto"`` decision and the errors.

Accuracy bound used below: when ``P`` is ``mu``-strongly convex, ``mu/2 ||W - W*||_F^2 <=
P(W) - P* <= gap`` (the certificate), so ``||W - W*||_F <= sqrt(2 gap / mu)``."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.certificates.kinds import NULL_SV_RTOL, node_kinds
from gtvmodel.solve.first_order import (
    AUTO_THRESHOLD,
    choose_route,
    problem_size,
    stage_tolerances,
)


def _chain(n: int = 60, lam: float = 0.3, seed: int = 0):
    """Fused-lasso-like chain: ``L_i(w) = ||w - a_i||^2`` (d = 2), ``phi = ||.||_2``."""
    rng = np.random.default_rng(seed)
    A = np.repeat(rng.normal(size=(4, 2)) * 2, n // 4, axis=0) + 0.3 * rng.normal(size=(n, 2))
    model = gm.GTVModel(nx.path_graph(n), dim=2, penalty=gm.Norm2(), lam=lam)
    for i in range(n):
        model.set_loss(i, gm.QuadraticLoss(A[i]))
    return model, A


def _chain_reference(A: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    """The chain's problem written by hand, solved tightly by Clarabel."""
    n = A.shape[0]
    W = cp.Variable(A.shape)
    obj = cp.sum_squares(W - A) + lam * cp.sum(cp.norm(W[1:] - W[:-1], 2, axis=1))
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-10)
    assert prob.status == "optimal" and n == W.shape[0]
    return W.value, float(prob.value)


def _chain_objective(W: np.ndarray, A: np.ndarray, lam: float) -> float:
    return float(((W - A) ** 2).sum() + lam * np.linalg.norm(np.diff(W, axis=0), axis=1).sum())


def test_first_order_route_on_a_chain_matches_an_independent_cvxpy_solve():
    lam = 0.3
    model, A = _chain(lam=lam)
    sol = gm.solve_exact(model, method="first_order")
    assert sol.success and sol.status == "optimal" and sol.solver == "ALGORITHM1"
    assert sol.info["route"] == "first_order" and "requested" in sol.info["route_reason"]
    rel = sol.info["certified_relative_gap"]
    assert rel <= 1e-9 and rel == sol.certificate.relative_gap
    W_ref, P_ref = _chain_reference(A, lam)
    P = _chain_objective(sol.weights, A, lam)
    # sound: the certified gap bounds the true suboptimality (P_ref >= P*)
    assert sol.certificate.gap >= P - P_ref
    assert P - P_ref <= 1e-9 * max(1.0, P_ref) + 1e-10 * P_ref
    # P is 2-strongly convex (sum of ||w_i - a_i||^2): ||W - W*||_F <= sqrt(gap)
    bound = np.sqrt(sol.certificate.gap) + 1e-6  # + the reference's own error
    assert np.linalg.norm(sol.weights - W_ref) <= bound
    assert bound < 1e-3
    assert np.isclose(sol.objective, P, rtol=1e-12)


def _sbm(n: int = 100, lam: float = 0.1):
    """100-node SBM, d = 5, squared loss (10 samples per node), ``Norm2``."""
    data = datasets.sbm(sizes=(n // 2, n // 2), p_in=0.2, p_out=0.01, m=10, sigma=0.1, seed=3,
                        cluster_weights=[[1, 2, 3, 4, 5], [-1, 2, -3, 4, -5]])
    return data, data.model(lam=lam)


def _sbm_reference(data, model) -> tuple[np.ndarray, float]:
    """The SBM's squared-loss problem written by hand (per node, per edge)."""
    nodes = list(model.nodes)
    idx = {v: k for k, v in enumerate(nodes)}
    W = cp.Variable((len(nodes), data.dim))
    terms = [cp.sum_squares(data.y[v] - data.X[v] @ W[idx[v]]) / len(data.y[v])
             for v in data.X]
    heads = [idx[a] for a, _ in data.graph.edges]
    tails = [idx[b] for _, b in data.graph.edges]
    tv = cp.sum(cp.norm(W[heads] - W[tails], 2, axis=1))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms)) + model.lam * tv))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-9)
    assert prob.status == "optimal"
    return W.value, float(prob.value)


def test_first_order_route_on_an_sbm_matches_an_independent_cvxpy_solve():
    data, model = _sbm()
    sol = gm.solve_exact(model, method="first_order")
    assert sol.success and sol.info["certified_relative_gap"] <= 1e-9
    W_ref, P_ref = _sbm_reference(data, model)
    P = float(np.asarray(model.objective(sol.weights)))
    assert sol.certificate.gap >= P - P_ref  # sound
    # mu: the smallest eigenvalue of 2 X_i^T X_i / m_i over the nodes (every node has data)
    mu = min(np.linalg.eigvalsh(2 * X.T @ X / len(X))[0] for X in data.X.values())
    assert mu > 1e-2
    bound = np.sqrt(2 * sol.certificate.gap / mu) + 1e-6  # about 8e-4 here
    assert np.linalg.norm(sol.weights - W_ref) <= bound
    assert bound < 2e-3


def test_auto_takes_the_interior_route_below_the_threshold_and_first_order_above():
    model, _ = _chain(n=20)
    size = problem_size(model)
    assert size == (20 + 19) * 2 < AUTO_THRESHOLD
    assert choose_route(model)[0] == "interior"
    assert choose_route(model, "auto", threshold=size)[0] == "interior"
    route, reason = choose_route(model, "auto", threshold=size - 1)
    assert route == "first_order" and f"{size}" in reason
    assert choose_route(model, "first_order")[0] == "first_order"
    assert choose_route(model, "interior", threshold=0)[0] == "interior"
    small = gm.solve_exact(model, method="auto")
    # the conic routes are named by their solver (issue 28: "clarabel", "scs")
    assert small.info["route"] == "clarabel" and small.solver == "CLARABEL"
    big = gm.solve_exact(model, method="auto", auto_threshold=10)
    assert big.info["route"] == "first_order" and big.solver == "ALGORITHM1"
    assert big.info["certified_relative_gap"] <= 1e-9
    assert np.abs(big.weights - small.weights).max() < 1e-4
    assert gm.solve_exact(model).info["route"] == "clarabel"  # the default is "auto"


def test_bad_method_and_options_raise_naming_the_argument():
    model, _ = _chain(n=8)
    with pytest.raises(gm.ParameterError, match="method"):
        gm.solve_exact(model, method="newton")
    with pytest.raises(gm.ParameterError, match="auto_threshold"):
        gm.solve_exact(model, method="auto", auto_threshold=-1)
    with pytest.raises(gm.ParameterError, match="solver"):
        gm.solve_exact(model, method="first_order", solver="CLARABEL")
    with pytest.raises(gm.ParameterError, match="tol_gap_rel"):
        gm.solve_exact(model, method="first_order", tol_gap_rel=1e-9)
    with pytest.raises(gm.ParameterError, match="accuracy"):
        gm.solve_exact(model, method="first_order", accuracy=0.0)


def test_a_run_out_of_iterations_never_claims_the_target():
    model, A = _chain(n=40)
    with pytest.raises(gm.SolverError, match="certified only to a relative gap") as err:
        gm.solve_exact(model, method="first_order", max_iter=3)
    assert err.value.status == "user_limit"
    sol = gm.solve_exact(model, method="first_order", max_iter=3, accept_inaccurate=True)
    assert sol.status == "optimal_inaccurate" and not sol.success
    assert sol.info["certified_relative_gap"] > 1e-9
    W_ref, P_ref = _chain_reference(A, model.lam)
    assert sol.certificate.gap >= _chain_objective(sol.weights, A, model.lam) - P_ref
    kept = gm.solve_exact(model, method="first_order", max_iter=3, raise_on_failure=False)
    assert kept.status == "user_limit" and not kept.success and "error" in kept.info
    assert kept.weights.shape == (40, 2)


def test_warm_start_and_a_looser_accuracy_are_passed_on():
    model, _ = _chain(n=40)
    first = gm.solve_exact(model, method="first_order", accuracy=1e-6)
    assert first.success and first.info["accuracy"] == 1e-6
    again = gm.solve_exact(model, method="first_order", warm_start=first)
    assert again.success and again.info["certified_relative_gap"] <= 1e-9
    cold = gm.solve_exact(model, method="first_order")
    assert again.info["iterations"] <= cold.info["iterations"]


def test_stages_aim_at_decreasing_tolerances_and_rebalance_the_step():
    assert stage_tolerances(1e-9) == [1e-5, 1e-7, 1e-9]
    assert stage_tolerances(1e-6) == [1e-6] and stage_tolerances(0.1) == [0.1]
    model, _ = _chain(n=40)
    sol = gm.solve_exact(model, method="first_order")
    tols = [t for t, _, _ in sol.info["stages"]]
    assert tols == stage_tolerances(1e-9)[: len(tols)] and sol.success
    assert sol.info["iterations"] == sum(k for _, k, _ in sol.info["stages"])
    # a fixed step is kept, in one stage
    fixed = gm.solve_exact(model, method="first_order", step=0.5)
    assert len(fixed.info["stages"]) == 1 and fixed.info["stages"][0][2] == 0.5
    assert fixed.success


def _ill_conditioned(seed: int = 4, lam: float = 0.2):
    """A 10-node cycle, d = 3, squared losses with 6 samples, except: node 0 full rank but
    ill-conditioned (``e_min / e_max = 1e-11`` of ``X_0^T X_0``, its labels with a unit
    component along the weak direction ``X_0 v``), node 1 with ``m_1 = 2 < d``, node 2
    without data (zero loss)."""
    rng = np.random.default_rng(seed)
    n, d = 10, 3
    data = {i: (rng.normal(size=(6, d)), rng.normal(size=6)) for i in range(3, n)}
    Q1, _ = np.linalg.qr(rng.normal(size=(4, d)))
    Q2, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X0 = Q1 @ np.diag([1.0, 1.0, np.sqrt(1e-11)]) @ Q2.T
    data[0] = (X0, Q1 @ np.array([0.5, -0.3, 1.0]))
    data[1] = (rng.normal(size=(2, d)), rng.normal(size=2))
    model = gm.GTVModel(nx.cycle_graph(n), dim=d, penalty=gm.Norm2(), lam=lam)
    for i, (X, y) in data.items():
        model.set_loss(i, gm.SquaredLoss(X, y))
    return model, data


def _ill_conditioned_reference(model, data) -> float:
    """``P*`` of :func:`_ill_conditioned` written by hand, solved tightly by Clarabel."""
    W = cp.Variable((model.num_nodes, model.dim))
    fit = [cp.sum_squares(y - X @ W[i]) / len(y) for i, (X, y) in data.items()]
    tv = cp.sum(cp.norm(W - cp.vstack([W[1:], W[:1]]), 2, axis=1))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(fit)) + model.lam * tv))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-10)
    assert prob.status == "optimal"
    return float(prob.value)


def test_an_ill_conditioned_node_is_not_a_subspace_condition():
    # exactly rank-deficient Gram matrices (m_i < d, no data) are numerically null to about
    # 1e-16 relative; node 0's weak direction (1e-11) is part of dom h_0*: forcing the
    # demand into range(X_0^T) would cost (s^T v)^2 / (4 e_min), about 0.1 here

    model, data = _ill_conditioned()
    e = np.linalg.eigvalsh(data[0][0].T @ data[0][0] / 4)
    assert NULL_SV_RTOL ** 2 < e[0] / e[-1] < 1e-10
    assert node_kinds(model).subspace.tolist() == [1, 2]
    P_ref = _ill_conditioned_reference(model, data)
    sol = gm.solve_exact(model, certify=False)  # Clarabel: P* to about 1e-9
    cert = gm.certify(model, sol.weights, sol.flows, tol=1e-7)
    assert cert.gap >= float(model.objective(sol.weights)) - P_ref  # sound
    assert cert.success and cert.relative_gap <= 1e-7


def test_first_order_route_with_an_ill_conditioned_node_no_data_and_m_below_d():
    model, data = _ill_conditioned()
    sol = gm.solve_exact(model, method="first_order")
    assert sol.success and sol.info["certified_relative_gap"] <= 1e-9
    P_ref = _ill_conditioned_reference(model, data)
    P = float(model.objective(sol.weights))
    assert sol.certificate.gap >= P - P_ref  # sound
    assert abs(P - P_ref) <= 1e-7 * max(1.0, abs(P_ref))
