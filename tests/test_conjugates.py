"""Conjugates of the library (issue 3, item 1) against their definition sup_x s^T x - h(x).

The reference value is computed independently by CVXPY from the *primal* expressions of the
objects (``loss.expression``, ``penalty.rows_expression``, ``constraint.constraints``); the
code under test uses the conjugate formulas (closed forms, or the infimal-convolution problem
of ``conjugate_expression``).  Tolerance: relative 1e-6.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel.terms.losses import DataFitLoss
from gtvmodel.testing import library_losses

D = 3
RTOL = 1e-6


def sup_value(h, s: np.ndarray, d: int = D, cons=None) -> float:
    """sup_x s^T x - h(x) by CVXPY; +inf if unbounded."""
    x = cp.Variable(d)
    prob = cp.Problem(cp.Maximize(s @ x - h(x)), (cons or (lambda x: []))(x))
    prob.solve(solver="CLARABEL")
    if prob.status in (cp.UNBOUNDED, cp.UNBOUNDED_INACCURATE):
        return float("inf")
    assert prob.status == cp.OPTIMAL, prob.status
    return float(prob.value)


def close(a: float, b: float, rtol: float = RTOL) -> bool:
    return abs(a - b) <= rtol * max(1.0, abs(b))


def make_losses(rng):
    """Every library loss with data (gtvmodel.testing's registry) under four regularizations,
    and the zero loss's three."""
    out = []
    for reg in ({}, {"l2": 0.3}, {"l1": 0.2}, {"l1": 0.1, "l2": 0.2}):
        out += [ls for ls in library_losses(rng, D, 5, **reg).values() if ls.has_data]
    out += [gm.ZeroLoss(l1=0.4), gm.ZeroLoss(l2=0.5), gm.ZeroLoss(l1=0.3, l2=0.2)]
    return out


def interior_point(loss, rng) -> np.ndarray:
    """A point in the interior of dom h*: s = a subgradient of h at a random x, shrunk."""
    if isinstance(loss, DataFitLoss):
        lo, hi = loss._ell_conj_bounds(loss.y, loss._row_param())
        lo = np.broadcast_to(np.maximum(lo, -3.0), (loss.m,))
        hi = np.broadcast_to(np.minimum(hi, 3.0), (loss.m,))
        v = lo + (hi - lo) * rng.uniform(0.2, 0.8, size=loss.m)
        s = loss.X.T @ v / loss.m
    elif isinstance(loss, gm.ZeroLoss):
        s = np.zeros(D)
    else:  # a gradient of the (smooth) unregularized part at a random point
        s = loss._base_gradient(rng.normal(size=D))
    return s + 0.5 * loss.l1 * rng.uniform(-1, 1, size=D) + loss.l2 * rng.normal(size=D)


def test_loss_conjugates_interior(rng):
    for loss in make_losses(rng):
        s = interior_point(loss, rng)
        got = loss.conjugate(s)
        ref = sup_value(loss.expression, s)
        assert close(got, ref), (loss, s, got, ref)


def test_loss_conjugates_boundary(rng):
    """On the boundary of the domain (polyhedral rows: attained), and at the ends of the
    logistic entropy domain (limits).  With m = d and X invertible the row duals are unique,
    v = m X^{-T} s, so L*(s) = (1/m) sum_r ell*(v_r) exactly."""
    X = rng.normal(size=(D, D))
    yb = np.array([1.0, -1.0, 1.0])
    y = rng.normal(size=D)
    for loss, v in [
        (gm.HingeLoss(X, yb), -yb),           # y v = -1 (lower end)
        (gm.HingeLoss(X, yb), np.array([0.0, 0.5, 0.0])),  # y v = 0 (upper end)
        (gm.AbsoluteLoss(X, y), np.array([1.0, -1.0, 1.0])),
        (gm.HuberLoss(X, y, M=0.7), np.array([1.4, -1.4, 0.3])),
        (gm.LogisticLoss(X, yb), -yb),         # b = 1: value 0 (limit)
        (gm.LogisticLoss(X, yb), np.array([0.0, 0.0, -0.5])),  # b = 0 at two rows
    ]:
        s = X.T @ v / loss.m
        got = loss.conjugate(s)
        ref = float(np.sum(loss.ell_conjugate(v, loss.y, loss._row_param())) / loss.m)
        if not isinstance(loss, gm.LogisticLoss):
            ref_sup = sup_value(loss.expression, s)
            assert close(ref, ref_sup, 1e-6), (loss, ref, ref_sup)
        assert got <= ref + 1e-7 * max(1, abs(ref)), (loss, got, ref)
        assert close(got, ref, 1e-6), (loss, got, ref)
    # zero loss with l1: the box boundary ||s||_inf = eta
    z = gm.ZeroLoss(l1=0.5)
    assert z.conjugate(np.array([0.5, -0.5, 0.2])) == 0.0


def test_loss_conjugates_outside_domain(rng):
    X = rng.normal(size=(5, D))
    yb = np.array([1.0, -1.0, 1.0, 1.0, -1.0])
    y = rng.normal(size=5)
    big = 50.0 * np.ones(D)
    for loss in [gm.LogisticLoss(X, yb), gm.HingeLoss(X, yb), gm.AbsoluteLoss(X, y),
                 gm.HuberLoss(X, y, M=0.5), gm.ZeroLoss(), gm.ZeroLoss(l1=0.3)]:
        assert loss.conjugate(big) == np.inf, loss
        assert sup_value(loss.expression, big) == np.inf
    # squared loss with m < d: s outside range(X^T)
    X2 = rng.normal(size=(2, D))
    sq = gm.SquaredLoss(X2, y[:2])
    null = np.cross(X2[0], X2[1])
    s_in = X2.T @ rng.normal(size=2)
    assert close(sq.conjugate(s_in), sup_value(sq.expression, s_in))
    assert sq.conjugate(s_in + 0.1 * null) == np.inf
    assert sup_value(sq.expression, s_in + 0.1 * null) == np.inf


def test_row_conjugates(rng):
    """ell*(v) = sup_t v t - ell(t), row by row, for every data-fit class."""
    for cls, y, p in [(gm.SquaredLoss, 0.7, None), (gm.LogisticLoss, -1.0, None),
                      (gm.HingeLoss, 1.0, None), (gm.AbsoluteLoss, -0.4, None),
                      (gm.HuberLoss, 0.3, 0.8)]:
        yv = np.array([y])
        pv = None if p is None else np.array([p])
        lo, hi = cls._ell_conj_bounds(yv, pv)
        lo = float(np.maximum(lo, -2.5)[0] if np.ndim(lo) else max(lo, -2.5))
        hi = float(np.minimum(hi, 2.5)[0] if np.ndim(hi) else min(hi, 2.5))
        for v in np.linspace(lo + 0.1 * (hi - lo), hi - 0.1 * (hi - lo), 4):
            t = cp.Variable(1)
            prob = cp.Problem(cp.Maximize(v * t[0] - cp.sum(cls._ell_cvx(t, yv, pv))))
            prob.solve(solver="CLARABEL")
            got = float(cls.ell_conjugate(np.array([v]), yv, pv)[0])
            assert close(got, prob.value), (cls, v, got, prob.value)
        assert cls.ell_conjugate(np.array([hi + 1.0]), yv, pv)[0] == (
            np.inf if np.isfinite(cls._ell_conj_bounds(yv, pv)[1]).all() else
            cls.ell_conjugate(np.array([hi + 1.0]), yv, pv)[0])


def test_conjugate_expression_matches_numeric(rng):
    """The CVXPY form (used by the dual problem) equals the numeric conjugate."""
    for loss in make_losses(rng)[::3]:
        s = interior_point(loss, rng)
        cost, cons = loss.conjugate_expression(cp.Constant(s))
        prob = cp.Problem(cp.Minimize(cost), cons)
        prob.solve(solver="CLARABEL")
        assert close(prob.value, loss.conjugate(s)), loss


def test_conjugate_bad_shape():
    with pytest.raises(gm.DataError):
        gm.QuadraticLoss([1.0, 2.0]).conjugate([1.0, 2.0, 3.0])
    with pytest.raises(gm.DataError):
        gm.QuadraticLoss([1.0, 2.0]).conjugate([1.0, np.nan])


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 10_000), m=st.integers(1, 6), kappa=st.sampled_from([0.0, 0.3]))
def test_squared_closed_form_property(seed, m, kappa):
    """Closed form (eigen-decomposition) vs the generic inf-convolution problem, including
    rank-deficient X (m < d) where s must lie in range(X^T)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, D))
    y = rng.normal(size=m)
    loss = gm.SquaredLoss(X, y, l2=kappa)
    s = X.T @ rng.normal(size=m) + (kappa > 0) * rng.normal(size=D)
    cost, cons = loss.conjugate_expression(cp.Constant(s))
    prob = cp.Problem(cp.Minimize(cost), cons)
    prob.solve(solver="CLARABEL")
    assert prob.status == cp.OPTIMAL
    assert close(loss.conjugate(s), prob.value, 1e-6)


# ------------------------------------------------------------------ penalties
PENALTIES = [gm.Norm2(), gm.Norm1(), gm.NormInf(), gm.NormP(3), gm.SquaredNorm2(),
             gm.QuadForm(np.array([[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]]))]


def _phi_expr(pen, v):
    if isinstance(pen, gm.NormP) and pen.p not in (1.0, 2.0) and np.isfinite(pen.p):
        return cp.pnorm(v, pen.p)
    return cp.sum(pen.rows_expression(cp.reshape(v, (1, D), order="C")))


@pytest.mark.parametrize("pen", PENALTIES, ids=repr)
def test_penalty_conjugates(pen, rng):
    lamA = np.array([0.7, 1.3, 0.4])
    U = rng.normal(size=(3, D))
    if pen.is_norm:  # inside, on the boundary, outside the capacity
        dn = pen.dual_norm(U)
        U = U * (np.array([0.5, 1.0, 1.5]) * lamA / dn)[:, None]
    got = pen.conjugate_rows(U, lamA)
    for e in range(3):
        ref = sup_value(lambda v, e=e: lamA[e] * _phi_expr(pen, v), U[e])
        if pen.is_norm and e == 2:
            assert got[e] == np.inf and ref == np.inf
        else:
            assert close(got[e], ref, 1e-6), (pen, e, got[e], ref)
    # CVXPY form
    Uv = cp.Variable((3, D))
    if pen.is_norm:
        U = U[:2]
        lamA = lamA[:2]
        Uv = cp.Variable((2, D))
    cost, cons = pen.conjugate_expression(Uv, lamA)
    prob = cp.Problem(cp.Minimize(cost), cons + [Uv == U])
    prob.solve(solver="CLARABEL")
    assert close(prob.value, float(pen.conjugate_rows(U, lamA).sum()), 1e-6)


def test_penalty_conjugate_lambda_zero():
    U = np.array([[0.0, 0.0, 0.0], [1e-3, 0.0, 0.0]])
    for pen in PENALTIES:
        got = pen.conjugate_rows(U, 0.0)
        assert got[0] == 0.0 and got[1] == np.inf, pen


# ------------------------------------------------------------------ constraints
CONSTRAINTS = [gm.Box(-0.5, [1.0, 2.0, 0.3]), gm.Box(-np.inf, 1.0), gm.Box(0.0, np.inf),
               gm.NonNeg(), gm.NormBall(1.5), gm.NormBall(0.7, p=1), gm.NormBall(2.0, p=np.inf)]


@pytest.mark.parametrize("con", CONSTRAINTS, ids=repr)
def test_support_functions(con, rng):
    cases = [rng.normal(size=D), -np.abs(rng.normal(size=D)), np.abs(rng.normal(size=D)),
             np.zeros(D)]
    for s in cases:
        got = con.support(s)
        ref = sup_value(lambda x: 0 * cp.sum(x), s, cons=con.constraints)
        if np.isinf(ref):
            assert got == np.inf, (con, s)
        else:
            assert close(got, ref, 1e-6), (con, s, got, ref)
        if np.isfinite(got):
            Sv = cp.Variable(D)
            cost, cons = con.support_expression(Sv)
            prob = cp.Problem(cp.Minimize(cost), cons + [Sv == s])
            prob.solve(solver="CLARABEL")
            assert close(prob.value, got, 1e-6)
    stacked = np.vstack(cases)
    assert np.allclose(con.support(stacked), [con.support(s) for s in cases])


def test_loss_with_constraint_conjugate_via_dual_parts(rng):
    """(L + iota_C)* by infimal convolution equals sup_{x in C} s^T x - L(x)."""
    import networkx as nx

    from gtvmodel.duality.dual import node_conjugate_parts

    X = rng.normal(size=(4, D))
    y = rng.normal(size=4)
    model = gm.GTVModel(nx.empty_graph(1), D)
    model.set_loss(0, gm.HuberLoss(X, y, M=0.5, l1=0.1))
    box = gm.Box(-0.3, 0.4)
    model.add_constraint(0, box)
    model.add_constraint(0, gm.NormBall(0.5))
    s = 3.0 * rng.normal(size=D)
    parts = node_conjugate_parts(model, np.array([0]))
    total = sum(p.contrib for p in parts)
    prob = cp.Problem(cp.Minimize(sum(p.cost for p in parts)),
                      [c for p in parts for c in p.constraints] + [total == s[None, :]])
    prob.solve(solver="CLARABEL")
    loss = model.loss(0)
    ref = sup_value(loss.expression, s,
                    cons=lambda x: box.constraints(x) + gm.NormBall(0.5).constraints(x))
    assert close(prob.value, ref, 1e-6)
    # numeric evaluation of the parts (projected into the domains) agrees
    contrib = sum(p.evaluate()[0] for p in parts)
    cost = sum(p.evaluate()[1] for p in parts)
    assert np.abs(contrib[0] - s).max() < 1e-6
    assert close(float(cost[0]), ref, 1e-6)
