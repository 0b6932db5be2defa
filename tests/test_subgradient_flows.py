"""The escalation's flows at the subgradient of the edges that are not fused
(:func:`gtvmodel.certificates.certificate.subgradient_flows`).

A solver's flows meet the edge condition ``u_e = lambda A_e grad phi(v_e)`` only to its
feasibility tolerance, which the certificate's complementarity term multiplies by
``||v_e||``.  References here are CVXPY problems written in the test.
"""

from __future__ import annotations

import _soundness as soundness
import cvxpy as cp
import networkx as nx
import numpy as np
import pytest

import gtvmodel as gm
from gtvmodel.certificates.certificate import subgradient_flows


def _chain(penalty, d: int = 2, lam: float = 0.3):
    """Five nodes on a path, quadratic losses with targets in two groups (the middle edge
    between them carries a difference, the others are fused), and ``P*`` by plain CVXPY."""
    rng = np.random.default_rng(3)
    targets = np.vstack([np.zeros((2, d)), 5.0 + rng.normal(size=(1, d)), np.ones((2, d)) * 9])
    G = nx.path_graph(5)
    model = gm.GTVModel(G, dim=d, penalty=penalty, lam=lam)
    for i in range(5):
        model.set_loss(i, gm.QuadraticLoss(targets[i]))
    W = cp.Variable((5, d))
    p = {"norm2": 2, "norm1": 1, "norminf": "inf"}[penalty.kind]
    obj = sum(cp.sum_squares(W[i] - targets[i]) for i in range(5)) + lam * sum(
        cp.norm(W[a] - W[b], p) for a, b in G.edges)
    prob = cp.Problem(cp.Minimize(obj))
    prob.solve(solver="CLARABEL", tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    assert prob.status == cp.OPTIMAL
    return model, float(prob.value)


@pytest.mark.parametrize("penalty", [gm.Norm2(), gm.Norm1(), gm.NormInf()])
def test_non_fused_rows_move_to_their_capacity(penalty):
    model, p_star = _chain(penalty)
    sol = gm.solve_exact(model, certify=False)
    W = sol.weights
    V = model.empirical_graph.diff(W)
    U = np.asarray(sol.flows, dtype=float) * (1.0 - 1e-4)  # every flow inside its capacity
    S = subgradient_flows(model, W, U)
    assert S is not None
    cap = model.capacities[:, None]
    if penalty.kind == "norm1":
        move = np.abs(V) > 1e-6
        np.testing.assert_allclose(S[move], (cap * np.sign(V))[move], rtol=1e-15)
    elif penalty.kind == "norm2":
        r = np.linalg.norm(V, axis=1)
        move = np.repeat((r > 1e-6)[:, None], V.shape[1], axis=1)
        np.testing.assert_allclose(S[move], (cap * V / r[:, None])[move], rtol=1e-14)
    else:
        j = np.argmax(np.abs(V), axis=1)
        rows = np.flatnonzero(np.abs(V).max(axis=1) > 1e-6)
        np.testing.assert_allclose(S[rows, j[rows]],
                                   model.capacities[rows] * np.sign(V[rows, j[rows]]))
        move = np.zeros_like(V, dtype=bool)
        move[rows] = True
    assert move.any() and not move.all()
    np.testing.assert_array_equal(S[~move], U[~move])  # fused rows keep the given flows
    # the escalation certifies the optimum from the spoiled flows (recovery off)
    spoiled = gm.certify(model, W, U, recover=False, fallback=False)
    cert = gm.certify(model, W, U, recover=False)
    assert cert.gap >= float(model.objective(W)) - p_star - 1e-9
    assert cert.relative_gap <= 1e-9 < spoiled.relative_gap
    assert any("grad phi(v_e)" in r for r in cert.repairs)  # tried first, and it certifies


def test_no_gradient_no_candidate():
    """``NormP(3)`` has no row gradient here, a smooth penalty no capacities: None."""
    W = np.arange(10.0).reshape(5, 2) ** 2  # every difference far from zero
    for penalty in (gm.NormP(3), gm.SquaredNorm2()):
        model = gm.GTVModel(nx.path_graph(5), dim=2, penalty=penalty, lam=0.3)
        assert subgradient_flows(model, W, np.zeros((4, 2))) is None


def test_symbolic_node_beside_tiny_capacities_certifies_its_exact_solution():
    """The slow sweep's mixed seed 70: ``2.069 / w_0`` at ``w_0 ~ 2.1e3`` beside edges of
    capacity 1e-8 ... 4e-7 (``l_inf``); the exact route's flows sat 1e-8 off their capacity
    and certified 5.7e-5, and Clarabel's conjugate bound of that node was 4e-6 loose.  The
    reference is the sweep's own CVXPY problem (tests/_soundness.py)."""
    inst = soundness.random_instance(70, "mixed")
    ref = soundness.reference(inst)
    assert ref.ok
    model = soundness.build_model(inst)
    sol = model.solve_exact()
    cert = model.certify(sol.weights, sol.flows)
    assert cert.gap >= float(model.objective(sol.weights)) - ref.value - ref.err
    assert cert.relative_gap <= 1e-8
