"""Stable norm evaluation (gtvmodel._norms) and its users: penalties, capacities, norm balls.

References are computed in decimal arithmetic with 50 significant digits and an unbounded
exponent range (no scaling, no underflow or overflow), so they are independent of the
scaled algorithm under test.
"""

from __future__ import annotations

import decimal
import importlib
import math
import warnings
from decimal import Decimal

import cvxpy as cp
import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gtvmodel as gm
from gtvmodel.errors import DataError, PenaltyError

EPS = np.finfo(float).eps
INF = float("inf")
CTX = decimal.Context(prec=50, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
FAST = settings(deadline=None, max_examples=40)


def _norms():
    """The module under test (imported lazily so that the public-API regression tests below
    also run against a tree without it)."""
    return importlib.import_module("gtvmodel._norms")


# ----------------------------------------------------------------------------- references
def ref_norm(v, p: float) -> Decimal:
    """``||v||_p`` in 50-digit decimal arithmetic."""
    with decimal.localcontext(CTX):
        a = [abs(Decimal(float(x))) for x in np.ravel(v)]
        a = [x for x in a if x != 0]
        if not a:
            return Decimal(0)
        if math.isinf(p) or len(a) == 1:
            return max(a)
        if p == 1:
            return sum(a, Decimal(0))
        P = Decimal(float(p))
        return sum((x**P for x in a), Decimal(0)) ** (Decimal(1) / P)


def ref_q(p: float) -> float:
    if p == 1:
        return INF
    if math.isinf(p):
        return 1.0
    with decimal.localcontext(CTX):
        return float(Decimal(p) / (Decimal(p) - 1))


def at_most(ref: Decimal, x: float) -> bool:
    """``ref <= x`` up to the reference's own rounding (45 digits)."""
    with decimal.localcontext(CTX):
        return ref * (1 - Decimal("1e-45")) <= Decimal(float(x))


def rel_err(x: float, ref: Decimal) -> float:
    """``|x - ref| / ref`` (0 for ``ref = 0 = x``)."""
    if ref == 0:
        return 0.0 if x == 0 else INF
    if not math.isfinite(x):
        return INF
    with decimal.localcontext(CTX):
        return float(abs(Decimal(x) - ref) / ref)


# ----------------------------------------------------------------------------- strategies
def _entry(t) -> float:
    mant, exp, neg, zero = t
    return 0.0 if zero else (-1.0 if neg else 1.0) * mant * 10.0**exp


entries = st.tuples(st.floats(1.0, 9.99), st.integers(-300, 300), st.booleans(),
                    st.integers(0, 5).map(lambda k: k == 0)).map(_entry)
# rows whose entries span many orders of magnitude (and zero rows)
rows = st.integers(1, 6).flatmap(lambda d: st.lists(st.lists(entries, min_size=d, max_size=d),
                                                    min_size=1, max_size=4))
# rows of moderate magnitudes (for the projections and capacity tests)
moderate = st.tuples(st.floats(1.0, 9.99), st.integers(-8, 8), st.booleans()).map(
    lambda t: (-1.0 if t[2] else 1.0) * t[0] * 10.0**t[1])
exps = st.one_of(st.floats(1.0001, 1000.0), st.sampled_from([1.0, 2.0, INF, 1e6, 1.0000001]))
extreme = st.one_of(st.floats(1.0001, 1.01), st.floats(100.0, 1000.0),
                    st.sampled_from([1.0001, 1.000001, 500.0, 1e4, 1e6]))


# ============================================================================ the module
def test_dual_exponent():
    de = _norms().dual_exponent
    assert de(1) == INF and de(1.0) == INF
    assert de(INF) == 1.0 and de(2) == 2.0
    assert de(1.0001) == pytest.approx(10001.0, rel=1e-12)
    assert de(3) == pytest.approx(1.5)
    for p in (1.0001, 1.5, 3.0, 500.0, 1e6):
        q = de(p)
        assert abs(1 / p + 1 / q - 1) <= 4 * EPS
        assert de(q) == pytest.approx(p, rel=1e-9)
    with pytest.raises(ValueError):
        de(0.5)


@FAST
@given(V=rows, p=exps)
def test_norm_rows_matches_reference(V, p):
    nm = _norms()
    V = np.array(V, dtype=float)
    got = nm.norm_rows(V, p)
    up = nm.norm_rows_upper(V, p)
    assert got.shape == (V.shape[0],) and up.shape == (V.shape[0],)
    for k in range(V.shape[0]):
        ref = ref_norm(V[k], p)
        assert rel_err(float(got[k]), ref) <= 4 * EPS, (V[k], p, got[k], ref)
        # the upper bound is one and is tight
        assert at_most(ref, up[k])
        assert rel_err(float(up[k]), ref) <= (20 + 2 * V.shape[1]) * EPS
        if ref == 0:
            assert got[k] == 0 and up[k] == 0
    # 1-d input: one value
    assert float(nm.norm_rows(V[0], p)) == got[0]


@pytest.mark.parametrize("p", [1.0, 1.0000001, 1.0001, 2.0, 3.0, 500.0, 1e6, INF])
@pytest.mark.parametrize("scale", [1e-300, 1e-160, 1.0, 1e160, 1e300])
def test_norm_rows_extreme_magnitudes(p, scale):
    nm = _norms()
    V = scale * np.array([[1.0, 1.0, 1.0], [3.0, -4.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1e-5, 2.0]])
    got = nm.norm_rows(V, p)
    for k in range(len(V)):
        assert rel_err(float(got[k]), ref_norm(V[k], p)) <= 4 * EPS, (k, got[k])
    assert got[2] == 0.0


def test_norm_rows_hypot_range():
    nm = _norms()
    V = np.array([[1e200, 1e200], [1e-200, 1e-200], [3e-310, 4e-310]])
    np.testing.assert_allclose(nm.norm_rows(V, 2), [np.sqrt(2) * 1e200, np.sqrt(2) * 1e-200,
                                                    5e-310], rtol=4 * EPS)
    assert nm.norm_rows(np.array([[np.inf, 1.0]]), 3)[0] == np.inf
    assert np.isnan(nm.norm_rows(np.array([[np.nan, 1.0]]), 3)[0])
    assert nm.norm_rows(np.zeros((0, 3)), 2).shape == (0,)


# ============================================================ capacities of NormP penalties
@FAST
@given(p=extreme, data=st.data())
def test_capacity_far_outside_is_infeasible_and_projection_repairs(p, data):
    """Flows at 90x capacity must fail the capacity test; the projection repairs them."""
    pen = gm.NormP(p)
    q = ref_q(p)
    d = data.draw(st.integers(1, 5))
    U = np.array(data.draw(st.lists(st.lists(moderate, min_size=d, max_size=d),
                                    min_size=1, max_size=4)))
    cap = np.array([float(ref_norm(u, q)) for u in U]) / 90.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        conj = pen.conjugate_rows(U, cap)
        assert np.all(conj == np.inf), (p, U, cap, pen.dual_norm(U))
        dn = pen.dual_norm(U)
        for k in range(len(U)):
            assert rel_err(float(dn[k]), ref_norm(U[k], q)) <= 1e-12
        P = pen.project_dual_ball(U, cap)
    assert np.all(np.isfinite(P))
    assert np.all(pen.conjugate_rows(P, cap) == 0.0)
    for k in range(len(U)):  # truly within capacity
        assert at_most(ref_norm(P[k], q), cap[k]), (p, k)
        assert rel_err(float(cap[k]), ref_norm(P[k], q)) <= 1e-9
    # dual_update of a norm penalty is the same projection
    np.testing.assert_array_equal(pen.dual_update(U, 0.5, cap), P)


@pytest.mark.parametrize("p", [1.0001, 1.000001, 500.0, 1e6])
def test_capacity_regression_audit_cases(p):
    """The audit's cases: flows 90x over capacity passed for p near 1 and large p."""
    pen = gm.NormP(p)
    q = ref_q(p)
    rng = np.random.default_rng(3)
    for scale in (1e-3, 1.0, 1e3):
        U = scale * rng.uniform(0.5, 2.0, size=(5, 4)) * rng.choice([-1.0, 1.0], (5, 4))
        cap = np.array([float(ref_norm(u, q)) for u in U]) / 90.0
        assert np.all(pen.conjugate_rows(U, cap) == np.inf)
        assert np.all(pen.dual_norm(U) > cap)


def test_capacity_on_boundary_is_accepted():
    """A flow computed on the capacity (rounding either side) passes."""
    for p in (1.0001, 1.5, 2.0, 3.0, 500.0):
        pen = gm.NormP(p)
        U = np.random.default_rng(1).normal(size=(6, 3))
        cap = pen.dual_norm(U)
        assert np.all(pen.conjugate_rows(U, cap) == 0.0)
        assert np.all(pen.conjugate_rows(U, cap * (1 - 1e-12)) == np.inf)


# ============================================================================ norm balls
@FAST
@given(p=st.one_of(exps, extreme), data=st.data())
def test_normball_violation_just_outside_and_inside(p, data):
    d = data.draw(st.integers(1, 5))
    w = np.array(data.draw(st.lists(moderate, min_size=d, max_size=d)))
    nrm = float(ref_norm(w, p))
    out, inside = gm.NormBall(nrm / (1 + 1e-9), p), gm.NormBall(nrm * (1 + 1e-9), p)
    v = out.violation(w)
    assert v > 0 and v == pytest.approx(nrm - out.radius, rel=1e-5)
    assert inside.violation(w) == 0.0
    assert gm.NormBall(nrm / 90.0, p).violation(w) == pytest.approx(nrm * 89 / 90, rel=1e-12)


@pytest.mark.parametrize("p", [1.0001, 1.000001, 500.0, 1e4, 1e6])
def test_normball_violation_regression(p):
    w = np.array([0.9, -0.8, 0.95, 0.3])
    nrm = float(ref_norm(w, p))
    assert gm.NormBall(nrm / 90.0, p).violation(w) == pytest.approx(nrm * 89 / 90, rel=1e-12)
    big = w * 1e200
    assert gm.NormBall(nrm * 1e200 / 90.0, p).violation(big) > 0


@FAST
@given(p=st.one_of(exps, extreme), data=st.data())
def test_normball_support_is_a_tight_upper_bound(p, data):
    r = data.draw(st.sampled_from([1e-200, 0.3, 1.0, 7.5, 1e150]))
    d = data.draw(st.integers(1, 5))
    S = np.array(data.draw(st.lists(st.lists(entries, min_size=d, max_size=d),
                                    min_size=1, max_size=3)))
    ball = gm.NormBall(r, p)
    q = ref_q(p)
    got = ball.support(S)
    for k in range(len(S)):
        with decimal.localcontext(CTX):
            ref = Decimal(r) * ref_norm(S[k], q)
        if ref == 0:
            assert got[k] == 0
            continue
        if ref > Decimal(float(np.finfo(float).max)):
            assert got[k] == np.inf
            continue
        assert at_most(ref, got[k])
        with decimal.localcontext(CTX):  # relative, or a few ulps of the subnormal range
            assert (rel_err(float(got[k]), ref) <= (24 + 2 * d) * EPS
                    or Decimal(float(got[k])) - ref <= Decimal(4 * 5e-324))
    assert ball.support(S[0]) == got[0]


@pytest.mark.parametrize("p", [1.0001, 1.000001, 500.0, 1e6])
def test_normball_support_regression(p):
    s = np.array([0.9, -0.8, 0.95, 0.3])
    ball = gm.NormBall(2.0, p)
    ref = 2.0 * float(ref_norm(s, ref_q(p)))
    assert ball.support(s) == pytest.approx(ref, rel=1e-12)


def _check_projection(P, U, r, p):
    """Feasible by the reference norm and optimal: ``<a - x, x> = r ||a - x||_q*`` (the
    variational inequality of the projection onto ``{||x||_p <= r}``)."""
    q = ref_q(p)
    for k in range(len(U)):
        assert at_most(ref_norm(P[k], p), r[k]), (k, p)
        a, x = U[k], P[k]
        if ref_norm(a, p) <= Decimal(float(r[k])) * (1 + Decimal("1e-14")):
            # inside (or on the sphere up to rounding): unchanged, or shrunk by a few ulps
            np.testing.assert_allclose(x, a, rtol=1e-13, atol=0)
            assert np.all(np.abs(x) <= np.abs(a))
            continue
        assert np.all(np.sign(x) * np.sign(a) >= 0) and np.all(np.abs(x) <= np.abs(a))
        g = a - x
        lhs = float((g * x).sum())
        rhs = float(r[k]) * float(ref_norm(g, q))
        scale = float(np.abs(a).max()) * float(np.abs(g).max()) * len(a)
        assert abs(lhs - rhs) <= 1e-9 * scale, (k, p, lhs, rhs)
        if r[k] > 0:
            assert rel_err(float(r[k]), ref_norm(x, p)) <= 1e-9


@FAST
@given(p=st.one_of(extreme, st.floats(1.1, 50.0)), data=st.data())
def test_lq_ball_projection(p, data):
    d = data.draw(st.integers(1, 5))
    U = np.array(data.draw(st.lists(st.lists(moderate, min_size=d, max_size=d),
                                    min_size=1, max_size=4)))
    f = data.draw(st.sampled_from([1e-12, 0.01, 0.5, 0.999, 1.5]))
    r = np.array([float(ref_norm(u, p)) for u in U]) * f
    P = gm.NormBall.project_rows(U, r, p)
    assert np.all(np.isfinite(P))
    _check_projection(P, U, r, p)


@pytest.mark.parametrize("p", [1.000001, 1.0001, 1.5, 3.0, 1e3, 1e6])
def test_lq_ball_projection_hard_rows(p):
    """Entries of very different magnitude, tiny radii, huge rows."""
    U = np.array([[1.0, 1e-8, 3e-4, -0.7],
                  [1e-12, 5.0, 1e-300, 0.0],
                  [1e150, -1e140, 1e100, 1e149],
                  [1e-150, 2e-150, -3e-151, 1e-160],
                  [2.0, 2.0, 2.0, 2.0],
                  [1.0, 0.0, 0.0, 0.0]])
    for r in (1e-280, 1e-6, 0.3, 1.0):
        rr = np.full(len(U), r)
        P = gm.NormBall.project_rows(U, rr, p)
        assert np.all(np.isfinite(P)), (p, r, P)
        _check_projection(P, U, rr, p)


@pytest.mark.parametrize("q", [1.0, 2.0, INF])
def test_closed_form_projections_are_feasible(q):
    rng = np.random.default_rng(7)
    U = rng.normal(size=(50, 7)) * 10.0 ** rng.integers(-200, 200, size=(50, 1))
    r = np.array([float(ref_norm(u, q)) for u in U]) * rng.uniform(0.01, 0.999, size=50)
    P = gm.NormBall.project_rows(U, r, q)
    for k in range(len(U)):
        assert at_most(ref_norm(P[k], q), r[k])
        assert rel_err(float(r[k]), ref_norm(P[k], q)) <= 1e-12
    P0 = gm.NormBall.project_rows(U, np.zeros(50), q)
    assert np.all(P0 == 0)


radius_factors = st.sampled_from([0.0, 1e-300, 1e-3, 0.5, 1 - 1e-15, 1.0, 1 + 1e-15, 2.0, 1e300])


def _rows_and_radii(U, data):
    """The rows as an array, their 50-digit 2-norms and radii drawn at, just inside and just
    outside those norms (``radius_factors``; overflowing radii become 1e300)."""
    U = np.array(U, dtype=float)
    refs = [ref_norm(u, 2.0) for u in U]
    f = np.array([data.draw(radius_factors) for _ in U])
    with np.errstate(over="ignore", under="ignore"):
        r = np.array([float(x) for x in refs]) * f
    return U, refs, np.where(np.isfinite(r), r, 1e300)


@settings(deadline=None, max_examples=150)
@given(U=rows, data=st.data())
def test_l2_projection_fast_path_is_inside_for_certain(U, data):
    """The two-pass l2 projection (``Norm2``'s dual update, :func:`_project_l2_fast`): on rows
    spanning 1e-300..1e300 (zero rows included) and radii at, just inside and just outside the
    exact norm, every row ends inside its ball by the 50-digit reference, rows inside by more
    than the rounding bound are returned unchanged, and the others are ``r u / ||u||`` to 1e-13.
    """
    U, refs, r = _rows_and_radii(U, data)
    P = gm.Norm2().dual_update(U, 1.0, r)
    assert np.all(np.isfinite(P))
    for k in range(len(U)):
        assert at_most(ref_norm(P[k], 2.0), r[k]), (U[k], r[k], P[k])
        with decimal.localcontext(CTX):
            inside = refs[k] * (1 + Decimal("1e-13")) < Decimal(float(r[k]))
        if inside:
            np.testing.assert_array_equal(P[k], U[k])
        elif r[k] > 0 and refs[k] > 0:
            want = [float(Decimal(float(u)) * Decimal(float(r[k])) / refs[k]) for u in U[k]]
            # subnormal results carry an absolute precision of one ulp (5e-324): a 1e-311
            # row came back 9.999999999995e-312, 4.9e-13 relative
            tiny = 4 * np.nextafter(0.0, 1.0)
            np.testing.assert_allclose(P[k], want, rtol=1e-13, atol=max(r[k] * 1e-13, tiny))
        else:
            assert np.all(P[k] == 0)


def test_l2_projection_fast_path_needs_no_repair(monkeypatch):
    """The fast path's margin covers its rounding: on ordinary rows no row is sent to
    ``enforce_ball`` (which recomputes norms; a too-small margin sent every shrunk row there
    and made the dual update 2x slower)."""
    nm = _norms()

    def no_repair(*args):
        raise AssertionError("enforce_ball called")

    monkeypatch.setattr(nm, "enforce_ball", no_repair)
    rng = np.random.default_rng(3)
    for d in (1, 2, 10, 100):
        U = rng.normal(size=(2000, d)) * 10.0 ** rng.integers(-100, 100, size=(2000, 1))
        r = np.linalg.norm(U, axis=1) * rng.uniform(1e-3, 2.0, size=2000)
        P = gm.Norm2().dual_update(U, 1.0, r)
        assert np.all(np.linalg.norm(P, axis=1) <= r)


@settings(deadline=None, max_examples=150)
@given(U=rows, data=st.data())
def test_l2_ball_projection_into_equals_the_dual_update(U, data):
    """:class:`L2BallProjection` (``Norm2``'s DU written into the flows, radii fixed) returns
    the rows of ``Norm2().dual_update`` bit for bit, on rows spanning 1e-300..1e300 (zero
    rows, radii at, just inside and just outside the norm, zero and subnormal radii), into a
    separate output and in place; every row ends inside its ball by the 50-digit reference."""
    U, refs, r = _rows_and_radii(U, data)
    want = gm.Norm2().dual_update(U, 1.0, r)
    project = _norms().L2BallProjection(r, U.shape[1])
    out = np.full_like(U, np.nan)
    assert project(U, out) is out
    np.testing.assert_array_equal(out, want)
    same = U.copy()
    np.testing.assert_array_equal(project(same, same), want)
    for k in range(len(U)):
        assert at_most(ref_norm(out[k], 2.0), r[k]), (U[k], r[k], out[k])


def test_l2_ball_projection_into_other_inputs():
    """Rows the two-pass path does not take (NaN, infinite entries, norms past the unscaled
    range) give ``dual_update``'s rows bit for bit; nothing moves: a copy; every row inside
    (repeated calls reuse the buffers); a wrong shape or a negative radius raises
    :class:`PenaltyError` naming it."""
    nm = _norms()
    U = np.array([[3.0, 4.0], [np.nan, 1.0], [1e200, -1e200], [0.0, 0.0], [np.inf, 0.0],
                  [1e-200, 1e-200], [0.3, 0.4]])
    r = np.array([1.0, 1.0, 2.0, 0.5, 1.0, 1e-300, 0.5])
    project = nm.L2BallProjection(r, 2)
    for _ in range(2):
        out = np.empty_like(U)
        np.testing.assert_array_equal(project(U, out), gm.Norm2().dual_update(U, 1.0, r))
    inside = np.array([[0.1, 0.2], [0.0, 0.0]])
    out = np.empty_like(inside)
    np.testing.assert_array_equal(nm.L2BallProjection([1.0, 1.0], 2)(inside, out), inside)
    rng = np.random.default_rng(5)
    for _ in range(3):
        V = rng.normal(size=(500, 10))
        radii = rng.uniform(0.0, 4.0, size=500)
        P = nm.L2BallProjection(radii, 10)(V, np.empty_like(V))
        assert np.all(nm.norm_rows_upper(P, 2.0) <= radii)
    with pytest.raises(PenaltyError, match="shape"):
        project(U[:3], np.empty((3, 2)))
    with pytest.raises(PenaltyError, match="edge 1"):
        nm.L2BallProjection([1.0, -1.0], 2)


# ============================================================================ objective
def _path_model(p: float) -> tuple[gm.GTVModel, np.ndarray, Decimal]:
    G = nx.path_graph(3)
    G.edges[0, 1]["weight"] = 2.0
    model = gm.GTVModel(G, 3, penalty=gm.NormP(p), lam=0.7)
    W = np.array([[0.9, -0.8, 0.95], [0.0, 0.1, -0.05], [1e-3, 0.2, 0.5]])
    with decimal.localcontext(CTX):
        ref = Decimal(0.7) * (Decimal(2.0) * ref_norm(W[0] - W[1], p) + ref_norm(W[1] - W[2], p))
    return model, W, ref


@pytest.mark.parametrize("p", [1.0001, 500.0, 1e4])
def test_objective_extreme_exponents(p):
    model, W, ref = _path_model(p)
    assert rel_err(model.objective(W), ref) <= 1e-14
    assert rel_err(model.penalty_value(W), ref) <= 1e-14
    assert rel_err(model.penalty_value(W * 1e250), ref * Decimal(1e250)) <= 1e-14
    assert rel_err(model.penalty_value(W * 1e-250), ref * Decimal(1e-250)) <= 1e-14


# ============================================================ other violations, conjugates
def test_symbolic_constraint_violation_outside_domain():
    x = cp.Variable(1)
    con = gm.SymbolicConstraint(cp.inv_pos(x) <= 3, x)
    assert con.violation(np.array([-0.5])) == np.inf
    assert con.violation(np.array([0.5])) == 0.0
    assert con.violation(np.array([0.25])) == pytest.approx(1.0)


def test_violations_never_nan():
    w = np.array([np.nan, 0.5])
    for c in (gm.Box(-1, 1), gm.NonNeg(), gm.NormBall(1.0), gm.NormBall(1.0, p=3),
              gm.NormBall(1.0, p=np.inf), gm.NormBall(1.0, p=1)):
        assert c.violation(w) == np.inf, c
    assert gm.Box(-1, 1).violation(np.array([np.inf, 0.0])) == np.inf
    assert gm.NonNeg().violation(np.array([-np.inf, 0.0])) == np.inf
    assert gm.NormBall(1.0, p=3).violation(np.array([np.inf, 0.0])) == np.inf
    x = cp.Variable(2)
    sym = gm.SymbolicConstraint(cp.sum(x) <= 1, x)
    assert sym.violation(w) == np.inf


def test_box_violation_tiny_excess_is_positive():
    assert gm.Box(0.0, 1.0).violation(np.array([np.nextafter(1.0, 2.0)])) > 0
    assert gm.NonNeg().violation(np.array([-5e-324])) > 0


@pytest.mark.parametrize("pen", [gm.SquaredNorm2(), gm.QuadForm(np.diag([2.0, 0.5, 1.0]))],
                         ids=repr)
def test_quadratic_penalties_at_lambda_zero(pen):
    U = np.array([[0.0, 0.0, 0.0], [1e-200, 0.0, 0.0], [1.0, -2.0, 0.5], [-0.0, 0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = pen.conjugate_rows(U, 0.0)
        np.testing.assert_array_equal(got, [0.0, np.inf, np.inf, 0.0])
        mixed = pen.conjugate_rows(U, np.array([0.0, 1e-300, 0.0, 2.0]))
        assert mixed[0] == 0 and mixed[2] == np.inf and mixed[3] == 0
        assert 0 < mixed[1] < np.inf  # ||u||^2 / (2 lamA) = 1e-400 / 2e-300, no underflow
        np.testing.assert_array_equal(pen.dual_update(U, 0.5, 0.0), np.zeros_like(U))
        np.testing.assert_array_equal(pen.prox_rows(U, 0.0), U)
        assert not np.isnan(pen.conjugate_rows(U * 1e200, 1e-300)).any()


# ============================================================================ validation
def test_norm_exponent_validation():
    for bad in ("2", True, False, np.bool_(True), None, float("nan"), 0.5, -np.inf, 1 + 2j,
                [2.0], np.array([2.0, 3.0])):
        with pytest.raises(PenaltyError, match="NormP"):
            gm.NormP(bad)
        with pytest.raises(DataError, match="NormBall"):
            gm.NormBall(1.0, p=bad)
    for good in (1, 1.5, 2, np.inf, np.float32(3.0), np.int64(4), 1e6):
        assert gm.NormP(good).p == float(good)
        assert gm.NormBall(1.0, p=good).p == float(good)


def test_projections_return_a_new_array_even_when_nothing_moves():
    """Every projection path returns a new array: writing to the result never changes the
    caller's input (the two-pass l2 path once returned its input when no row shrank)."""
    U = np.array([[0.1, 0.2], [0.0, 0.0]])
    for p in (1.0, 2.0, 3.0, INF):
        P = gm.NormBall.project_rows(U, np.array([5.0, 5.0]), p)
        assert P is not U and not np.shares_memory(P, U)
    w = np.array([0.1, 0.2])
    z = gm.NormBall(5.0).project(w)
    z[0] = 7.0
    assert w[0] == 0.1
