"""Automatic conjugation of symbolic node losses (gtvmodel.duality.conic).

Checked against independent formulations:

- the dual cones: for random points, membership in the cone the code builds agrees with the
  textbook dual-cone formula and with the definition ``K^* = {y: <x, y> >= 0 for all x in K}``
  (computed as ``min <x, y>`` over ``K`` intersected with the unit ball);
- the conic dual (D_s) of a node against a direct solve of ``min_x L(x) - s^T x`` (P_s) and
  against closed-form conjugates of library losses, including ``s`` outside the domain (+inf);
- strong duality of whole models with symbolic nodes: ``solve_dual`` against ``solve_exact``.
"""

from __future__ import annotations

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel._compat import CLARABEL, cvxpy_version
from gtvmodel.certificates import value as value_mod
from gtvmodel.duality import conic
from gtvmodel.duality.conic import ConicData, _dual_cone_constraints, svec_matrix
from gtvmodel.errors import DataError

pytestmark = pytest.mark.filterwarnings("ignore:geo_mean is being approximated")


def _smat(y: np.ndarray, n: int) -> np.ndarray:
    """The symmetric matrix of an svec in Clarabel's triangle convention (upper triangle column
    by column, off-diagonal entries scaled by sqrt(2)), written here independently."""
    Z = np.zeros((n, n))
    Z[np.tril_indices(n)] = y  # lower triangle row by row = upper triangle column by column
    Z = Z.T
    off = ~np.eye(n, dtype=bool)
    Z[off] /= np.sqrt(2.0)
    return np.triu(Z) + np.triu(Z, 1).T


def _cvxpy_clarabel_psd_format(constr):
    """CVXPY's own svec map of a PSD constraint for Clarabel (its location moved in CVXPY 1.7
    and the helper was removed again later); None where this CVXPY has neither."""
    try:
        from cvxpy.utilities.psd_utils import TriangleKind, psd_format_mat
    except ImportError:
        fmt = getattr(CLARABEL, "psd_format_mat", None)
        return None if fmt is None else fmt(constr)
    return psd_format_mat(constr, TriangleKind.UPPER, True)

#: ``power``/``geo_mean`` through the exact power cones: CVXPY 1.8 added ``approx`` (default
#: True, SOC approximations); before it these atoms always used power cones.
EXACT = {"approx": False} if cvxpy_version() >= (1, 8, 0) else {}

CLARABEL_TIGHT = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-9, tol_ktratio=1e-8)


# =============================================================== dual cones
def _fake(n_rows: int, **cones) -> ConicData:
    base = dict(zero=0, nonneg=0, soc=(), psd=(), exp=0, p3d=(), pnd=())
    base.update(cones)
    import scipy.sparse as sp

    return ConicData(A=sp.csr_matrix((n_rows, 1)), b=np.zeros(n_rows), c0=np.zeros(1),
                     C=sp.csr_matrix((1, 1)), d0=0.0, dv=np.zeros(1), x_cols=np.zeros(1, int),
                     **base)


def _built_dual_contains(data: ConicData, y: np.ndarray) -> bool:
    """Is ``y`` in the dual cone as gtvmodel.duality.conic builds it (a CVXPY feasibility
    problem)?"""
    z = cp.Variable(y.size)
    prob = cp.Problem(cp.Minimize(0), _dual_cone_constraints(z, [(0, data)]) + [z == y])
    prob.solve(solver="CLARABEL")
    assert prob.status in (cp.OPTIMAL, cp.INFEASIBLE), prob.status
    return prob.status == cp.OPTIMAL


def _polar_min(primal_cone, y: np.ndarray) -> float:
    """``min <x, y>`` over ``x in K``, ``||x||_2 <= 1``: 0 iff ``y in K^*``, else negative."""
    x = cp.Variable(y.size)
    prob = cp.Problem(cp.Minimize(y @ x), primal_cone(x) + [cp.norm(x, 2) <= 1])
    prob.solve(solver="CLARABEL")
    assert prob.status == cp.OPTIMAL
    return float(prob.value)


def _check_dual_cone(data, primal_cone, known_margin, sampler, rng, n=16):
    """Built dual cone == textbook formula == definition, on points away from the boundary."""
    checked = {True: 0, False: 0}
    for _ in range(n):
        y = sampler(rng)
        m = known_margin(y)
        if abs(m) < 5e-2:
            continue
        inside = m > 0
        assert _built_dual_contains(data, y) == inside, (y, m)
        v = _polar_min(primal_cone, y)
        assert (v > -1e-7) == inside, (y, m, v)
        checked[inside] += 1
    assert checked[True] >= 3 and checked[False] >= 3, checked


def _exp_known_margin(y):
    """Textbook K_exp^* = {(u, v, w): -u e^{v/u} <= e w, u < 0} (u = 0: v, w >= 0)."""
    u, v, w = y
    if u >= 0:
        return -u if u > 0 else min(v, w)
    return np.e * w + u * np.exp(v / u)


def test_exp_dual_cone(rng):
    def sampler(r):  # bias towards u < 0 so both outcomes occur
        y = r.normal(size=3)
        y[0] = -abs(y[0]) if r.random() < 0.8 else abs(y[0])
        return y

    _check_dual_cone(_fake(3, exp=1), lambda x: [cp.ExpCone(x[0], x[1], x[2])],
                     _exp_known_margin, sampler, rng)


def test_math_md_exp_dual_identity(rng):
    """MATH.md §3: K_exp^* = {(u, v, w): ExpCone(u - v, -u, w)}, checked pointwise."""
    for _ in range(200):
        u, v, w = rng.normal(size=3) * [1, 2, 2]
        if u >= 0:
            continue
        # ExpCone(a, b, c) with b > 0 means b exp(a / b) <= c
        in_identity = (-u) * np.exp((u - v) / (-u)) <= w
        in_textbook = -u * np.exp(v / u) <= np.e * w
        assert in_identity == in_textbook


def test_exp_dual_pairing_nonnegative(rng):
    """<x, y> >= 0 for sampled x in K_exp and y in the claimed dual."""
    for _ in range(500):
        xa, yb = rng.normal(size=2) * 2
        yb = abs(yb) + 1e-3
        x = np.array([xa, yb, yb * np.exp(xa / yb) + abs(rng.normal())])
        a, b = rng.normal(size=2) * 2
        b = abs(b) + 1e-3  # ExpCone(u - v, -u, w) with -u = b
        u = -b
        v = u - a
        w = b * np.exp(a / b) + abs(rng.normal())
        assert x @ np.array([u, v, w]) >= -1e-9 * (1 + np.abs(x).max() * 3 + abs(w))


@pytest.mark.parametrize("alpha", [0.3, 0.5, 2.0 / 3.0])
def test_pow3d_dual_cone(rng, alpha):
    def margin(y):
        u, v, w = y
        if u < 0 or v < 0:
            return min(u, v)
        return (u / alpha) ** alpha * (v / (1 - alpha)) ** (1 - alpha) - abs(w)

    def sampler(r):
        y = r.normal(size=3)
        if r.random() < 0.7:
            y[:2] = np.abs(y[:2])
        return y

    _check_dual_cone(_fake(3, p3d=(alpha,)), lambda x: [cp.PowCone3D(x[0], x[1], x[2], alpha)],
                     margin, sampler, rng)


def test_pownd_dual_cone(rng):
    a = np.array([0.2, 0.3, 0.5])

    def margin(y):
        u, w = y[:3], y[3]
        if (u < 0).any():
            return float(u.min())
        return float(np.prod((u / a) ** a) - abs(w))

    def sampler(r):
        y = r.normal(size=4)
        if r.random() < 0.7:
            y[:3] = np.abs(y[:3])
        return y

    # the primal cone via geo_mean's exact SOC form for rational weights (Clarabel's own
    # generalized power cone is numerically fragile in the polar problem)
    _check_dual_cone(_fake(4, pnd=(tuple(a),)),
                     lambda x: [cp.geo_mean(x[:3], p=[2, 3, 5]) >= cp.abs(x[3])],
                     margin, sampler, rng)


def test_soc_dual_cone(rng):
    def margin(y):
        return y[0] - np.linalg.norm(y[1:])

    def sampler(r):
        y = r.normal(size=4)
        y[0] = abs(y[0]) * 2
        return y

    _check_dual_cone(_fake(4, soc=(4,)), lambda x: [cp.SOC(x[0], x[1:])], margin, sampler, rng)


def test_psd_svec_dual_cone(rng):
    n = 3
    k = n * (n + 1) // 2

    def margin(y):  # independent smat (Clarabel's triangle convention)
        return float(np.linalg.eigvalsh(_smat(y, n))[0])

    def sampler(r):
        B = r.normal(size=(n, n))
        S = B @ B.T / 3 + r.uniform(-0.6, 0.4) * np.eye(n)
        return svec_matrix(n) @ S.ravel(order="F")

    def primal(x):
        Xm = cp.Variable((n, n), symmetric=True)
        return [Xm >> 0, x == svec_matrix(n) @ cp.vec(Xm, order="F")]

    _check_dual_cone(_fake(k, psd=(n,)), primal, margin, sampler, rng)


def test_svec_matches_cvxpy_clarabel_format(rng):
    for n in (1, 2, 4):
        X = cp.Variable((n, n))
        M = _cvxpy_clarabel_psd_format(X >> 0)
        if M is None:
            pytest.skip("this CVXPY exposes no svec map of its Clarabel interface")
        S = rng.normal(size=(n, n))
        S = S + S.T
        np.testing.assert_allclose(M @ S.ravel(order="F"), svec_matrix(n) @ S.ravel(order="F"),
                                   atol=1e-14)
        Y = rng.normal(size=(n, n))
        Y = Y + Y.T
        assert np.isclose((svec_matrix(n) @ S.ravel(order="F")) @ (
            svec_matrix(n) @ Y.ravel(order="F")), np.trace(S @ Y))


# =============================================================== node conjugates
def _one_node_model(d, loss, constraint=None):
    model = gm.GTVModel(nx.empty_graph(1), dim=d)
    model.set_loss(0, loss)
    if constraint is not None:
        model.add_constraint(0, constraint)
    return model


def _dual_conjugate(model, i, s):
    """``(L_i + iota_C_i)^*(s)`` from the conic dual (D_s): ``-max``, +inf if infeasible."""
    sp_ = cp.Parameter(model.dim, value=np.asarray(s, dtype=float))
    expr, cons = conic.node_dual_terms(model, i, sp_)
    prob = cp.Problem(cp.Maximize(expr), cons)
    prob.solve(solver="CLARABEL", **CLARABEL_TIGHT)
    if prob.status == cp.INFEASIBLE:
        return np.inf
    assert prob.status == cp.OPTIMAL, prob.status
    return -float(prob.value)


A2 = np.array([0.5, -1.0])
XL = np.array([[1.0, 0.5], [-0.3, 1.0]])

# (name, d, loss callable, constraint or None, [(s, in domain?)])
CASES = [
    ("exp", 2, lambda x: cp.sum(cp.exp(x)), None,
     [([1.0, 2.0], True), ([0.3, 0.7], True), ([-1.0, 1.0], False)]),
    ("neg_log", 2, lambda x: -cp.sum(cp.log(x)) + x[0], None,
     [([-1.0, -2.0], True), ([0.5, -1.0], True), ([1.5, -1.0], False)]),
    ("neg_entropy", 2, lambda x: -cp.sum(cp.entr(x)), None,
     [([0.3, -1.0], True), ([2.0, 1.0], True)]),
    ("log_sum_exp", 3, lambda x: cp.log_sum_exp(x), lambda x: cp.norm(x, 2) <= 10, []),
    # (x0 - 1)^2 / x1 + x1: the sup over x1 -> 0 is not attained for s0^2/4 + s1 < 1, and the
    # conjugate is +inf for s0^2/4 + s1 > 1; adding (x1 - 2)^2 makes it finite and attained
    ("quad_over_lin", 2, lambda x: cp.quad_over_lin(x[0] - 1.0, x[1]) + cp.square(x[1] - 2.0),
     None, [([0.5, -0.2], True), ([1.0, 3.0], True)]),
    ("quad_over_lin_unbounded", 2, lambda x: cp.quad_over_lin(x[0] - 1.0, x[1]) + x[1], None,
     [([1.0, 1.5], False), ([2.0, 0.5], False)]),
    ("norms", 3, lambda x: cp.norm(x - 1.0, 2) + 0.5 * cp.norm(x, 1) + 0.2 * cp.norm(x, "inf")
     + cp.sum_squares(x), None, [([0.3, -1.0, 2.0], True)]),
    ("norm1_only", 2, lambda x: cp.norm(x - A2, 1), None,
     [([0.5, -0.5], True), ([1.5, 0.0], False)]),
    ("power_cone", 2, lambda x: cp.sum(cp.power(x, 1.5, **EXACT)), None,
     [([1.0, 2.0], True), ([-1.0, 0.5], True)]),
    ("psd_constraint", 2, lambda x: cp.sum_squares(x - A2),
     lambda x: cp.bmat([[1.0, x[0]], [x[0], x[1]]]) >> 0,
     [([1.0, -3.0], True), ([2.0, 1.0], True)]),
    ("lambda_max", 3, lambda x: cp.lambda_max(cp.bmat([[x[0], x[1]], [x[1], x[2]]])),
     lambda x: cp.norm(x, 2) <= 3, [([0.1, 0.2, 0.3], True), ([-2.0, 1.0, 0.5], True)]),
    # domain: X^T mu (m y_r mu_r in [-1, 0]) plus the normal cone {t (1, 1): t >= 0}
    ("library_loss_symbolic_constraint", 2, gm.LogisticLoss(XL, [1, -1]),
     lambda x: x[0] + x[1] <= 1, [(XL.T @ [-0.2, 0.25] + 0.3, True), ([-5.0, 5.0], False)]),
]


@pytest.mark.parametrize("name,d,loss,con,points", CASES, ids=[c[0] for c in CASES])
def test_node_conjugate_primal_vs_conic_dual(rng, name, d, loss, con, points):
    if name == "power_cone" and not EXACT:
        pytest.skip("power(x, 1.5) is a power cone from CVXPY 1.8 on (approx=False)")
    model = _one_node_model(d, loss, con)
    pts = list(points) + [(rng.normal(size=d) * 0.4, None) for _ in range(2)]
    for s, inside in pts:
        s = np.asarray(s, dtype=float)
        primal = conic.node_conjugate_value(model, 0, s)
        dual = _dual_conjugate(model, 0, s)
        if inside is False:
            assert primal == np.inf and dual == np.inf, (s, primal, dual)
        elif inside is True:
            assert np.isfinite(primal), (s, primal)
        if np.isfinite(primal) or np.isfinite(dual):
            assert np.isclose(primal, dual, rtol=1e-6, atol=1e-7), (s, primal, dual)


def test_conjugate_values_batched_and_cached():
    model = gm.GTVModel(nx.path_graph(3), dim=2)
    model.set_loss(0, lambda x: cp.sum(cp.exp(x)))
    model.set_loss(2, lambda x: cp.sum_squares(x - A2))
    S = np.array([[1.0, 2.0], [0.0, 0.0], [0.4, 0.2]])
    vals = conic.conjugate_values(model, [0, 1, 2], S)
    # exp*(s) = s log s - s ; ZeroLoss*(0) = 0 ; ||.-a||^2 * (s) = s.a + |s|^2/4
    np.testing.assert_allclose(vals, [sum(t * np.log(t) - t for t in S[0]), 0.0,
                                      S[2] @ A2 + S[2] @ S[2] / 4], rtol=1e-7, atol=1e-9)
    for k, i in enumerate([0, 2]):  # value + tolerance bounds the exact conjugate from above
        val, tol = conic.node_conjugate(model, i, S[2 * k])
        assert 0 < tol <= 1e-7 and val == vals[2 * k] and val + tol >= [
            sum(t * np.log(t) - t for t in S[0]), S[2] @ A2 + S[2] @ S[2] / 4][k] - 1e-12
    assert conic.node_conjugate(model, 0, [-1.0, 1.0]) == (np.inf, 0.0)
    data = conic.node_conic_data(model, 0)
    assert conic.node_conic_data(model, 0) is data  # cached
    model.set_loss(0, lambda x: cp.sum(cp.exp(2 * x)))
    assert conic.node_conic_data(model, 0) is not data  # structural change clears the cache
    assert conic.conic_nodes(model) == [0, 2]


def test_user_parameter_values_are_tracked():
    a = cp.Parameter(2, value=np.array([1.0, 2.0]))
    model = _one_node_model(2, lambda x: cp.sum_squares(x - a))
    s = np.array([0.5, -0.3])
    for val in ([1.0, 2.0], [-1.0, 0.5]):
        a.value = np.array(val)
        exact = s @ a.value + s @ s / 4
        assert np.isclose(_dual_conjugate(model, 0, s), exact, rtol=1e-7)
        assert np.isclose(conic.node_conjugate_value(model, 0, s), exact, rtol=1e-7)


# ---- symbolic losses equal to library losses: closed-form conjugates (MATH.md §3 table)
def _h_logistic(a):
    """``h*(a) = (-a) log(-a) + (1 + a) log(1 + a)`` on ``[-1, 0]``."""
    out = 0.0
    for t in (-a, 1 + a):
        out += t * np.log(t) if t > 0 else 0.0
    return out


def _library_cases(rng):
    d = 2
    X = rng.normal(size=(d, d)) + 2 * np.eye(d)  # square, invertible: mu = X^{-T} s is unique
    y_reg = rng.normal(size=d)
    y_cls = np.array([1.0, -1.0])
    a = rng.normal(size=d)
    m = d
    Xi = np.linalg.inv(X.T)

    def sq_conj(s):
        mu = Xi @ s
        return float(mu @ y_reg + m * mu @ mu / 4)

    def logistic_conj(s):
        mu = Xi @ s
        ar = m * y_cls * mu
        if np.any(ar < -1) or np.any(ar > 0):
            return np.inf
        return float(sum(_h_logistic(t) for t in ar) / m)

    def huber_conj(s, M=0.7):
        mu = Xi @ s
        if np.any(np.abs(m * mu) > 2 * M):
            return np.inf
        return float(mu @ y_reg + m * mu @ mu / 4)

    def quad_l1_conj(s, eta=0.3):
        # inf-convolution with iota{||s2||_inf <= eta}: per coordinate, r = s - s2 in
        # [s - eta, s + eta] minimizing r a + r^2 / 4, i.e. r = clip(-2a)
        r = np.clip(-2 * a, s - eta, s + eta)
        return float(r @ a + r @ r / 4)

    def quad_l2_conj(s, kappa=0.5):
        # ||w - a||^2 + kappa ||w||^2: strongly convex quadratic, closed form
        w = (s + 2 * a) / (2 * (1 + kappa))
        return float(s @ w - (w - a) @ (w - a) - kappa * w @ w)

    return [
        ("squared", gm.SquaredLoss(X, y_reg), lambda x: cp.sum_squares(y_reg - X @ x) / m,
         sq_conj, [rng.normal(size=d)]),
        ("logistic", gm.LogisticLoss(X, y_cls),
         lambda x: cp.sum(cp.logistic(-cp.multiply(y_cls, X @ x))) / m, logistic_conj,
         [X.T @ (y_cls * np.array([-0.2, -0.35])), X.T @ (y_cls * np.array([-0.7, 0.1]))]),
        ("huber", gm.HuberLoss(X, y_reg, M=0.7),
         lambda x: cp.sum(cp.huber(X @ x - y_reg, 0.7)) / m, huber_conj,
         [X.T @ np.array([0.2, -0.3]), X.T @ np.array([0.9, 0.0])]),
        ("quadratic_l1", gm.QuadraticLoss(a, l1=0.3),
         lambda x: cp.sum_squares(x - a) + 0.3 * cp.norm1(x), quad_l1_conj,
         [rng.normal(size=d)]),
        ("quadratic_l2", gm.QuadraticLoss(a, l2=0.5),
         lambda x: cp.sum_squares(x - a) + 0.5 * cp.sum_squares(x), quad_l2_conj,
         [rng.normal(size=d)]),
    ]


def test_symbolic_equal_to_library_same_conjugate(rng):
    for name, lib, sym, closed, points in _library_cases(rng):
        m_lib = _one_node_model(2, lib)
        m_sym = _one_node_model(2, sym)
        for s in points + [rng.normal(size=2) * 0.3]:
            exact = closed(s)
            for model in (m_lib, m_sym):
                prim = conic.node_conjugate_value(model, 0, s)
                dual = _dual_conjugate(model, 0, s)
                if np.isinf(exact):
                    assert prim == np.inf and dual == np.inf, (name, s, prim, dual)
                else:
                    assert np.isclose(prim, exact, rtol=1e-6, atol=1e-8), (name, s, prim, exact)
                    assert np.isclose(dual, exact, rtol=1e-6, atol=1e-8), (name, s, dual, exact)


@pytest.mark.skipif(not EXACT, reason="geo_mean(approx=False) is CVXPY >= 1.8")
def test_pownd_node_reports_the_looser_tolerance():
    """geo_mean(approx=False) -> Clarabel's generalized power cone, which does not reach the
    package's default gap tolerance: run_solver falls back to a looser one, and node_conjugate
    reports that tolerance (so a certificate adds the right amount)."""
    model = _one_node_model(2, lambda x: -cp.geo_mean(x, **EXACT) + cp.sum_squares(x))
    s = np.array([1.0, 2.0])
    val, tol = conic.node_conjugate(model, 0, s)
    assert 1e-12 < tol <= 1e-7
    assert np.isclose(val, _dual_conjugate(model, 0, s), rtol=1e-6)


# =============================================================== errors
def test_bad_inputs_raise_clear_errors():
    model = _one_node_model(2, lambda x: cp.sum(cp.exp(x)))
    with pytest.raises(DataError, match="shape"):
        conic.node_conjugate_value(model, 0, [1.0, 2.0, 3.0])
    with pytest.raises(DataError, match="NaN"):
        conic.node_conjugate_value(model, 0, [np.nan, 2.0])
    with pytest.raises(DataError, match="position"):
        conic.node_dual_terms(model, 5, cp.Constant(np.zeros(2)))
    with pytest.raises(DataError, match="shape"):
        conic.node_dual_terms(model, 0, cp.Constant(np.zeros(3)))


def test_infeasible_node_constraints_raise():
    model = _one_node_model(2, lambda x: cp.sum_squares(x), lambda x: [x[0] >= 1, x[0] <= 0])
    with pytest.raises(gm.InfeasibleError, match="node 0"):
        conic.node_conjugate_value(model, 0, np.zeros(2))


# =============================================================== whole models
def _reference_dual(model) -> float:
    """An independent dual flow problem (24): every node (library or not) through its conic
    dual (D_s), every edge through the penalty's scaled conjugate.  Solved by Clarabel."""
    n, E, d = model.num_nodes, model.num_edges, model.dim
    U = cp.Variable((E, d))
    S = -(model.incidence.T @ U)
    node_expr, cons = conic.conic_dual_terms(model, list(range(n)), S)
    cost, edge_cons = model.penalty.conjugate_expression(U, model.lam * model.edge_weights)
    prob = cp.Problem(cp.Maximize(node_expr - cost), cons + edge_cons)
    prob.solve(solver="CLARABEL", **CLARABEL_TIGHT)
    assert prob.status == cp.OPTIMAL, prob.status
    return float(prob.value)


def _graph(n, extra=()):
    G = nx.path_graph(n)
    G.add_edges_from(extra)
    for k, (a, b) in enumerate(G.edges):
        G.edges[a, b]["weight"] = 0.5 + 0.25 * k
    return G


def _model_exp_log_entropy(penalty, rng):
    model = gm.GTVModel(_graph(4, [(0, 3)]), dim=2, penalty=penalty, lam=0.3)
    a = np.array([0.4, -0.2])
    model.set_loss(0, lambda x: cp.sum(cp.exp(x)) - 2 * x[0])
    model.set_loss(1, lambda x: -cp.sum(cp.log(x)) + cp.sum_squares(x - 1.5))
    model.set_loss(2, lambda x: -cp.sum(cp.entr(x)) + cp.sum_squares(x - a))
    model.set_loss(3, gm.SquaredLoss(rng.normal(size=(3, 2)), rng.normal(size=3)))
    return model


def _model_qol_norms(penalty, rng):
    model = gm.GTVModel(_graph(4), dim=3, penalty=penalty, lam=0.2)
    model.set_loss(0, lambda x: cp.quad_over_lin(x[0] - 1.0, x[1] + 2.0) + cp.square(x[1] - 1)
                   + cp.sum_squares(x[2]))
    model.set_loss(1, lambda x: cp.norm(x - np.array([1.0, 0.0, -1.0]), 2)
                   + cp.norm(x, 1) * 0.3 + cp.norm(x - 2.0, "inf"))
    model.set_loss(2, gm.QuadraticLoss(rng.normal(size=3), l1=0.2))
    model.set_loss(3, lambda x: cp.sum_squares(x + 1.0) + cp.norm(x, 1))
    return model


def _model_psd(penalty, rng):
    model = gm.GTVModel(_graph(3, [(0, 2)]), dim=3, penalty=penalty, lam=0.4)
    model.set_loss(0, gm.QuadraticLoss(np.array([2.0, -1.0, 0.5])))
    model.add_constraint(0, lambda x: cp.bmat([[1.0, x[0]], [x[0], x[1]]]) >> 0)
    model.set_loss(1, lambda x: cp.lambda_max(cp.bmat([[x[0], x[1]], [x[1], x[2]]]))
                   + cp.sum_squares(x - np.array([1.0, 0.5, -1.0])))
    model.set_loss(2, gm.HuberLoss(rng.normal(size=(4, 3)), rng.normal(size=4), M=0.5))
    return model


def _model_power(penalty, rng):
    model = gm.GTVModel(_graph(3), dim=2, penalty=penalty, lam=0.25)
    model.set_loss(0, lambda x: cp.sum(cp.power(x, 1.5, **EXACT)) - x[0] - 2 * x[1])
    model.set_loss(1, lambda x: -cp.geo_mean(x) + cp.sum_squares(x - 1.0))
    model.set_loss(2, gm.LogisticLoss(rng.normal(size=(5, 2)), np.sign(rng.normal(size=5)),
                                      l2=0.1))
    model.add_constraint(2, lambda x: x[0] + x[1] <= 0.5)
    model.add_constraint(2, gm.Box(-1.0, 1.0))
    return model


MODELS = [_model_exp_log_entropy, _model_qol_norms, _model_psd, _model_power]
PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.SquaredNorm2(),
             gm.QuadForm(np.array([[2.0, 0.3], [0.3, 1.0]])), gm.NormP(3)]


def _penalty_for(model_fn, penalty):
    if isinstance(penalty, gm.QuadForm) and model_fn in (_model_qol_norms, _model_psd):
        return gm.QuadForm(np.diag([2.0, 1.0, 0.5]) + 0.1)
    return penalty


def _fast_for(penalties, fast):
    """Parameters: those in ``fast`` run by default, the others are marked slow."""
    return [p if isinstance(p, fast) else pytest.param(p, marks=pytest.mark.slow)
            for p in penalties]


@pytest.mark.parametrize("model_fn", MODELS, ids=[f.__name__[7:] for f in MODELS])
@pytest.mark.parametrize("penalty", _fast_for(PENALTIES, (gm.Norm2, gm.SquaredNorm2)),
                         ids=lambda p: type(p).__name__)
def test_reference_conic_dual_strong_duality(rng, model_fn, penalty):
    """All nodes via (D_s) + penalty conjugates: dual value == solve_exact within 1e-6."""
    model = model_fn(_penalty_for(model_fn, penalty), rng)
    primal = model.solve_exact().objective
    dual = _reference_dual(model)
    assert dual == pytest.approx(primal, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("model_fn", MODELS, ids=[f.__name__[7:] for f in MODELS])
@pytest.mark.parametrize("penalty", PENALTIES, ids=lambda p: type(p).__name__)
def test_solve_dual_strong_duality_symbolic(rng, model_fn, penalty):
    """model.solve_dual (library nodes by their conjugates, conic nodes by gtvmodel.duality.conic)
    against solve_exact and against the all-conic reference dual, relative 1e-6."""
    model = model_fn(_penalty_for(model_fn, penalty), rng)
    primal = model.solve_exact().objective
    dual = model.solve_dual()
    assert dual.objective == pytest.approx(primal, rel=1e-6, abs=1e-8)
    assert dual.flows.shape == (model.num_edges, model.dim)
    # weights recovered for library and conic nodes alike (conic.conic_weights), verified
    assert dual.weights is not None
    assert model.objective(dual.weights) == pytest.approx(primal, rel=1e-6, abs=1e-8)


def test_symbolic_twins_of_library_losses_same_dual_optimum(rng):
    """A model with library losses and its twin with the same losses written as CVXPY
    expressions: equal dual optima (and equal to the primal), every library loss."""
    G = _graph(5, [(0, 4), (1, 3)])
    d = 2
    cases = _library_cases(rng)
    lib = gm.GTVModel(G, dim=d, penalty=gm.Norm2(), lam=0.4)
    sym = gm.GTVModel(G, dim=d, penalty=gm.Norm2(), lam=0.4)
    for k, (_, lib_loss, sym_loss, _, _) in enumerate(cases):
        lib.set_loss(k, lib_loss)
        sym.set_loss(k, sym_loss)
    assert conic.conic_nodes(lib) == [] and conic.conic_nodes(sym) == list(range(5))
    d_lib, d_sym = lib.solve_dual().objective, sym.solve_dual().objective
    primal = lib.solve_exact().objective
    assert d_sym == pytest.approx(d_lib, rel=1e-6)
    assert d_sym == pytest.approx(primal, rel=1e-6)


@pytest.mark.skipif(not hasattr(gm.Loss, "conjugate"), reason="library conjugates not present")
def test_node_conjugate_value_matches_library_conjugate(rng):
    """node_conjugate_value of a symbolic twin == the library loss's own conjugate."""
    for name, lib, sym, _, points in _library_cases(rng):
        m_sym = _one_node_model(2, sym)
        for s in points + [rng.normal(size=2) * 0.3]:
            ref = lib.conjugate(s)
            val = conic.node_conjugate_value(m_sym, 0, s)
            if np.isinf(ref):
                assert val == np.inf, (name, s, val)
            else:
                assert val == pytest.approx(ref, rel=1e-6, abs=1e-8), (name, s)


@pytest.mark.parametrize(
    "model_fn,sense",
    [(f, "minimize") for f in MODELS] + [(_model_psd, "maximize")]
    + [pytest.param(f, "maximize", marks=pytest.mark.slow) for f in MODELS if f is not _model_psd],
    ids=lambda v: v if isinstance(v, str) else v.__name__[7:])
def test_conic_weights_recover_primal(rng, model_fn, sense):
    """Weights read from the balance multiplier of the stacked conic dual are primal optimal:
    feasible and P(w) == P* (relative 1e-6); the sign is the same for Maximize and Minimize."""
    model = model_fn(gm.Norm2(), rng)
    ref = model.solve_exact()
    n, E, d = model.num_nodes, model.num_edges, model.dim
    U = cp.Variable((E, d))
    nodes = list(range(n))
    expr, cons = conic.conic_dual_terms(model, nodes, -(model.incidence.T @ U))
    cost, edge_cons = model.penalty.conjugate_expression(U, model.lam * model.edge_weights)
    obj = cp.Maximize(expr - cost) if sense == "maximize" else cp.Minimize(cost - expr)
    cp.Problem(obj, cons + edge_cons).solve(solver="CLARABEL", **CLARABEL_TIGHT)
    W = conic.conic_weights(model, nodes, cons)
    assert W.shape == (n, d)
    assert model.constraint_violations(W).max() <= 1e-7
    assert model.objective(W) == pytest.approx(ref.objective, rel=1e-6, abs=1e-8)


def test_solve_dual_follows_parameter_values_in_symbolic_losses():
    """A CVXPY Parameter inside a symbolic loss: changing its value recompiles the dual (the
    conic data is baked in as constants), so solve_dual keeps matching solve_exact."""
    a = cp.Parameter(2, value=np.array([1.0, -1.0]))
    model = gm.GTVModel(_graph(3), dim=2, lam=0.3)
    model.set_loss(0, lambda x: cp.sum_squares(x - a) + cp.sum(cp.exp(x)))
    model.set_loss(2, gm.QuadraticLoss([0.5, 0.5]))
    for val in ([1.0, -1.0], [-2.0, 0.5]):
        a.value = np.array(val)
        primal = model.solve_exact().objective
        assert model.solve_dual().objective == pytest.approx(primal, rel=1e-6)


def test_docs_example_runs(tmp_path, monkeypatch):
    """The python blocks of the "Automatic conjugation" section of docs/certificates.md."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "certificates.md").read_text(
        encoding="utf-8")
    section = text.split("## Automatic conjugation", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    assert blocks
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/certificates.md", "exec"), namespace)


def test_affine_loss_has_no_cone_rows():
    """L = a^T x: the conic form has no rows, (D_s) is just ``c(s) = 0``, L* = iota{s = a}."""
    a = np.array([0.3, -0.4])
    model = gm.GTVModel(nx.path_graph(2), dim=2, lam=1.0)
    model.set_loss(0, lambda x: a @ x)
    model.set_loss(1, gm.QuadraticLoss([1.0, 2.0]))
    assert conic.node_conic_data(model, 0).num_rows == 0
    assert conic.node_conjugate_value(model, 0, a) == 0.0
    assert conic.node_conjugate_value(model, 0, a + 0.1) == np.inf
    assert _dual_conjugate(model, 0, a + 0.1) == np.inf
    assert model.solve_dual().objective == pytest.approx(model.solve_exact().objective,
                                                         rel=1e-6)


@pytest.mark.filterwarnings("ignore:You are solving a parameterized problem that is not DPP")
def test_non_dpp_parameters_are_supported():
    """``p^2 ||x||^2`` is not DPP in ``p``: the numeric conjugate is recompiled on each solve and
    the conic data is recomputed when ``p`` changes; both follow the value."""
    p = cp.Parameter(nonneg=True, value=2.0)
    model = _one_node_model(2, lambda x: (p * p) * cp.sum_squares(x))
    s = np.array([0.6, -0.8])
    for val in (2.0, 1.0):
        p.value = val
        exact = s @ s / (4 * val**2)
        assert conic.node_conjugate_value(model, 0, s) == pytest.approx(exact, rel=1e-7)
        assert _dual_conjugate(model, 0, s) == pytest.approx(exact, rel=1e-7)


def test_solve_dual_symbolic_with_scs(rng):
    """The conic data is Clarabel's (svec convention included); the dual problem built from it
    is ordinary CVXPY and solves with SCS as well."""
    model = _model_psd(gm.Norm2(), rng)
    primal = model.solve_exact().objective
    assert model.solve_dual(solver="SCS").objective == pytest.approx(primal, rel=1e-6)


_COORD = st.floats(-2.0, 3.0).filter(lambda v: abs(v) > 0.05)  # s_j = 0: unattained sup
_EXP_MODEL = _one_node_model(2, lambda x: cp.sum(cp.exp(x)))  # built once, re-solved (DPP)


@settings(deadline=None, max_examples=15)
@given(s0=_COORD, s1=_COORD)
def test_exp_conjugate_property(s0, s1):
    """``sum(exp)``: exp*(t) = t log t - t for t > 0, +inf for t < 0.  The numeric conjugate
    (P_s), the conic dual (D_s) and the closed form agree everywhere, +inf included."""
    model = _EXP_MODEL
    s = np.array([s0, s1])
    exact = np.inf if (s < 0).any() else float(np.sum(s * np.log(s) - s))
    for val in (conic.node_conjugate_value(model, 0, s), _dual_conjugate(model, 0, s)):
        if np.isinf(exact):
            assert val == np.inf
        else:
            assert val == pytest.approx(exact, rel=1e-6, abs=1e-8)


def test_stacked_conjugates_bound_every_node_and_their_sum():
    """One stacked solve of (P_S): ``value_k + tau`` bounds each node's conjugate from above
    (closed forms here) and ``tau`` is at least what node-by-node runs charge; None when a
    demand lies outside a conjugate's domain (the node-by-node path tells which)."""
    model = gm.GTVModel(nx.path_graph(3), dim=2)
    model.set_loss(0, lambda x: cp.sum(cp.exp(x)))
    model.set_loss(2, lambda x: cp.sum_squares(x - A2))
    S = np.array([[1.0, 2.0], [0.4, 0.2]])
    exact = np.array([sum(t * np.log(t) - t for t in S[0]), S[1] @ A2 + S[1] @ S[1] / 4])
    vals, tau = conic.stacked_conjugates(model, [0, 2], S)
    assert (vals + tau >= exact - 1e-12).all() and vals.sum() + tau >= exact.sum() - 1e-12
    np.testing.assert_allclose(vals, exact, rtol=1e-7, atol=1e-9)
    separate = [conic.node_conjugate(model, i, S[k])[1] for k, i in enumerate([0, 2])]
    assert sum(separate) <= tau <= 1e-7
    assert conic.stacked_conjugates(model, [0, 2], [[-1.0, 1.0], [0.4, 0.2]]) is None
    assert conic.stacked_conjugates(model, [], np.zeros((0, 2)))[0].shape == (0,)


def test_certificate_of_symbolic_nodes_is_tight():
    """A certificate of a model whose every node is symbolic bounds their conjugates from
    repaired dual points (duality.conic_bounds, no solver tolerance left to subtract) and stays
    tight at the exact solution."""
    rng = np.random.default_rng(0)
    model = gm.GTVModel(nx.path_graph(12), dim=2, penalty=gm.Norm2(), lam=0.1)
    for i in range(12):
        X, y = rng.normal(size=(4, 2)), rng.normal(size=4)
        model.set_loss(i, lambda x, X=X, y=y: cp.sum_squares(y - X @ x) / 4)
    sol = model.solve_exact(certify=False)
    cert = model.certify(sol.weights, sol.flows)
    assert cert.success_at(1e-8) and cert.gap >= 0
    assert value_mod.dual_value(model, sol.flows, np.inf)["conic_tol"] == 0.0
