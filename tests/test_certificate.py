"""Certified duality gaps (issue 3, item 4): soundness first.

Reference: ``P*`` from ``solve_exact`` (its own accuracy is ~1e-12 relative; the comparisons
allow ``1e-9 max(1, |P*|)`` for it).  Soundness: ``gap >= P(W) - P* - tolerance`` for exact
and perturbed weights and flows; tightness: at the exact solution with its flows
``gap <= 1e-6 max(1, |P*|)``.
"""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel import datasets
from gtvmodel.certificates import flows_from_weights, repair_flows

REF_TOL = 1e-9


def exact(model):
    """solve_exact; an interior-point stall is retried accepting the inaccurate status (the
    checks below only use P(W_exact) >= P*, which needs no accuracy)."""
    try:
        return model.solve_exact()
    except gm.SolverError as exc:
        if exc.status != "optimal_inaccurate":
            raise
        return model.solve_exact(accept_inaccurate=True)


def assert_sound(model, cert, p_star: float, W) -> None:
    """``gap >= P(W) - P*``.  ``p_star`` is the primal value of solve_exact's weights, which is
    >= the true P*, so a violation of this check proves the certificate unsound."""
    true_sub = model.objective(W) - p_star
    assert cert.gap >= 0.0
    assert cert.gap >= true_sub - cert.tolerance - REF_TOL * max(1.0, abs(p_star)), (
        cert.gap, true_sub, cert.tolerance)


def P_of(model, sol) -> float:
    return model.objective(sol.weights)


def assert_tight(cert, p_star: float) -> None:
    assert cert.feasible and cert.dual_feasible, cert.summary()
    assert cert.gap <= 1e-6 * max(1.0, abs(p_star)), cert.summary()


KINDS = ["squared", "logistic", "hinge", "absolute", "huber", "quadratic"]
PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.SquaredNorm2(),
             gm.QuadForm(np.diag([1.0, 2.0, 0.5]))]
CONSTRAINTS = [None, gm.Box(-0.2, 0.3), gm.NonNeg(), gm.NormBall(0.3), gm.Box(-np.inf, 0.1)]


@pytest.mark.parametrize("kind", KINDS)
def test_exact_solution_is_certified(kind, small_model):
    """Every loss with every penalty (and a constraint each): the exact solution and its flows
    certify to 1e-6; perturbed weights are never under-reported."""
    rng = np.random.default_rng(0)
    for j, pen in enumerate(PENALTIES):
        con = CONSTRAINTS[j % len(CONSTRAINTS)]
        model = small_model(kind, pen, con, seed=j, l2=0.05 * (kind == "absolute"))
        sol = exact(model)
        cert = model.certify(sol.weights, sol.flows)
        assert_tight(cert, P_of(model, sol))
        assert cert.kkt["capacity_violation"] <= 1e-6
        Wp = sol.weights + 0.05 * rng.normal(size=sol.weights.shape)
        for flows in (sol.flows, None):
            assert_sound(model, model.certify(Wp, flows), P_of(model, sol), Wp)


def test_certificate_fields_and_json(small_model):
    model = small_model("squared", gm.Norm2(), seed=3)
    sol = exact(model)
    cert = gm.certify(model, sol.weights, sol.flows)
    assert isinstance(cert, gm.Certificate)
    assert cert.success_at(1e-6)
    assert abs(cert.primal_value - P_of(model, sol)) <= 1e-9 * max(1, abs(P_of(model, sol)))
    assert cert.flows.shape == (model.num_edges, model.dim)
    assert cert.kkt["flow_conservation"] <= 1e-6
    # the gap splits into node and edge Fenchel-Young gaps
    assert abs(cert.kkt["node_gap"] + cert.kkt["complementarity"] - cert.gap) <= 1e-9
    assert (cert.node_gaps >= -1e-9).all() and (cert.edge_gaps >= -1e-9).all()
    d = json.loads(cert.to_json())
    assert d["success"] is True and d["feasible"] is True
    assert "gap" in cert.summary()


def test_infeasible_weights_get_infinite_gap(small_model):
    model = small_model("squared", gm.Norm2(), gm.Box(-0.2, 0.3), seed=4)
    sol = exact(model)
    W = sol.weights.copy()
    W[0] = 5.0  # node 0 carries the box
    cert = model.certify(W, sol.flows)
    assert not cert.feasible and cert.gap == np.inf
    assert cert.infeasible_nodes == [model.nodes[0]]
    assert not cert.success


def test_flows_outside_bounded_domains_are_charged_or_infinite(small_model):
    """Hinge rows have a bounded conjugate domain; huge flows with a smooth penalty (no
    capacities to scale them back) leave it.  Without the projection the certificate either
    charges the part outside at a *certified* radius or falls back to zero flows (dual
    feasible for every library node): finite, large and sound.  With a caller's radius the
    residuals are never charged beyond feas_tol; the certificate says what it did."""
    model = small_model("hinge", gm.SquaredNorm2(), seed=5, zero_every=0)
    sol = exact(model)
    U = 100.0 * sol.flows + 1.0
    p_star = P_of(model, sol)
    cert = model.certify(sol.weights, U, project="never", fallback=False)
    assert not cert.assumptions and np.isfinite(cert.gap)
    assert_sound(model, cert, p_star, sol.weights)
    assert cert.gap > 1e-2 and cert.repaired
    strict = model.certify(sol.weights, U, project="never", radius=10.0, fallback=False)
    assert strict.assumptions
    assert_sound(model, strict, p_star, sol.weights)
    assert strict.gap == np.inf or "set the flows to zero" in strict.repairs[-1]
    # flows built from the (optimal) weights certify them (certify tries them by itself only
    # when the given flows come within 1e3 tol of certifying: here they are far off)
    assert model.certify(sol.weights).success_at(1e-6)
    near = model.certify(sol.weights, sol.flows + 1e-9)
    assert near.success_at(1e-6)


def test_zero_loss_nodes_need_exact_conservation_and_get_repaired():
    """The paper's pitfall: raw flows violate (D^T u)_i = 0 at zero-loss nodes; the repair
    restores it (and capacities) and says so; the result stays sound."""
    data = datasets.sbm((10, 10), p_in=0.5, p_out=0.05, m=5, rho=0.6, sigma=0.1, seed=1)
    model = data.model(lam=0.05)
    sol = exact(model)
    rng = np.random.default_rng(1)
    U = sol.flows + 0.01 * rng.normal(size=sol.flows.shape)
    zero = ~data.has_data
    assert np.abs((model.incidence.T @ U)[zero]).max() > 1e-3
    # the cheap repairs alone (no convex projection, no flows from the weights, which certify
    # may prefer when they give a smaller gap: which one wins depends on which optimal flows
    # the solver returned, the graph has cycles) must restore conservation and say so; the
    # default certificate must be sound and conserve as well
    cheap = model.certify(sol.weights, U, project="never", recover=False)
    assert cheap.repaired and any("subspace" in r for r in cheap.repairs)
    for cert in (cheap, model.certify(sol.weights, U)):
        assert cert.repaired
        div = model.incidence.T @ cert.flows
        assert np.abs(div[zero]).max() <= 1e-10
        assert np.all(model.penalty.dual_norm(cert.flows)
                      <= model.lam * model.edge_weights * (1 + 1e-12))
        assert cert.dual_feasible and np.isfinite(cert.gap)
        assert_sound(model, cert, P_of(model, sol), sol.weights)
    # and the exact flows certify the exact weights
    assert_tight(model.certify(sol.weights, sol.flows), P_of(model, sol))


def test_sbm_forty_percent_without_data():
    """Paper 001 VI-A setting at reduced size: rho = 0.6 (40% of nodes without data)."""
    data = datasets.sbm((25, 25), p_in=0.5, p_out=0.02, m=5, rho=0.6, sigma=0.1, seed=2)
    model = data.model(lam=1e-2)
    sol = exact(model)
    assert_tight(model.certify(sol.weights, sol.flows), P_of(model, sol))
    cert = model.certify(sol.weights)  # flows built from the weights
    assert cert.flows_from_weights
    assert_sound(model, cert, P_of(model, sol), sol.weights)
    assert cert.relative_gap <= 1e-3, cert.summary()
    rng = np.random.default_rng(2)
    for scale in (1e-4, 1e-2, 1.0):
        Wp = sol.weights + scale * rng.normal(size=sol.weights.shape)
        Up = sol.flows * (1 + scale * rng.normal(size=sol.flows.shape))
        for U in (Up, None):
            c = model.certify(Wp, U)
            assert c.dual_feasible
            assert_sound(model, c, P_of(model, sol), Wp)


@pytest.mark.slow
def test_high_dimensional_m_less_than_d():
    """Paper 001 Table I shape: m_i = 10 < d = 100 (range condition at every data node).
    (~2 s with single-threaded BLAS, up to ~25 s when OpenBLAS threads compete on 2 cores.)"""
    _high_dimensional_case(d=100, sizes=(6, 6), seed=3)


def test_m_less_than_d_small():
    """The same range conditions, m_i = 10 < d = 30 (fast default variant)."""
    _high_dimensional_case(d=30, sizes=(3, 3), seed=4)


def _high_dimensional_case(d: int, sizes: tuple[int, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    # sum of m_i > d: the GTV optimum does not interpolate every node's data (P* > 0)
    data = datasets.sbm(sizes, p_in=0.6, p_out=0.1, m=10,
                        cluster_weights=rng.integers(0, 2, size=(2, d)).astype(float),
                        sigma=0.1, rho=1.0, seed=seed)
    model = data.model(lam=0.1)
    sol = exact(model)
    assert_tight(model.certify(sol.weights, sol.flows), P_of(model, sol))
    U = sol.flows + 1e-3 * rng.normal(size=sol.flows.shape)
    cert = model.certify(sol.weights, U)
    assert cert.repaired and cert.dual_feasible
    assert_sound(model, cert, P_of(model, sol), sol.weights)
    assert cert.relative_gap <= 1e-2
    Wp = sol.weights + 1e-2 * rng.normal(size=sol.weights.shape)
    assert_sound(model, model.certify(Wp, U), P_of(model, sol), Wp)
    assert_sound(model, model.certify(Wp), P_of(model, sol), Wp)


def test_flows_from_weights_at_optimum_smooth(small_model):
    model = small_model("logistic", gm.Norm2(), seed=6)
    sol = exact(model)
    U = flows_from_weights(model, sol.weights)
    U2, _ = repair_flows(model, U)
    cert = model.certify(sol.weights, U2)
    assert cert.relative_gap <= 1e-6, cert.summary()


def test_certificate_bad_inputs(small_model):
    model = small_model("squared", gm.Norm2(), seed=7)
    with pytest.raises(gm.DataError):
        model.certify(np.zeros((3, 3)))
    with pytest.raises(gm.DataError):
        model.certify(np.full((model.num_nodes, 3), np.nan))
    with pytest.raises(gm.DataError):
        model.certify(np.zeros((model.num_nodes, 3)), np.zeros((1, 3)))


def test_symbolic_nodes_are_certified(small_model):
    import cvxpy as cp

    model = small_model("squared", gm.Norm2(), seed=8, n=6)
    x = model.var(1)
    model.set_loss(1, cp.sum_squares(x - 0.5) + 0.2 * cp.norm1(x))
    sol = exact(model)
    cert = model.certify(sol.weights, sol.flows)
    assert cert.dual_feasible and cert.gap <= 1e-6 * max(1, abs(P_of(model, sol))), cert.summary()
    Wp = sol.weights + 0.1
    assert_sound(model, model.certify(Wp, sol.flows), P_of(model, sol), Wp)


def test_no_edges_and_lambda_zero(small_model):
    rng = np.random.default_rng(9)
    model = gm.GTVModel(nx.empty_graph(3), 2)
    for i in range(3):
        model.set_loss(i, gm.QuadraticLoss(rng.normal(size=2)))
    sol = exact(model)
    assert_tight(model.certify(sol.weights), P_of(model, sol))
    model2 = small_model("squared", gm.Norm2(), seed=9, lam=0.0, zero_every=0)
    sol2 = exact(model2)
    c = model2.certify(sol2.weights, sol2.flows + 0.3)
    assert np.abs(c.flows).max() == 0.0  # zero capacities
    assert_tight(c, sol2.objective)


@settings(deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow])
# found 2026-11-23: a zero-loss node with l1 whose demand left the l1 box on the negative side
# was not charged (its residual came back signed), and the gap read 0 against 3.7e-4
@example(seed=77, kind="squared", pen=1, con=0, scale=1e-3, flows="perturbed",
         reg=(0.05, 0.0))
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(KINDS),
       pen=st.sampled_from(range(len(PENALTIES))), con=st.sampled_from(range(len(CONSTRAINTS))),
       scale=st.sampled_from([0.0, 1e-6, 1e-3, 1e-1, 1.0]),
       flows=st.sampled_from(["perturbed", "none", "random"]),
       reg=st.sampled_from([(0.0, 0.0), (0.05, 0.0), (0.0, 0.1)]))
def test_soundness_property(seed, kind, pen, con, scale, flows, reg, small_model):
    """Random instances, exact and perturbed weights/flows: never under-reported."""
    rng = np.random.default_rng(seed)
    model = small_model(kind, PENALTIES[pen], CONSTRAINTS[con], seed=seed % 97, n=7,
                        l1=reg[0], l2=reg[1], lam=float(rng.choice([0.05, 0.3, 2.0])))
    sol = exact(model)
    W = sol.weights + scale * rng.normal(size=sol.weights.shape)
    if con and rng.random() < 0.5:  # keep perturbed weights feasible half the time
        for i in range(model.num_nodes):
            for c in model.constraints_at(i):
                W[i] = c.project(W[i]) if hasattr(c, "project") else W[i]
    U = {"perturbed": sol.flows * (1 + scale * rng.normal(size=sol.flows.shape)),
         "none": None,
         "random": rng.normal(size=sol.flows.shape)}[flows]  # adversarial: unrelated flows
    cert = model.certify(W, U)
    assert_sound(model, cert, P_of(model, sol), W)
    if scale == 0.0 and flows == "perturbed":
        assert_tight(cert, P_of(model, sol))


def test_lambda_change_is_picked_up(small_model):
    """Cached certificate machinery must follow model.lam (capacities lambda A_e)."""
    model = small_model("logistic", gm.Norm2(), seed=11, zero_every=3)
    rng = np.random.default_rng(11)
    for lam in (0.3, 0.05):
        model.lam = lam
        sol = exact(model)
        assert_tight(model.certify(sol.weights, sol.flows), P_of(model, sol))
        U = sol.flows * (1 + 0.05 * rng.normal(size=sol.flows.shape))
        c = model.certify(sol.weights, U)
        assert np.all(model.penalty.dual_norm(c.flows)
                      <= lam * model.edge_weights * (1 + 1e-12))
        assert_sound(model, c, P_of(model, sol), sol.weights)


def test_bounded_domains_repair_and_project_option(small_model):
    """Logistic rows: flows pushed out of the conjugate domains are repaired (gradient
    correction or projection) with project="auto"; project="never" stays cheap and may give
    +inf, never an optimistic gap."""
    model = small_model("logistic", gm.Norm2(), seed=12, zero_every=3)
    sol = exact(model)
    rng = np.random.default_rng(12)
    Wp = sol.weights + 1e-3 * rng.normal(size=sol.weights.shape)
    Up = sol.flows * (1 + 0.2 * rng.normal(size=sol.flows.shape))
    for project in ("auto", "never"):
        c = model.certify(Wp, Up, project=project)
        assert_sound(model, c, P_of(model, sol), Wp)
        if project == "auto":
            assert c.dual_feasible and np.isfinite(c.gap)
    with pytest.raises(gm.ParameterError):
        model.certify(Wp, Up, project="sometimes")
