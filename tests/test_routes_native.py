"""Issue 28 item 3: the Clarabel route's aimed run on arrays built without CVXPY
(``gtvmodel.solve.native``), and the polish that certifies the answer's own point only where
needed.  References are plain CVXPY problems written here (node by node), solved tightly."""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.solve import conic_route
from gtvmodel.solve.native import NativeAnswer, native_reason, solve_native
from gtvmodel.solve.polish import polish

_AIM = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-9, "tol_ktratio": 1e-8,
        "max_iter": 500}


def _mixed(penalty, d: int = 3, seed: int = 0) -> gm.GTVModel:
    """A 24-node small-world graph with weights: squared losses (some with m_i < d, some with
    an l2 regularizer), quadratic losses, and nodes without data."""
    rng = np.random.default_rng(seed)
    G = nx.connected_watts_strogatz_graph(24, 4, 0.3, seed=seed)
    edges = np.array(sorted((min(a, b), max(a, b)) for a, b in G.edges))
    model = gm.GTVModel.from_edges(24, edges, rng.uniform(0.2, 2.0, len(edges)), dim=d,
                                   penalty=penalty, lam=0.3)
    for i in range(10):
        m = 2 if i % 3 == 0 else 6
        X = rng.standard_normal((m, d))
        y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(m)
        model.set_loss(i, gm.SquaredLoss(X, y, l2=0.05 if i % 4 == 1 else 0.0))
    for i in range(10, 16):
        model.set_loss(i, gm.QuadraticLoss(rng.standard_normal(d)))
    return model  # nodes 16..23 without data


def _reference(model: gm.GTVModel, p: float) -> tuple[np.ndarray, float]:
    """(16) in plain CVXPY, node by node, solved by Clarabel at 1e-12."""
    n, d = model.num_nodes, model.dim
    W = cp.Variable((n, d))
    terms = [cp.Constant(0.0)]
    for i in range(n):
        loss = model.loss(model.nodes[i])
        if isinstance(loss, gm.SquaredLoss):
            terms.append(cp.sum_squares(loss.y - loss.X @ W[i]) / loss.X.shape[0]
                         + loss.l2 * cp.sum_squares(W[i]))
        elif isinstance(loss, gm.QuadraticLoss):
            terms.append(cp.sum_squares(W[i] - loss.a))
    h, t = model.edges[:, 0], model.edges[:, 1]
    pen = cp.sum(cp.multiply(model.capacities, cp.norm(W[h] - W[t], p, axis=1)))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms)) + pen))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-10)
    return W.value, float(prob.value)


@pytest.mark.parametrize("penalty,p", [(gm.Norm2(), 2), (gm.Norm1(), 1)])
def test_direct_arrays_solve_the_problem_and_give_its_flows(penalty, p):
    """The direct run's weights match plain CVXPY, its flows certify them (the sign of the
    cone duals), and solve_exact answers through it, certified to 1e-10."""
    model = _mixed(penalty)
    assert native_reason(model) is None
    W_ref, P_ref = _reference(model, p)
    ans = solve_native(model, _AIM)
    assert ans.status == "Solved" and ans.iterations > 0
    assert abs(model.objective(ans.W) - P_ref) <= 1e-8 * P_ref
    np.testing.assert_allclose(ans.W, W_ref, atol=1e-5)
    cert = gm.certify(model, ans.W, ans.U, tol=1e-10, project="never", recover=False,
                      fallback=False)
    assert cert.relative_gap <= 1e-9
    assert np.all(np.abs(ans.U).max(axis=1) <= model.capacities * (1 + 1e-6) + 1e-9)
    sol = gm.solve_exact(model)
    assert sol.info["route"] == "clarabel" and sol.info["formulation"] == "direct"
    assert sol.success and sol.info["certified_relative_gap"] <= 1e-10
    assert sol.timings["compile"] > 0.0 and model.cache.get("primal") is None  # no CVXPY
    P = model.objective(sol.weights)
    assert P - P_ref <= 1e-9 * P_ref and sol.certificate.gap >= P - P_ref - 1e-10 * P_ref
    np.testing.assert_allclose(sol.weights, W_ref, atol=1e-5)


@pytest.mark.parametrize("change,reason", [
    (lambda m: m.set_loss(0, gm.SquaredLoss(np.eye(3), np.ones(3), l1=0.1)), "l1"),
    (lambda m: m.set_loss(1, gm.LogisticLoss(np.eye(3), np.array([1.0, -1.0, 1.0]))),
     "not a quadratic"),
    (lambda m: m.add_constraint(2, gm.Box(-1.0, 1.0)), "constraints"),
    (lambda m: setattr(m, "penalty", gm.SquaredNorm2()), "penalty"),
])
def test_models_outside_the_direct_form_go_through_cvxpy(change, reason):
    """l1, non-quadratic losses, node constraints and other penalties are declined with the
    reason, and the route answers through CVXPY as before."""
    model = _mixed(gm.Norm2())
    change(model)
    assert reason in native_reason(model)
    sol = gm.solve_exact(model)
    assert sol.success and "formulation" not in sol.info
    assert gm.solve_exact(gm.GTVModel(nx.empty_graph(2), dim=1)).success
    assert native_reason(gm.GTVModel(nx.empty_graph(2), dim=1)) == "no edges"


def test_a_failed_direct_run_hands_over_to_cvxpy(monkeypatch):
    """A direct run Clarabel does not report solved (or whose weights are not finite) is
    recorded and the route's full run through CVXPY answers."""
    model = _mixed(gm.Norm1())

    def unsolved(model, options, verbose=False):
        n, d, m = model.num_nodes, model.dim, model.num_edges
        return NativeAnswer(np.full((n, d), np.nan), np.zeros((m, d)), "MaxIterations", 500,
                            0.0, 0.0)

    monkeypatch.setattr(conic_route, "solve_native", unsolved)
    sol = gm.solve_exact(model)
    assert sol.success and sol.info["certified_relative_gap"] <= 1e-10
    assert "formulation" not in sol.info and model.cache.get("primal") is not None
    assert "MaxIterations" in sol.info["aimed_failures"][0]


def test_polish_calls_the_answers_certificate_only_when_needed():
    """Given a function for the answer's certificate, the polish keeps a polished point
    certified to the accuracy without calling it; where the polished point misses the
    accuracy it calls it once and compares as before."""
    model = _mixed(gm.Norm2())
    ans = solve_native(model, _AIM)
    calls = []

    def own():
        calls.append(1)
        return gm.certify(model, ans.W, ans.U, tol=1e-10, project="never", recover=False)

    done = polish(model, ans.W, ans.U, own, 1e-10)
    assert done.applied and not calls and done.info["gap_before"] is None
    assert done.certificate.success_at(1e-10) and done.certificate.relative_gap <= 1e-10
    assert done.info["objective_after"] <= done.info["objective_before"] * (1 + 1e-15)
    done = polish(model, ans.W, ans.U, own, 1e-300)  # no point is certified to 1e-300
    assert calls == [1] and done.info["gap_before"] is not None
    assert done.certificate.gap <= done.info["gap_before"]


def _consensus() -> tuple[gm.GTVModel, np.ndarray, np.ndarray]:
    """The mixed model at a lambda where its graph is fused into one cluster, its answer."""
    model = _mixed(gm.Norm2())
    model.lam = 5.0
    sol = gm.solve_exact(model, polish=False)
    return model, sol.weights, sol.flows


@pytest.mark.parametrize("excess", [0.0, None])
def test_polished_flows_are_free_inside_clusters_and_within_capacities(excess, monkeypatch):
    """Edges inside a cluster that were not read as fused get free (balanced) flows, not
    ``lambda A_e grad phi(0) = 0``; flows pushed past their capacities by the balance are
    brought back by alternating projections, to within the capacities (``excess`` 0) or to
    ``polish.CAPACITY_EXCESS`` (the default; the rest is the certificate's repair): the
    polished point is certified by its own flows."""
    from scipy.sparse.csgraph import connected_components

    from gtvmodel.solve import polish
    from gtvmodel.solve.polish import find_structure, newton, polished_flows

    if excess is not None:
        monkeypatch.setattr(polish, "CAPACITY_EXCESS", excess)
    allowed = polish.CAPACITY_EXCESS + 1e-12

    model, W, U = _consensus()
    st = model.structure()
    structure = find_structure(model, st, W, U)
    assert structure.fused.all()  # one cluster
    # the edge of largest flow on a cycle: without it the cluster stays connected
    for e in np.argsort(-np.abs(U).max(axis=1)):
        keep = np.ones(model.num_edges, bool)
        keep[e] = False
        adj = st.incidence[keep].T @ st.incidence[keep]
        if connected_components(adj, directed=False)[0] == 1:
            break
    structure.fused[e] = False
    W1, _ = newton(model, st, structure, W)
    # flows past the capacities on the fused edges: balanced alone, they exceed them by 11 %
    U0 = U + 0.6 * model.capacities[:, None] * np.sign(U)
    U1 = polished_flows(model, st, structure, W1, U0)
    assert np.abs(U1[e]).max() > 1e-3 * model.capacities[e]  # a free flow, not 0
    assert np.all(model.penalty.dual_norm(U1) <= model.capacities * (1 + allowed))
    cert = gm.certify(model, W1, U1, tol=1e-10, project="never", recover=False,
                      fallback=False)
    assert cert.relative_gap <= 1e-9


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.Norm1()])
def test_auto_polish_certifies_first_and_polishes_only_a_missed_answer(penalty, monkeypatch):
    """polish="auto" (default): Clarabel's aimed answer certified to the accuracy by its own
    flows is returned unpolished (no polish time); polish=True polishes it; an aimed answer
    whose own certificate misses the accuracy is polished and then certified.  The
    reference is plain CVXPY."""
    model = _mixed(penalty)
    W_ref, P_ref = _reference(model, 1 if isinstance(penalty, gm.Norm1) else 2)
    sol = gm.solve_exact(model)
    assert sol.info["formulation"] == "direct"
    assert sol.info["polish"] == {"status": "skipped", "reason": conic_route.CERTIFIED_FIRST}
    assert "polish" not in sol.timings and sol.timings["certificate"] > 0.0
    assert sol.success and sol.certificate.relative_gap <= 1e-10
    P = model.objective(sol.weights)
    assert P - P_ref <= 1e-9 * P_ref and sol.certificate.gap >= P - P_ref - 1e-10 * P_ref
    always = gm.solve_exact(model, polish=True)
    assert always.info["polish"]["status"] == "applied" and "polish" in always.timings
    assert always.certificate.relative_gap <= 1e-10
    assert "polish" not in gm.solve_exact(model, polish=False).info

    # an aimed answer off in the weights: its own flows miss 1e-10, the polish certifies it
    def off(model, options, verbose=False):
        ans = solve_native(model, options, verbose)
        ans.W = ans.W + 1e-5
        return ans

    monkeypatch.setattr(conic_route, "solve_native", off)
    missed = gm.solve_exact(model)
    assert missed.info["formulation"] == "direct"
    assert missed.info["polish"]["status"] == "applied"
    assert missed.info["polish"]["gap_before"] > 1e-10 * P_ref
    assert missed.success and missed.certificate.relative_gap <= 1e-10
    P = model.objective(missed.weights)
    assert P - P_ref <= 1e-9 * P_ref and missed.certificate.gap >= P - P_ref - 1e-10 * P_ref
    np.testing.assert_allclose(missed.weights, W_ref, atol=1e-5)


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "auto"])
def test_polish_accepts_bools_and_auto(value):
    assert gm.solve_exact(_mixed(gm.Norm2(), seed=1), polish=value).success


def test_residual_rows_are_the_squared_losses_up_to_a_constant():
    """The residual rows handed to Clarabel (``native._residual_rows``): a node with more
    than d rows is compressed to d (QR), the others kept; the sum of squares equals the
    losses' sum_i (1/m_i) ||y_i - X_i w_i||^2 up to one constant at every W, also for a
    rank-deficient X_i (repeated rows) and rows of zeros."""
    from gtvmodel.solve.native import _residual_rows

    rng = np.random.default_rng(3)
    n, d = 7, 3
    model = gm.GTVModel(nx.path_graph(n), dim=d, lam=0.2)
    sizes = {0: 1, 1: 3, 2: 5, 3: 8, 4: 5, 6: 4}  # node 5 without data
    data = {}
    for i, m in sizes.items():
        X = rng.standard_normal((m, d))
        if i == 4:
            X = np.repeat(X[:1], m, axis=0)  # rank 1
        if i == 6:
            X[1] = 0.0  # a constant row
        y = rng.standard_normal(m)
        data[i] = (X, y)
        model.set_loss(i, gm.SquaredLoss(X, y))
    squared = [r for r in (b.squared_rows() for b in model.structure().batches)
               if r is not None]
    node, F, t = _residual_rows(squared, n, d)
    counts = np.bincount(node, minlength=n)
    assert counts.tolist() == [1, 3, 3, 3, 3, 0, 3]  # min(m_i, d), node 6 without its 0 row

    def losses(W):
        return sum(((y - X @ W[i]) ** 2).sum() / len(y) for i, (X, y) in data.items())

    def rows(W):
        return float((((F * W[node]).sum(axis=1) - t) ** 2).sum())

    gaps = [losses(W) - rows(W) for W in rng.standard_normal((5, n, d)) * 3.0]
    assert np.ptp(gaps) <= 1e-12 * max(abs(g) for g in gaps)
    # the direct run on such a model matches plain CVXPY
    W_ref, P_ref = _reference(model, 2)
    ans = solve_native(model, _AIM)
    assert ans.status == "Solved"
    assert abs(model.objective(ans.W) - P_ref) <= 1e-8 * P_ref
    np.testing.assert_allclose(ans.W, W_ref, atol=1e-5)


@pytest.mark.parametrize("penalty,p", [(gm.Norm2(), 2), (gm.Norm1(), 1)])
def test_the_direct_run_uses_the_looser_refinement(penalty, p):
    """The direct run adds DIRECT_REFINEMENT (no iterative refinement) to Clarabel's settings
    (recorded in ``info["tolerances"]``), on a 7 x 7 grid as on the mixed small-world model;
    its answers match plain CVXPY and are certified to 1e-10, with the same iterations as
    Clarabel's default refinement and weights within 1e-7 of its answer."""
    from gtvmodel.solve.native import DIRECT_REFINEMENT

    rng = np.random.default_rng(5)
    G = nx.convert_node_labels_to_integers(nx.grid_2d_graph(7, 7), ordering="sorted")
    grid = gm.GTVModel(G, dim=2, lam=0.1, penalty=penalty)
    X = rng.standard_normal((49, 5, 2))
    w = np.where((np.arange(49) % 7 < 3)[:, None], [[2.0, 2.0]], [[-2.0, 2.0]])
    grid.set_data(X, np.einsum("nmd,nd->nm", X, w) + 0.1 * rng.standard_normal((49, 5)),
                  "squared")
    for model in (grid, _mixed(penalty)):
        W_ref, P_ref = _reference(model, p)
        sol = gm.solve_exact(model)
        assert sol.info["formulation"] == "direct"
        assert {k: sol.info["tolerances"][k] for k in DIRECT_REFINEMENT} == DIRECT_REFINEMENT
        assert sol.success and sol.certificate.relative_gap <= 1e-10
        P = model.objective(sol.weights)
        assert P - P_ref <= 1e-9 * P_ref and sol.certificate.gap >= P - P_ref - 1e-10 * P_ref
        np.testing.assert_allclose(sol.weights, W_ref, atol=1e-5)
        looser = solve_native(model, {**_AIM, **DIRECT_REFINEMENT})
        default = solve_native(model, _AIM)
        assert looser.iterations == default.iterations
        np.testing.assert_allclose(looser.W, default.W, atol=1e-7)
