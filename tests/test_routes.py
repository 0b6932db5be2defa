"""Issue 28: the routes of ``solve_exact`` (the strategy list, the certified accuracy aimed at,
the hand-over of a failed route), the zero-loss problem Clarabel fails on, and the flows of the
baselines that hold dual information.  References are plain CVXPY problems written here."""

from __future__ import annotations

import warnings

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel import _solver
from gtvmodel._compat import scs_indirect_supported
from gtvmodel.baselines import admm, certify_target, fedavg, fedrelax, local
from gtvmodel.solve import conic_route, exact, first_order
from gtvmodel.solve.exact import ROUTES, RouteRequest, select_routes


def _request(**kw) -> RouteRequest:
    base = dict(solver=None, accept_inaccurate=False, verbose=False, certify=True,
                accuracy=1e-10, required=1e-6, given=False, raise_on_failure=True,
                threshold=None, polish=True)
    return RouteRequest(**{**base, **kw})


def _sbm(n_per: int = 40, penalty=None, lam: float = 0.1, seed: int = 0) -> gm.GTVModel:
    """A two-block SBM (mean degree about 8), squared losses, d = 2, m = 5."""
    data = gm.datasets.sbm(sizes=(n_per, n_per), p_in=8.0 / n_per, p_out=0.25 / n_per, m=5,
                           sigma=0.1, seed=seed)
    return data.model(lam=lam, penalty=penalty)


def _reference(model: gm.GTVModel, p: float) -> tuple[np.ndarray, float]:
    """Plain CVXPY: sum_i (1/m_i) ||y_i - X_i w_i||^2 + lam sum_e A_e ||w_e+ - w_e-||_p,
    solved by Clarabel at 1e-12."""
    n, d = model.num_nodes, model.dim
    W = cp.Variable((n, d))
    terms = []
    for i in range(n):
        loss = model.loss(model.nodes[i])
        terms.append(cp.sum_squares(loss.y - loss.X @ W[i]) / loss.X.shape[0])
    h, t = model.edges[:, 0], model.edges[:, 1]
    A = model.capacities / model.lam
    pen = cp.sum(cp.multiply(A, cp.norm(W[h] - W[t], p, axis=1)))
    prob = cp.Problem(cp.Minimize(cp.sum(cp.hstack(terms)) + model.lam * pen))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-10)
    return W.value, float(prob.value)


# ---------------------------------------------------------------- the strategy list
def test_strategies_are_an_ordered_list_with_reasons(monkeypatch):
    names = [route.name for route in ROUTES]
    assert names == ["zero", "direct", "first_order", "first_order_polish", "scs", "clarabel"]
    model = _sbm()
    # small problems go to Clarabel (fixed costs), larger ones to Algorithm 1 and the polish,
    # then SCS
    assert [r.name for r, _ in select_routes(model, _request())] == ["clarabel"]
    monkeypatch.setattr(exact, "SCS_MIN_SIZE", 100)
    chosen = select_routes(model, _request())
    assert [r.name for r, _ in chosen] == ["first_order_polish", "scs", "clarabel"]
    assert all(isinstance(reason, str) and reason for _, reason in chosen)
    # without the certificate (nothing would judge Algorithm 1's iterate or SCS's loose
    # answer) or the polish, Clarabel
    for kw in ({"certify": False}, {"polish": False}):
        assert [r.name for r, _ in select_routes(model, _request(**kw))] == ["clarabel"]
    grid = gm.GTVModel(nx.grid_2d_graph(4, 4), dim=1, lam=0.1)
    for v in grid.nodes:
        grid.set_loss(v, gm.QuadraticLoss([float(v[0])]))
    assert [r.name for r, _ in select_routes(grid, _request())] == ["clarabel"]
    # the size rule puts the first-order route first; a method or a solver picks one route
    assert select_routes(model, _request(threshold=10))[0][0].name == "first_order"
    assert [r.name for r, _ in select_routes(model, _request(), "interior")] == ["clarabel"]
    assert [r.name for r, _ in select_routes(model, _request(solver="SCS"))] == ["scs"]
    assert [r.name for r, _ in select_routes(model, _request(), "first_order")] == [
        "first_order"]
    # solver options go to Clarabel (the default solver), not to SCS
    assert [r.name for r, _ in select_routes(model, _request(opts={"max_iter": 50}))] == [
        "clarabel"]


def _scs_route(monkeypatch) -> None:
    """The SCS route on the small SBMs here: its size rule lowered, and the route before it
    (Algorithm 1 and the polish) declining (no stage)."""
    monkeypatch.setattr(exact, "SCS_MIN_SIZE", 100)
    monkeypatch.setattr(first_order, "POLISHED_STAGES", ())


@pytest.mark.parametrize("penalty, p", [(gm.Norm2(), 2), (gm.Norm1(), 1)])
def test_default_route_is_certified_to_1e10_and_matches_cvxpy(penalty, p, monkeypatch):
    _scs_route(monkeypatch)
    model = _sbm(penalty=penalty)
    W_ref, P_ref = _reference(model, p)
    sol = gm.solve_exact(model)
    assert sol.success and sol.status == "optimal"
    assert sol.info["route"] == "scs" and "mean degree" in sol.info["route_reason"]
    assert sol.info["certified_relative_gap"] <= 1e-10
    assert sol.certificate.relative_gap == sol.info["certified_relative_gap"]
    P = model.objective(sol.weights)
    assert P - P_ref <= 1e-10 * max(1.0, P_ref) and P_ref - P <= 1e-9 * P_ref
    assert sol.certificate.gap >= P - P_ref - 1e-12 * P_ref  # sound
    np.testing.assert_allclose(sol.weights, W_ref, atol=1e-5)
    # Clarabel's route aims at the accuracy and is certified as tightly; its answer, certified
    # to the accuracy by its own flows, is not polished (polish="auto"), and with polish=True
    # its weights are exact in flat directions too
    clar = gm.solve_exact(model, solver="CLARABEL")
    assert clar.info["route"] == "clarabel"
    assert clar.info["tolerances"]["tol_gap_rel"] == 1e-10
    assert clar.info["certified_relative_gap"] <= 1e-10
    assert clar.info["polish"] == {"status": "skipped", "reason": conic_route.CERTIFIED_FIRST}
    P = model.objective(clar.weights)
    assert P - P_ref <= 1e-10 * P_ref and clar.certificate.gap >= P - P_ref - 1e-12 * P_ref
    np.testing.assert_allclose(clar.weights, W_ref, atol=1e-5)
    polished = gm.solve_exact(model, solver="CLARABEL", polish=True)
    assert polished.info["polish"]["status"] == "applied"
    assert polished.info["certified_relative_gap"] <= 1e-10
    np.testing.assert_allclose(polished.weights, sol.weights, atol=1e-8)


@pytest.mark.parametrize("penalty, p", [(gm.Norm2(), 2), (gm.Norm1(), 1)])
def test_first_order_then_polish_route_is_certified_and_matches_cvxpy(penalty, p, monkeypatch):
    """Where the SCS route's rule holds, Algorithm 1 and the polish answer first
    (solve_polished_first_order): certified to 1e-10 by the polished point's flows, equal to
    plain CVXPY; its stages and the polish are reported."""
    monkeypatch.setattr(exact, "SCS_MIN_SIZE", 100)
    model = _sbm(penalty=penalty)
    W_ref, P_ref = _reference(model, p)
    sol = gm.solve_exact(model)
    assert sol.success and sol.status == "optimal" and sol.solver == "ALGORITHM1"
    assert sol.info["route"] == "first_order_polish" and "SCS" in sol.info["route_reason"]
    assert sol.info["certified_relative_gap"] <= 1e-10
    assert sol.certificate.relative_gap == sol.info["certified_relative_gap"]
    assert sol.info["iterations"] == sum(sol.info["stages"])
    assert sol.info["stages"][0] == first_order.POLISHED_STAGES[0]
    assert {"solve", "certificate", "polish"} <= set(sol.timings)
    # polish="auto": an iterate certified by its own flows is returned unpolished; the probe
    # (the first stage) is never polished
    status = sol.info["polish"]["status"]
    assert status == "applied" or sol.info["polish"] == {
        "status": "skipped", "reason": first_order.POLISH_NOT_NEEDED}
    assert status == "skipped" or len(sol.info["stages"]) >= 2
    P = model.objective(sol.weights)
    assert P - P_ref <= 1e-10 * P_ref and P_ref - P <= 1e-9 * P_ref
    assert sol.certificate.gap >= P - P_ref - 1e-12 * P_ref  # sound
    np.testing.assert_allclose(sol.weights, W_ref, atol=1e-5)
    # the certificate is the answer's own: recomputed from the returned weights and flows
    again = gm.certify(model, sol.weights, sol.flows)
    assert again.relative_gap <= 1e-10
    # polish=True: the certified iterate is polished too (weights exact in flat directions)
    polished = gm.solve_exact(model, polish=True)
    assert polished.info["route"] == "first_order_polish"
    assert polished.info["polish"]["status"] in ("applied", "rejected")
    assert polished.info["certified_relative_gap"] <= 1e-10
    np.testing.assert_allclose(polished.weights, W_ref, atol=1e-5)


@pytest.mark.parametrize("patch", [{"POLISHED_STAGES": (1, 1), "POLISHED_GATE": np.inf},
                                   {"POLISHED_GATE": 1e-300}])
def test_first_order_then_polish_declines_to_scs_when_not_certified(patch, monkeypatch):
    """One iteration of Algorithm 1 is not certified, polished or not; an iterate above the
    gate is not polished: the route declines and the SCS route answers, certified and equal to
    plain CVXPY."""
    monkeypatch.setattr(exact, "SCS_MIN_SIZE", 100)
    for name, value in patch.items():
        monkeypatch.setattr(first_order, name, value)
    model = _sbm(n_per=20)
    W_ref, P_ref = _reference(model, 2)
    calls = []
    real = first_order.polish
    monkeypatch.setattr(first_order, "polish", lambda *a: calls.append(1) or real(*a))
    assert first_order.solve_polished_first_order(model, 1e-10, "test") is None
    assert len(calls) == (1 if "POLISHED_STAGES" in patch else 0)  # not the probe's iterate
    sol = gm.solve_exact(model)
    assert sol.info["route"] == "scs" and sol.info["certified_relative_gap"] <= 1e-10
    P = model.objective(sol.weights)
    assert abs(P - P_ref) <= 1e-9 * P_ref and sol.certificate.gap >= P - P_ref - 1e-12 * P_ref
    np.testing.assert_allclose(sol.weights, W_ref, atol=1e-5)


def test_large_scs_route_runs_the_indirect_linear_solver(monkeypatch):
    """From SCS_INDIRECT_SIZE on, the SCS route runs SCS's indirect linear solver (no KKT
    factorization); its answer is certified to 1e-10 and matches plain CVXPY; the solver's
    setup is reported apart from its iterations."""
    if not scs_indirect_supported():
        pytest.skip("CVXPY before 1.9 does not pass use_indirect to SCS (the route factorizes)")
    _scs_route(monkeypatch)
    monkeypatch.setattr(conic_route, "SCS_INDIRECT_SIZE", 100)
    model = _sbm(n_per=20)
    W_ref, P_ref = _reference(model, 2)
    sol = gm.solve_exact(model)
    assert sol.info["route"] == "scs" and sol.info["tolerances"]["use_indirect"] is True
    assert sol.success and sol.info["certified_relative_gap"] <= 1e-10
    P = model.objective(sol.weights)
    assert abs(P - P_ref) <= 1e-9 * P_ref and sol.certificate.gap >= P - P_ref - 1e-12 * P_ref
    np.testing.assert_allclose(sol.weights, W_ref, atol=1e-5)
    assert sol.timings["solver_setup"] >= 0.0 and sol.timings["solve"] > 0.0
    monkeypatch.setattr(conic_route, "SCS_INDIRECT_SIZE", 10**9)  # below it: the factorization
    assert "use_indirect" not in gm.solve_exact(model).info["tolerances"]


def test_accuracy_not_met_by_the_aimed_run_escalates_to_the_full_ladder(monkeypatch):
    """Without the polish Clarabel aims at the accuracy (1e-10; here by the direct arrays of
    gtvmodel.solve.native, recorded as their ``tol_gap_rel``); with a certificate that
    cannot meet it the route runs the full ladder (1e-13 first) and keeps the better answer."""
    model = _sbm(n_per=15)
    runs = []
    real = _solver.run_solver
    real_native = conic_route.solve_native

    def counted(*args, **kwargs):
        runs.append(kwargs.get("start"))
        return real(*args, **kwargs)

    def counted_native(model, options, verbose=False):
        runs.append(options["tol_gap_rel"])
        return real_native(model, options, verbose)

    monkeypatch.setattr(conic_route, "run_solver", counted)
    monkeypatch.setattr(conic_route, "solve_native", counted_native)
    sol = gm.solve_exact(model, polish=False, solver="CLARABEL")
    assert runs[0] == 1e-10 and sol.success
    if sol.certificate.relative_gap <= 1e-10:
        assert runs == [1e-10] and sol.info["tolerances"]["tol_gap_rel"] >= 1e-10
    else:
        assert runs[1] is None  # the full ladder
    runs.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.AccuracyWarning)  # 1e-14 may be out of reach
        gm.solve_exact(model, polish=False, solver="CLARABEL", accuracy=1e-12)
    assert runs[0] is None  # no ladder level between 1e-12 and 1e-13: the full run at once
    # an aimed answer whose certificate misses the accuracy is followed by the full run
    runs.clear()
    monkeypatch.setattr(conic_route, "certify_fn", _worse(conic_route.certify_fn))
    sol = gm.solve_exact(model, polish=False, solver="CLARABEL")
    assert runs[:2] == [1e-10, None] and sol.success


def _worse(certify):
    """``certify`` with the project="never" certificates (the aimed runs') made useless."""
    def wrapped(model, W, U=None, **kw):
        cert = certify(model, W, U, **kw)
        if kw.get("project") == "never":
            cert.gap = cert.relative_gap = float("inf")
        return cert
    return wrapped


def _no_polish(model, answer, info, accuracy, own=None):
    """``conic_route._polished`` without the polish: the answer keeps its own certificate."""
    if own is not None:
        answer.cert = own()


def test_a_failed_route_hands_over_to_the_next(monkeypatch):
    _scs_route(monkeypatch)
    model = _sbm(n_per=15)
    real = _solver.run_solver

    def scs_fails(problem, solver, *args, **kwargs):
        if solver == "SCS":
            raise gm.SolverError("SCS failed here", status="solver_error", solver="SCS")
        return real(problem, solver, *args, **kwargs)

    monkeypatch.setattr(conic_route, "run_solver", scs_fails)
    sol = gm.solve_exact(model)
    assert sol.success and sol.info["route"] == "clarabel"
    assert sol.info["route_failures"] and "SCS failed here" in sol.info["route_failures"][0]
    with pytest.raises(gm.SolverError, match="SCS failed here"):
        gm.solve_exact(model, solver="SCS")  # a named solver: no other route
    failed = gm.solve_exact(model, solver="SCS", raise_on_failure=False)
    assert not failed.success and failed.weights is None
    # an SCS answer not certified to the required accuracy hands over too
    monkeypatch.setattr(conic_route, "run_solver", real)
    monkeypatch.setattr(conic_route, "_polished", _no_polish)  # no polish: SCS at 1e-5...
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", gm.AccuracyWarning)  # Clarabel misses 1e-14 too
        sol = gm.solve_exact(model, accuracy=1e-14)  # ...and at 1e-9 misses 1e-14
    assert sol.info["route"] == "clarabel" and "certified only" in sol.info["route_failures"][0]


# ---------------------------------------------------------------- the zero-loss problem
_WEIGHTED = [(0, 1, 219.43), (0, 2, 9.4937), (0, 3, 8159.8), (0, 5, 0.005278),
             (0, 6, 0.0019129), (1, 4, 7.9491), (1, 5, 0.00022467), (2, 4, 0.00019295),
             (2, 5, 1.3156), (2, 6, 0.5366), (3, 4, 2174.4), (3, 5, 10.81), (3, 6, 1.297),
             (4, 5, 0.94403)]


@pytest.mark.parametrize("weighted", [False, True])
def test_zero_loss_normp_problem_solves_to_zero(weighted):
    """7 nodes without data, NormP(1.5), lambda = 2.5e6: W = 0, P* = 0.  With these edge
    weights (lambda A_e up to 2e10) Clarabel fails, through gtvmodel and through plain
    CVXPY; the plain CVXPY reference is solved by SCS there."""
    G = nx.Graph()
    G.add_nodes_from(range(7))
    edges = _WEIGHTED if weighted else [(i, i + 1, 1.0) for i in range(6)] + [(0, 6, 1.0)]
    for i, j, A in edges:
        G.add_edge(i, j, weight=A)
    model = gm.GTVModel(G, dim=2, lam=2.5e6, penalty=gm.NormP(1.5))
    sol = gm.solve_exact(model)
    assert sol.success and sol.info["route"] == "zero"
    assert np.all(sol.weights == 0.0) and sol.objective == 0.0 and sol.certificate.gap == 0.0
    assert sol.flows.shape == (len(edges), 2)
    W = cp.Variable((7, 2))
    obj = cp.sum(cp.hstack([2.5e6 * A * cp.pnorm(W[i] - W[j], 1.5) for i, j, A in edges]))
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver="SCS" if weighted else "CLARABEL")
    assert abs(prob.value) <= 1e-6 and sol.objective <= prob.value + 1e-6
    if weighted:
        with pytest.raises(gm.SolverError):
            gm.solve_exact(model, method="interior")  # what the zero route avoids


def test_zero_route_declines_where_zero_is_not_optimal():
    G = nx.path_graph(3)
    model = gm.GTVModel(G, dim=1, lam=1.0)
    model.set_loss(0, gm.QuadraticLoss([0.0]))  # minimized at 0: accepted, and certified
    assert select_routes(model, _request())[0][0].name == "zero"
    assert gm.solve_exact(model).info["route"] == "zero"
    model.set_loss(2, gm.QuadraticLoss([1.0]))
    assert select_routes(model, _request())[0][0].name != "zero"
    sol = gm.solve_exact(model)
    assert sol.info["route"] == "clarabel" and abs(sol.objective - 0.5 * 0.5 - 2 * 0.25) < 1
    model.set_loss(2, gm.ZeroLoss())
    model.add_constraint(1, gm.Box([1.0], [2.0]))  # 0 infeasible: not the zero route
    assert select_routes(model, _request())[0][0].name == "clarabel"


# ---------------------------------------------------------------- baseline flows
def test_admm_flows_give_its_own_certificate_and_beat_weights_only():
    model = _sbm(n_per=15, lam=0.2)
    res = admm(model, rho=1.0, rounds=400, abs_tol=1e-7, rel_tol=1e-7)
    assert res.flows is not None and res.flows.shape == (model.num_edges, model.dim)
    assert res.flows is res.info["flows"]
    with_flows = gm.certify(model, res.weights, res.flows)
    weights_only = gm.certify(model, res.weights)
    assert with_flows.gap == res.certificate.gap  # ADMM's own certificate
    assert with_flows.gap <= weights_only.gap
    P_ref = _reference(model, 2)[1]
    assert with_flows.gap >= model.objective(res.weights) - P_ref - 1e-9 * P_ref  # sound
    # the flows follow docs/conventions.md: -(D^T u)_i = grad L_i(w_i) near convergence
    grad = model.loss_gradients(res.weights)
    resid = np.abs(-(model.incidence.T @ res.flows) - grad).max()
    assert resid <= 1e-3 * max(1.0, np.abs(grad).max())


def test_fedrelax_flows_are_its_targets_and_other_baselines_have_none():
    model = _sbm(n_per=10, lam=0.5)
    res = fedrelax(model, rounds=2000, tol=1e-12)
    W = res.weights
    h, t = model.edges[:, 0], model.edges[:, 1]
    np.testing.assert_allclose(res.flows, model.capacities[:, None] * (W[h] - W[t]),
                               rtol=1e-12, atol=0)
    with_flows = certify_target(model, W, "gtv-squared", flows=res.flows)
    # at convergence both certificates sit at their numerical floor (~1e-12 relative)
    assert with_flows.gap <= res.certificate.gap + 1e-12 * max(1.0, with_flows.primal_value)
    early = fedrelax(model, rounds=8)
    own = certify_target(model, early.weights, "gtv-squared", flows=early.flows)
    assert own.gap <= early.gap
    assert local(model).flows is None
    assert fedavg(model, rounds=2, local_steps=1, step=0.1, seed=0).flows is None


def test_a_tree_with_quadratic_losses_takes_the_direct_route():
    """Route 2: Norm1 on a random tree with ``||w - a_i||^2`` at some nodes and none at the
    others is solved by the direct tree algorithm, equal to plain CVXPY (written here) and
    certified to the default accuracy; a penalty that is not separable skips the route."""
    rng = np.random.default_rng(3)
    G = nx.empty_graph(40)  # nodes 0..39 in order: labels are indices
    G.add_edges_from(zip(range(1, 40), rng.integers(0, np.arange(1, 40)).tolist(), strict=True))
    model = gm.GTVModel(G, dim=2, penalty=gm.Norm1(), lam=0.4)
    data = {i: rng.normal(size=2) for i in range(40) if i % 3}
    model.set_losses({i: gm.QuadraticLoss(a) for i, a in data.items()})
    sol = gm.solve_exact(model)
    assert sol.info["route"] == "direct" and sol.success
    assert sol.certificate.relative_gap <= 1e-10
    W = cp.Variable((40, 2))
    edges = np.array(model.edges)
    obj = sum(cp.sum_squares(W[i] - a) for i, a in data.items()) + 0.4 * cp.sum(
        cp.abs(W[edges[:, 0]] - W[edges[:, 1]]))
    ref = cp.Problem(cp.Minimize(obj))
    ref.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    assert abs(sol.objective - ref.value) <= 1e-8 * max(1.0, abs(ref.value))
    assert gm.solve_exact(model.variant(penalty=gm.Norm2())).info["route"] != "direct"


@pytest.mark.parametrize("penalty, p, form", [(gm.Norm2(), 2, "soc"), (gm.Norm1(), 1, "box")])
def test_forms_without_edge_differences_give_optimal_flows(penalty, p, form):
    """``Norm2``/``Norm1`` models without node constraints compile without ``Z = D W``
    (``edge_form``); the flows read from the cone duals (docs/conventions.md's sign) satisfy
    the node condition ``-(D^T u)_i = grad L_i(w_i)`` at the independent reference, meet the
    capacities and certify the solver's own weights with the cheap repairs only; a box
    constraint keeps ``Z``."""
    model = _sbm(n_per=15, penalty=penalty)
    W_ref, P_ref = _reference(model, p)
    sol = gm.solve_exact(model, method="interior", polish=False)
    compiled = model.cache.get("primal")
    assert compiled.form == form and compiled.Z is None
    assert sol.info["tolerances"].get("direct_solve_method") == conic_route.CLARABEL_METHOD.get(
        form)
    grad_ref = model.loss_gradients(W_ref)
    np.testing.assert_allclose(-model.empirical_graph.divergence(sol.flows), grad_ref,
                               atol=1e-6)
    assert np.all(penalty.dual_norm(sol.flows) <= model.capacities * (1 + 1e-8))
    cert = model.certify(sol.weights, sol.flows, project="never", recover=False)
    assert cert.relative_gap <= 1e-9 and cert.gap >= model.objective(sol.weights) - P_ref \
        - 1e-12 * P_ref
    # node constraints: the edge differences stay variables, the answer agrees
    boxed = _sbm(n_per=15, penalty=penalty)
    boxed.add_constraint(boxed.nodes[0], gm.Box(-10.0, 10.0))
    other = gm.solve_exact(boxed, method="interior", polish=False)
    assert boxed.cache.get("primal").form == "difference"
    np.testing.assert_allclose(other.weights, sol.weights, atol=1e-6)
    # NormInf keeps them too
    inf = _sbm(n_per=15, penalty=gm.NormInf())
    gm.solve_exact(inf, method="interior", polish=False)
    assert inf.cache.get("primal").form == "difference"
