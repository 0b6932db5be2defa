"""The compiled node loops of :mod:`gtvmodel.kernels.nodeqp` (issue 30 item 4): the hinge and
absolute losses' dual active-set prox node by node in numba, against an independent CVXPY
formulation of PU (32) written here (epigraph QP, tight Clarabel), against the numpy steps of
:func:`gtvmodel.kernels.boxqp.dual_active_set_prox`, and Algorithm 1's iterates on both paths."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest

import gtvmodel as gm
import gtvmodel.kernels.boxqp as boxqp
import gtvmodel.kernels.composite as composite
import gtvmodel.terms.losses.batches as losses_batches
from gtvmodel.kernels import nodebox, nodequad
from gtvmodel.primal_dual import strategies
from gtvmodel.terms.composite import CompositeProxBatch
from gtvmodel.terms.losses import LossBatch

pytest.importorskip("numba")

TIGHT = {"solver": "CLARABEL", "tol_gap_abs": 1e-13, "tol_gap_rel": 1e-13, "tol_feas": 1e-13}


def _reference(ls, v, tau):
    """argmin_z (1/m) sum_r ell_r(x_r^T z) + l2 ||z||^2 + ||z - v||^2 / (2 tau), rows by their
    epigraph."""
    m, d = ls.X.shape
    z, t = cp.Variable(d), cp.Variable(m)
    r = ls.X @ z
    hinge = isinstance(ls, gm.HingeLoss)
    cons = [t >= 0, t >= 1 - cp.multiply(ls.y, r)] if hinge else [t >= r - ls.y, t >= ls.y - r]
    cp.Problem(cp.Minimize(cp.sum(t) / m + ls.l2 * cp.sum_squares(z)
                           + cp.sum_squares(z - v) / (2 * tau)), cons).solve(**TIGHT)
    return z.value


def _objective(ls, v, tau, z):
    """The prox objective in numpy, written here."""
    t = ls.X @ z
    rows = np.maximum(0.0, 1.0 - ls.y * t) if isinstance(ls, gm.HingeLoss) else np.abs(t - ls.y)
    return rows.mean() + ls.l2 * z @ z + (z - v) @ (z - v) / (2 * tau)


def _batch(rng, cls, k, d, cond, m_max=8):
    out = []
    for _ in range(k):
        m = int(rng.integers(1, m_max))
        X = rng.standard_normal((m, d)) * np.logspace(0, np.log10(cond), d)
        if m > 2 and rng.random() < 0.3:
            X[1] = X[0]  # repeated rows: a singular dual QP with ties
        y = np.sign(rng.standard_normal(m)) if cls is gm.HingeLoss else rng.standard_normal(m)
        out.append(cls(X, y, l2=float(rng.choice([0.0, 0.3]))))
    return LossBatch(cls, np.arange(k), out, k, d), out


def _run(batch, V, tau, compiled, cache=None):
    pad = batch._padded()
    mu = 2.0 * batch.l2 + 1.0 / tau
    return boxqp.dual_active_set_prox(**pad, mu=mu, g=V / tau[:, None], Z0=V,
                                      cache={} if cache is None else cache, compiled=compiled)


@pytest.mark.parametrize("cls", [gm.AbsoluteLoss, gm.HingeLoss])
@pytest.mark.parametrize("d, cond", [(1, 1.0), (2, 10.0), (3, 1e3), (4, 1e4)])
def test_compiled_prox_matches_independent_cvxpy(cls, d, cond, monkeypatch):
    # through the batch's prox (a node that does not converge takes its CVXPY fallback)
    monkeypatch.setattr(boxqp, "COMPILED_MIN_NODES", 0)
    rng = np.random.default_rng(d)
    batch, losses = _batch(rng, cls, 6, d, cond)
    V = 2.0 * rng.standard_normal((6, d))
    tau = 10.0 ** rng.uniform(-1.5, 1.5, 6)
    Z = batch.prox(V, tau)
    for j, ls in enumerate(losses):
        ref = _reference(ls, V[j], tau[j])
        if np.abs(Z[j] - ref).max() <= 1e-8 * (1 + np.abs(ref).max()):
            continue
        # else the reference is the inexact one (Clarabel reports "inaccurate" at some badly
        # conditioned rows): worse than Z by at least the quadratic growth of the mu-strongly
        # convex prox objective at its minimizer
        mu = 2 * ls.l2 + 1 / tau[j]
        f, f_ref = (_objective(ls, V[j], tau[j], z) for z in (Z[j], ref))
        assert f_ref - f >= 0.5 * mu * np.sum((Z[j] - ref) ** 2) * (1 - 1e-6) - 1e-15 * abs(f)


@pytest.mark.parametrize("cls", [gm.AbsoluteLoss, gm.HingeLoss])
def test_compiled_steps_equal_the_numpy_steps(cls):
    # 400 nodes, ragged rows, repeated rows (ties), some cycling into the restart; then warm
    # calls from the last active set with the pseudo-inverse cache, as Algorithm 1 makes them
    rng = np.random.default_rng(11)
    batch, _ = _batch(rng, cls, 400, 3, 30.0)
    tau = 10.0 ** rng.uniform(-1, 1, 400)
    V = 3.0 * rng.standard_normal((400, 3))
    caches = ({}, {})
    starts = [None, None]
    for _ in range(4):
        out = []
        for j, compiled in enumerate((False, True)):
            pad = batch._padded()
            mu = 2.0 * batch.l2 + 1.0 / tau
            out.append(boxqp.dual_active_set_prox(**pad, mu=mu, g=V / tau[:, None], Z0=V,
                                                  start=starts[j], cache=caches[j],
                                                  compiled=compiled))
            starts[j] = out[-1][2]
        (Zn, okn, _), (Zc, okc, _) = out
        assert np.array_equal(okn, okc)
        np.testing.assert_allclose(Zc[okc], Zn[okn], rtol=0, atol=1e-10)
        V = V + 0.3 * rng.standard_normal(V.shape)


def test_no_steps_claim_nothing():
    rng = np.random.default_rng(6)
    batch, _ = _batch(rng, gm.AbsoluteLoss, 5, 2, 1.0)
    pad, V = batch._padded(), 3.0 * rng.standard_normal((5, 2))
    _, ok, _ = boxqp.dual_active_set_prox(**pad, mu=np.ones(5), g=V, Z0=np.zeros((5, 2)),
                                          max_iter=0, compiled=True)
    assert not ok.any()


def test_jacobi_pseudo_inverse_equals_numpy():
    rng = np.random.default_rng(2)
    for trial in range(400):
        m, d = int(rng.integers(1, 8)), int(rng.integers(1, 5))
        A = rng.standard_normal((m, d)) * np.logspace(0, rng.uniform(0, 6), d)
        if trial % 3 == 0:
            A[rng.random(m) < 0.4] = 0.0  # held rows: zero rows
        if trial % 5 == 0 and d > 1:
            A[:, -1] = 2.0 * A[:, 0]  # rank-deficient
        out = np.zeros((d, m))
        nodebox._pinv_jacobi(A.copy(), np.empty((d, d)), out)
        ref = np.linalg.pinv(A)
        cond = np.linalg.cond(A) if np.abs(A).max() > 0 and np.linalg.matrix_rank(A) == d \
            else 1e3
        np.testing.assert_allclose(out, ref, rtol=0,
                                   atol=1e-13 * min(cond, 1e6) * max(np.abs(ref).max(), 1.0))


def test_algorithm1_iterates_equal_on_both_paths(monkeypatch):
    # the 001 VI-A SBM with absolute losses and with hinge losses, 60 iterations
    data = gm.datasets.sbm(rho=1.0, seed=0)
    sq = data.model(gm.Norm2(), lam=1e-2)
    for make in (lambda ls: gm.AbsoluteLoss(ls.X, ls.y),
                 lambda ls: gm.HingeLoss(ls.X, np.sign(ls.y))):
        runs = []
        for threshold in (10**9, 0):  # numpy steps, then the compiled node loop
            monkeypatch.setattr(boxqp, "COMPILED_MIN_NODES", threshold)
            model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
            model.set_losses({v: make(sq.loss(v)) for v in sq.nodes})
            runs.append(model.solve_primal_dual(max_iter=60, tol=0, step=10.0,
                                                record_every=None))
        assert runs[0].paths.get("cvxpy fallbacks", 0) == runs[1].paths.get("cvxpy fallbacks", 0)
        np.testing.assert_allclose(runs[1].weights, runs[0].weights, rtol=0, atol=1e-10)
        np.testing.assert_allclose(runs[1].flows, runs[0].flows, rtol=0, atol=1e-10)


def _logistic_reference(ls, v, tau):
    """argmin_z (1/m) sum_r log(1 + exp(-y_r x_r^T z)) + l2 ||z||^2 + ||z - v||^2 / (2 tau)."""
    z = cp.Variable(ls.X.shape[1])
    obj = (cp.sum(cp.logistic(cp.multiply(-ls.y, ls.X @ z))) / ls.X.shape[0]
           + ls.l2 * cp.sum_squares(z) + cp.sum_squares(z - v) / (2 * tau))
    cp.Problem(cp.Minimize(obj)).solve(solver="CLARABEL", tol_gap_abs=1e-12, tol_gap_rel=1e-12,
                                       tol_feas=1e-12)
    return z.value


@pytest.mark.parametrize("d", [1, 2, 4])
def test_compiled_logistic_prox_matches_independent_cvxpy(d, monkeypatch):
    monkeypatch.setattr(losses_batches, "COMPILED_MIN_NODES", 0)
    rng = np.random.default_rng(20 + d)
    losses = []
    for _ in range(5):
        m = int(rng.integers(1, 8))
        X = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-1, 1.5)
        losses.append(gm.LogisticLoss(X, np.sign(rng.standard_normal(m)),
                                      l2=float(rng.choice([0.0, 0.2]))))
    batch = LossBatch(gm.LogisticLoss, np.arange(5), losses, 5, d)
    assert batch._compiled_newton()
    V = 3.0 * rng.standard_normal((5, d))
    tau = 10.0 ** rng.uniform(-1.5, 1.5, 5)
    Z = batch.prox(V, tau)
    Z2 = batch.prox(V + 0.01, tau * 1.1, W0=Z)  # from the predictor of the last answer
    for j, ls in enumerate(losses):
        for z, v, t in ((Z[j], V[j], tau[j]), (Z2[j], V[j] + 0.01, 1.1 * tau[j])):
            ref = _logistic_reference(ls, v, t)
            np.testing.assert_allclose(z, ref, rtol=0, atol=2e-7 * (1 + np.abs(ref).max()))


def test_algorithm1_logistic_iterates_equal_on_both_paths(monkeypatch):
    data = gm.datasets.sbm(rho=1.0, seed=0)
    sq = data.model(gm.Norm2(), lam=1e-2)
    runs = []
    for threshold in (10**9, 0):  # numpy Newton, then the compiled node loop
        monkeypatch.setattr(losses_batches, "COMPILED_MIN_NODES", threshold)
        model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
        model.set_losses({v: gm.LogisticLoss(sq.loss(v).X, np.sign(sq.loss(v).y), l2=0.01)
                          for v in sq.nodes})
        runs.append(model.solve_primal_dual(max_iter=80, tol=0, step=10.0, record_every=None))
    np.testing.assert_allclose(runs[1].weights, runs[0].weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(runs[1].flows, runs[0].flows, rtol=0, atol=1e-10)


@pytest.mark.parametrize("cls", [gm.SquaredLoss, gm.HuberLoss, gm.HingeLoss, gm.AbsoluteLoss])
def test_compiled_kkt_check_decides_as_the_numpy_one(cls, monkeypatch):
    # composite rows (l1 rows, data rows with q > 0 or linear) at exact answers of the active
    # set, and perturbed by 1e-13 ... 1e-4 (relative), NaN duals at some nodes
    rng = np.random.default_rng(31)
    k, d = 300, 3
    losses = []
    for _ in range(k):
        m = int(rng.integers(1, 8))
        X = rng.standard_normal((m, d)) * np.logspace(0, 1, d)
        y = np.sign(rng.standard_normal(m)) if cls is gm.HingeLoss else rng.standard_normal(m)
        kw = {"M": 0.5} if cls is gm.HuberLoss else {}
        losses.append(cls(X, y, l1=float(rng.choice([0.0, 0.1])), **kw))
    batch = CompositeProxBatch(cls, np.arange(k), losses, k, d)
    pad = batch._padded()
    V, tau = 2.0 * rng.standard_normal((k, d)), 10.0 ** rng.uniform(-1, 1, k)
    Z, ok, (_, a, _) = composite.composite_active_set_prox(**pad, mu=1 / tau, g=V / tau[:, None],
                                                           Z0=V, check=False)
    rows = {name: arr for name, arr in pad.items() if name not in ("coord", "l1row")}
    for eps in (0.0, 1e-13, 1e-11, 1e-9, 1e-4):
        Zp = Z * (1 + eps * rng.standard_normal(Z.shape))
        ap = a * (1 + eps * rng.standard_normal(a.shape))
        ap[:3, 0] = np.nan
        out = []
        for threshold in (10**9, 0):
            monkeypatch.setattr(composite, "COMPILED_MIN_NODES", threshold)
            out.append(composite.kkt_certified(**rows, mu=1 / tau, g=V / tau[:, None], Z=Zp,
                                               a=ap))
        assert not out[1][:3].any()
        assert np.array_equal(out[0], out[1]), (eps, np.flatnonzero(out[0] != out[1]))
        if eps == 0.0:
            assert out[1][3:].mean() > 0.95
        if eps == 1e-4:
            assert out[1].mean() < 0.05


@pytest.mark.parametrize("case", ["absolute l1 box", "hinge l1", "absolute ball",
                                  "huber ball", "squared l1 ball1", "huber ball1",
                                  "absolute ball1", "hinge ball1"])
def test_algorithm1_composite_iterates_equal_on_both_paths(case, monkeypatch):
    # the composite active set with the compiled KKT check and next active sets (hinge and
    # absolute rows: the whole steps in box_dual_pass; squared and Huber rows with a ball:
    # in nodequad.quad_rows_pass), and without
    data = gm.datasets.sbm(rho=1.0, seed=0)
    sq = data.model(gm.Norm2(), lam=1e-2)
    make, cons = {
        "absolute l1 box": (lambda ls: gm.AbsoluteLoss(ls.X, ls.y, l1=0.05), [gm.Box(-1, 1)]),
        "hinge l1": (lambda ls: gm.HingeLoss(ls.X, np.sign(ls.y), l1=0.05), []),
        "absolute ball": (lambda ls: gm.AbsoluteLoss(ls.X, ls.y), [gm.NormBall(1.0)]),
        "huber ball": (lambda ls: gm.HuberLoss(ls.X, ls.y, M=0.5), [gm.NormBall(1.0)]),
        "squared l1 ball1": (lambda ls: gm.SquaredLoss(ls.X, ls.y, l1=0.05),
                             [gm.NormBall(1.0, p=1)]),
        "huber ball1": (lambda ls: gm.HuberLoss(ls.X, ls.y, M=0.5), [gm.NormBall(1.0, p=1)]),
        "absolute ball1": (lambda ls: gm.AbsoluteLoss(ls.X, ls.y), [gm.NormBall(1.0, p=1)]),
        "hinge ball1": (lambda ls: gm.HingeLoss(ls.X, np.sign(ls.y)), [gm.NormBall(0.5, p=1)])
    }[case]
    runs = []
    for threshold in (10**9, 0):
        monkeypatch.setattr(composite, "COMPILED_MIN_NODES", threshold)
        model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
        model.set_losses({v: make(sq.loss(v)) for v in sq.nodes})
        for v in sq.nodes:
            for con in cons:
                model.add_constraint(v, con)
        runs.append(model.solve_primal_dual(max_iter=60, tol=0, step=10.0, record_every=None))
    assert runs[0].paths.get("cvxpy fallbacks", 0) == runs[1].paths.get("cvxpy fallbacks", 0)
    np.testing.assert_allclose(runs[1].weights, runs[0].weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(runs[1].flows, runs[0].flows, rtol=0, atol=1e-10)


@pytest.mark.parametrize("cls", [gm.AbsoluteLoss, gm.HingeLoss])
def test_algorithm1_one_norm_ball_as_halfspaces_equals_its_multiplier(cls, monkeypatch):
    # linear rows with a 1-norm ball: its 2^d halfspace rows (in box_dual_pass) and its
    # multiplier widening the l1 rows (the numpy steps of _solve_l1_ball) have one minimizer
    data = gm.datasets.sbm(rho=1.0, seed=0)
    sq = data.model(gm.Norm2(), lam=1e-2)
    runs = []
    for max_d, threshold in ((0, 10**9), (2, 0)):
        monkeypatch.setattr(CompositeProxBatch, "halfspace_max_d", max_d)
        monkeypatch.setattr(composite, "COMPILED_MIN_NODES", threshold)
        model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
        model.set_losses({v: cls(sq.loss(v).X, sq.loss(v).y if cls is gm.AbsoluteLoss
                                 else np.sign(sq.loss(v).y)) for v in sq.nodes})
        for v in sq.nodes:
            model.add_constraint(v, gm.NormBall(0.8, p=1))
        runs.append(model.solve_primal_dual(max_iter=60, tol=0, step=10.0, record_every=None))
    assert runs[1].paths.get("cvxpy fallbacks", 0) == 0
    np.testing.assert_allclose(runs[1].weights, runs[0].weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(runs[1].flows, runs[0].flows, rtol=0, atol=1e-10)
    on_vertex = np.abs(runs[1].weights).min(axis=1) < 1e-12
    assert on_vertex.any() and (runs[1].weights[on_vertex] == 0.0).any(axis=1).all()


def _composite_reference(ls, v, tau, lo, hi, radius=np.inf, radius1=np.inf):
    """:func:`_reference` with ``l1 ||z||_1``, the box ``lo <= z <= hi`` and the balls
    ``||z||_2 <= radius``, ``||z||_1 <= radius1``."""
    m, d = ls.X.shape
    z, t = cp.Variable(d), cp.Variable(m)
    r = ls.X @ z
    hinge = isinstance(ls, gm.HingeLoss)
    cons = [t >= 0, t >= 1 - cp.multiply(ls.y, r)] if hinge else [t >= r - ls.y, t >= ls.y - r]
    cons += [z[i] >= lo[i] for i in np.flatnonzero(np.isfinite(lo))]
    cons += [z[i] <= hi[i] for i in np.flatnonzero(np.isfinite(hi))]
    cons += [cp.norm(z, 2) <= radius] if np.isfinite(radius) else []
    cons += [cp.norm(z, 1) <= radius1] if np.isfinite(radius1) else []
    cp.Problem(cp.Minimize(cp.sum(t) / m + ls.l1 * cp.norm1(z) + ls.l2 * cp.sum_squares(z)
                           + cp.sum_squares(z - v) / (2 * tau)), cons).solve(**TIGHT)
    # feasible: scaled into the balls (towards 0, in every box here), clipped to the box
    return np.clip(z.value * min(1.0, radius / max(np.linalg.norm(z.value), 1e-300),
                                 radius1 / max(np.abs(z.value).sum(), 1e-300)), lo, hi)


def _composite_batch(rng, cls, k, d, cond):
    """``k`` nodes of ``cls`` with ``l1`` 0, 0.05 or 1, boxes on two thirds of them (a bound
    at the ``l1`` kink on some), columns scaled up to ``cond``."""
    losses, lo, hi = [], np.full((k, d), -np.inf), np.full((k, d), np.inf)
    for i in range(k):
        m = int(rng.integers(1, 8))
        X = rng.standard_normal((m, d)) * np.logspace(0, np.log10(cond), d)
        y = np.sign(rng.standard_normal(m)) if cls is gm.HingeLoss else rng.standard_normal(m)
        losses.append(cls(X, y, l1=float(rng.choice([0.0, 0.05, 1.0])),
                          l2=float(rng.choice([0.0, 0.3]))))
        if i % 3:
            lo[i] = np.where(rng.random(d) < 0.6, -rng.uniform(0, 1, d), -np.inf)
            hi[i] = np.where(rng.random(d) < 0.6, rng.uniform(0, 1, d), np.inf)
        if i % 5 == 1:
            lo[i, 0] = 0.0
    return losses, lo, hi


#: ``COMPILED_MIN_NODES`` of the numpy steps (never compiled) and of the compiled loop (always).
_PATHS = (10**9, 0)


def _numpy_and_compiled(monkeypatch, make):
    """Two batches from ``make()``: built under the numpy steps' and the compiled loop's
    thresholds (:data:`_PATHS`)."""
    batches = []
    for threshold in _PATHS:
        monkeypatch.setattr(composite, "COMPILED_MIN_NODES", threshold)
        batches.append(make())
    return batches


def _warm_calls(monkeypatch, batches, V, tau, calls=4):
    """Four warm calls of both batches at moving points and growing steps: yields ``(call,
    Vc, tc, [numpy answer, compiled answer])``."""
    k, d = V.shape
    for call in range(calls):
        Vc, tc = V + 0.3 * call * np.cos(np.arange(k * d).reshape(k, d) + call), tau * 1.3**call
        out = []
        for threshold, batch in zip(_PATHS, batches, strict=True):
            monkeypatch.setattr(composite, "COMPILED_MIN_NODES", threshold)
            out.append(batch.prox(Vc, tc))
        yield call, Vc, tc, out


@pytest.mark.parametrize("cls", [gm.AbsoluteLoss, gm.HingeLoss])
@pytest.mark.parametrize("d, cond, ball", [(1, 1.0, 0), (2, 10.0, 0), (3, 1e2, 0), (4, 1e3, 0),
                                           (1, 1.0, 2), (3, 1e2, 2), (1, 1.0, 1), (2, 10.0, 1),
                                           (3, 1e2, 1)])
def test_compiled_composite_prox_matches_independent_cvxpy(cls, d, cond, ball, monkeypatch):
    # hinge and absolute rows with l1, boxes and (ball 2) Euclidean balls, or (ball 1) 1-norm
    # balls without l1 and boxes, these as their 2^d halfspace rows at d <= 2: the composite
    # active set's steps node by node in box_dual_pass (l1, box and halfspace rows as linear
    # rows, the Euclidean ball's step in closed form), four warm calls; 8 nodes of each call
    # against the CVXPY prox written here, every call equal to the numpy steps' answers or
    # better (at d = 4, condition 1e3 and 60 nodes the numpy steps left 85 of 240 node
    # updates to the CVXPY path, 2e-9 off; the compiled loop 10)
    rng = np.random.default_rng(int(10 * d + cond + (ball > 0) + 7 * (ball == 1)))
    k = 40
    losses, lo, hi = _composite_batch(rng, cls, k, d, cond)
    if ball == 1:  # (halfspace rows: without l1 and bounds)
        losses = [cls(ls.X, ls.y, l2=ls.l2) for ls in losses]
        lo, hi = np.full((k, d), -np.inf), np.full((k, d), np.inf)
    V, tau = 2.0 * rng.standard_normal((k, d)), 10.0 ** rng.uniform(-1, 1, k)
    radius = np.where(rng.random(k) < 0.8, rng.uniform(0.05, 1.5, k), np.inf) if ball \
        else np.full(k, np.inf)
    radius2, radius1 = (radius, np.full(k, np.inf)) if ball != 1 else (np.full(k, np.inf), radius)
    batches = _numpy_and_compiled(monkeypatch, lambda: CompositeProxBatch(
        cls, np.arange(k), losses, k, d, box=(lo, hi), radius=radius2 if ball == 2 else None,
        radius1=radius1 if ball == 1 else None))
    for call, Vc, tc, out in _warm_calls(monkeypatch, batches, V, tau):
        assert np.all(out[1] >= lo) and np.all(out[1] <= hi)
        assert np.all(np.linalg.norm(out[1], axis=1) <= radius2 * (1 + 1e-12))
        assert np.all(np.abs(out[1]).sum(axis=1) <= radius1 * (1 + 1e-12))

        def objective(j, z, Vc=Vc, tc=tc):
            return _objective(losses[j], Vc[j], tc[j], z) + losses[j].l1 * np.abs(z).sum()

        for j in np.flatnonzero(np.abs(out[1] - out[0]).max(axis=1) > 1e-10):
            f, f_np = objective(j, out[1][j]), objective(j, out[0][j])
            assert f <= f_np + 1e-13 * (1 + abs(f_np)), (call, j, f, f_np)
        for j in range(call, k, 5)[:8]:
            ref = _composite_reference(losses[j], Vc[j], tc[j], lo[j], hi[j], radius2[j],
                                       radius1[j])
            if np.abs(out[1][j] - ref).max() > 1e-8 * (1 + np.abs(ref).max()):
                f, f_ref = objective(j, out[1][j]), objective(j, ref)
                assert f <= f_ref + 1e-13 * (1 + abs(f_ref)), (call, j, f, f_ref)
    assert batches[1].fallbacks <= batches[0].fallbacks + 2


def test_compiled_composite_keeps_the_l1_zeros_and_bounds_exact(monkeypatch):
    # free l1 and box rows fix their coordinates exactly: z_j = 0.0 and z_j = the bound
    monkeypatch.setattr(composite, "COMPILED_MIN_NODES", 0)
    rng = np.random.default_rng(5)
    k, d = 40, 3
    losses = [gm.AbsoluteLoss(rng.standard_normal((4, d)), rng.standard_normal(4), l1=1.0)
              for _ in range(k)]
    lo, hi = np.full((k, d), -0.2), np.full((k, d), 0.2)
    batch = CompositeProxBatch(gm.AbsoluteLoss, np.arange(k), losses, k, d, box=(lo, hi))
    Z = batch.prox(3.0 * rng.standard_normal((k, d)), np.full(k, 2.0))
    assert batch.fallbacks == 0
    near = np.minimum(np.abs(Z), np.abs(np.abs(Z) - 0.2))
    assert (near == 0.0).mean() > 0.8  # l1 = 1: most coordinates at 0 or at a bound
    assert not ((near > 0.0) & (near < 1e-9)).any()  # exactly there, not to rounding


def _logistic_composite_reference(ls, v, tau, lo, hi):
    """argmin over lo <= z <= hi of (1/m) sum_r log(1 + exp(-y_r x_r^T z)) + l1 ||z||_1 +
    l2 ||z||^2 + ||z - v||^2 / (2 tau)."""
    z = cp.Variable(ls.X.shape[1])
    obj = (cp.sum(cp.logistic(cp.multiply(-ls.y, ls.X @ z))) / ls.X.shape[0]
           + ls.l1 * cp.norm1(z) + ls.l2 * cp.sum_squares(z) + cp.sum_squares(z - v) / (2 * tau))
    cons = [z[i] >= lo[i] for i in np.flatnonzero(np.isfinite(lo))] + \
        [z[i] <= hi[i] for i in np.flatnonzero(np.isfinite(hi))]
    cp.Problem(cp.Minimize(obj), cons).solve(solver="CLARABEL", tol_gap_abs=1e-12,
                                             tol_gap_rel=1e-12, tol_feas=1e-12)
    return z.value


def _logistic_objective(ls, v, tau, z):
    """The prox objective in numpy, written here."""
    return (np.logaddexp(0.0, -ls.y * (ls.X @ z)).mean() + ls.l1 * np.abs(z).sum()
            + ls.l2 * z @ z + (z - v) @ (z - v) / (2 * tau))


def _logistic_composite_batch(rng, k, d):
    losses, lo, hi = [], np.full((k, d), -np.inf), np.full((k, d), np.inf)
    for i in range(k):
        m = int(rng.integers(1, 8))
        X = rng.standard_normal((m, d)) * 10.0 ** rng.uniform(-1, 1.5)
        losses.append(gm.LogisticLoss(X, np.sign(rng.standard_normal(m)),
                                      l1=float(rng.choice([0.0, 0.05, 1.0])),
                                      l2=float(rng.choice([0.0, 0.2]))))
        if i % 3:
            lo[i] = np.where(rng.random(d) < 0.6, -rng.uniform(0, 1, d), -np.inf)
            hi[i] = np.where(rng.random(d) < 0.6, rng.uniform(0, 1, d), np.inf)
        if i % 5 == 1:
            lo[i, 0] = 0.0  # a bound at the l1 kink
    batch = strategies.CompiledSmoothCompositeBatch(gm.LogisticLoss, np.arange(k), losses, k,
                                                    d, box=(lo, hi))
    return batch, losses, lo, hi


@pytest.mark.parametrize("d", [1, 2, 3])
def test_compiled_logistic_l1_box_prox_matches_independent_cvxpy(d, monkeypatch):
    monkeypatch.setattr(strategies, "COMPILED_MIN_NODES", 0)
    rng = np.random.default_rng(40 + d)
    batch, losses, lo, hi = _logistic_composite_batch(rng, 12, d)
    V = 2.0 * rng.standard_normal((12, d))
    tau = 10.0 ** rng.uniform(-1.5, 1.5, 12)
    Z = batch.prox(V, tau)
    Z2 = batch.prox(V + 0.01, tau, W0=Z)  # from the last answer moved to first order
    assert batch.fallbacks == 0
    for j, ls in enumerate(losses):
        for z, v in ((Z[j], V[j]), (Z2[j], V[j] + 0.01)):
            assert np.all(z >= lo[j]) and np.all(z <= hi[j])
            ref = _logistic_composite_reference(ls, v, tau[j], lo[j], hi[j])
            if np.abs(z - ref).max() <= 1e-8 * (1 + np.abs(ref).max()):
                continue
            # else Clarabel's exponential cones are the inexact ones: the reference (projected
            # into the box) is worse than z by at least the quadratic growth of the
            # (1/tau)-strongly convex prox objective at its minimizer
            ref = np.clip(ref, lo[j], hi[j])
            f, f_ref = (_logistic_objective(ls, v, tau[j], x) for x in (z, ref))
            assert f_ref - f >= 0.5 / tau[j] * np.sum((z - ref) ** 2) * (1 - 1e-6) \
                - 1e-14 * abs(f), (j, np.abs(z - ref).max(), f, f_ref)


def test_compiled_logistic_l1_box_uncertified_nodes_fall_back(monkeypatch):
    monkeypatch.setattr(strategies, "COMPILED_MIN_NODES", 0)
    rng = np.random.default_rng(7)
    batch, losses, lo, hi = _logistic_composite_batch(rng, 4, 2)
    real = strategies.compiled_logistic_composite()

    def no_steps(*args):  # max_iter = 0: nothing is certified
        args = list(args)
        args[11] = 0
        return real(*args)

    monkeypatch.setattr(strategies, "compiled_logistic_composite", lambda: no_steps)
    V, tau = rng.standard_normal((4, 2)), np.ones(4)
    Z = batch.prox(V, tau)
    assert batch.fallbacks == 4
    for j, ls in enumerate(losses):
        ref = _logistic_composite_reference(ls, V[j], 1.0, lo[j], hi[j])
        np.testing.assert_allclose(Z[j], ref, rtol=0, atol=1e-6 * (1 + np.abs(ref).max()))


@pytest.mark.parametrize("l1, box", [(0.05, False), (0.0, True), (0.05, True)])
def test_algorithm1_logistic_l1_box_iterates_equal_the_proximal_newton(l1, box, monkeypatch):
    data = gm.datasets.sbm(rho=1.0, seed=0)
    sq = data.model(gm.Norm2(), lam=1e-2)
    runs = []
    for threshold in (10**9, 0):  # proximal Newton (terms.composite), then the compiled one
        monkeypatch.setattr(strategies, "COMPILED_MIN_NODES", threshold)
        model = gm.GTVModel(sq.graph, sq.dim, penalty=gm.Norm2(), lam=1e-2)
        model.set_losses({v: gm.LogisticLoss(sq.loss(v).X, np.sign(sq.loss(v).y), l1=l1)
                          for v in sq.nodes})
        for v in sq.nodes:
            if box:
                model.add_constraint(v, gm.Box([-1.0, 0.0], [1.0, 0.3]))
        runs.append(model.solve_primal_dual(max_iter=80, tol=0, step=10.0, record_every=None))
    assert "cvxpy fallbacks" not in runs[1].paths
    np.testing.assert_allclose(runs[1].weights, runs[0].weights, rtol=0, atol=1e-10)
    np.testing.assert_allclose(runs[1].flows, runs[0].flows, rtol=0, atol=1e-10)


def _quad_reference(ls, v, tau, radius, radius1):
    """argmin_z (1/m) sum_r ell_r(x_r^T z) + l1 ||z||_1 + l2 ||z||^2 + ||z - v||^2 / (2 tau)
    over ``||z||_2 <= radius``, ``||z||_1 <= radius1`` (squared ``(t - y)^2`` or CVXPY's
    ``huber``), scaled into the balls (towards 0)."""
    z = cp.Variable(ls.X.shape[1])
    r = ls.X @ z - ls.y
    fit = cp.sum(cp.huber(r, ls.M)) if isinstance(ls, gm.HuberLoss) else cp.sum_squares(r)
    cons = ([cp.norm(z, 2) <= radius] if np.isfinite(radius) else []) \
        + ([cp.norm1(z) <= radius1] if np.isfinite(radius1) else [])
    cp.Problem(cp.Minimize(fit / ls.X.shape[0] + ls.l1 * cp.norm1(z) + ls.l2 * cp.sum_squares(z)
                           + cp.sum_squares(z - v) / (2 * tau)), cons).solve(**TIGHT)
    w = z.value
    return w * min(1.0, radius / max(np.linalg.norm(w), 1e-300),
                   radius1 / max(np.abs(w).sum(), 1e-300))


def _quad_objective(ls, v, tau, z):
    """The prox objective of :func:`_quad_reference` in numpy, written here."""
    t = ls.X @ z - ls.y
    if isinstance(ls, gm.HuberLoss):
        rows = np.where(np.abs(t) <= ls.M, t**2, 2 * ls.M * np.abs(t) - ls.M**2)
    else:
        rows = t**2
    return rows.mean() + ls.l1 * np.abs(z).sum() + ls.l2 * z @ z + (z - v) @ (z - v) / (2 * tau)


@pytest.mark.parametrize("cls", [gm.HuberLoss, gm.SquaredLoss])
@pytest.mark.parametrize("d, cond, p", [(1, 1.0, 2), (2, 10.0, 2), (3, 1e2, 2), (4, 1e3, 2),
                                        (1, 1.0, 1), (2, 10.0, 1), (3, 1e2, 1), (4, 1e3, 1)])
def test_compiled_quad_rows_prox_matches_independent_cvxpy(cls, d, cond, p, monkeypatch):
    # squared and Huber rows (q > 0) with l1 0, 0.05 or 1 and a Euclidean (p = 2) or 1-norm
    # (p = 1) ball on 80% of the nodes: the composite active set's steps node by node in
    # nodequad.quad_rows_pass, four warm calls; 8 nodes of each call against the CVXPY prox
    # written here, every call equal to the numpy steps' answers (1e-10) or better
    rng = np.random.default_rng(int(10 * d + cond + p))
    k = 40
    losses = []
    for _ in range(k):
        m = int(rng.integers(1, 8))
        X = rng.standard_normal((m, d)) * np.logspace(0, np.log10(cond), d)
        extra = {"M": float(rng.uniform(0.1, 1.0))} if cls is gm.HuberLoss else {}
        losses.append(cls(X, rng.standard_normal(m), l1=float(rng.choice([0.0, 0.05, 1.0])),
                          l2=float(rng.choice([0.0, 0.3])), **extra))
    V, tau = 2.0 * rng.standard_normal((k, d)), 10.0 ** rng.uniform(-1, 1, k)
    radius = np.where(rng.random(k) < 0.8, rng.uniform(0.05, 1.5, k), np.inf)
    balls = {"radius": radius} if p == 2 else {"radius1": radius}
    calls = []
    monkeypatch.setattr(composite, "_run_quad", _counted(composite._run_quad, calls))
    batches = _numpy_and_compiled(
        monkeypatch, lambda: CompositeProxBatch(cls, np.arange(k), losses, k, d, **balls))
    for call, Vc, tc, out in _warm_calls(monkeypatch, batches, V, tau):
        norm = np.linalg.norm(out[1], axis=1) if p == 2 else np.abs(out[1]).sum(axis=1)
        assert np.all(norm <= radius * (1 + 1e-12))
        # both paths stop at the active-set KKT check, which accepts a nearly active ball as
        # inactive: measured on this draw (d = 4, cond 1e3, node 14, call 1) an answer 1.0e-6
        # from the optimum, 4.6e-12 inside the radius, objective 3.0e-12 (1.9e-12 relative)
        # above it -- from the numpy path with numpy 2.4, from the compiled one at the
        # dependency floors (numpy 1.24, numba 0.60); hence 1e-11, not rounding
        for j in np.flatnonzero(np.abs(out[1] - out[0]).max(axis=1) > 1e-10):
            f, f_np = (_quad_objective(losses[j], Vc[j], tc[j], z) for z in (out[1][j], out[0][j]))
            assert f <= f_np + 1e-11 * (1 + abs(f_np)), (call, j, f, f_np)
        for j in range(call, k, 5)[:8]:
            ref = _quad_reference(losses[j], Vc[j], tc[j], *((radius[j], np.inf) if p == 2
                                                             else (np.inf, radius[j])))
            if np.abs(out[1][j] - ref).max() > 1e-8 * (1 + np.abs(ref).max()):
                f, f_ref = (_quad_objective(losses[j], Vc[j], tc[j], z) for z in (out[1][j], ref))
                assert f <= f_ref + 1e-13 * (1 + abs(f_ref)), (call, j, f, f_ref)
    assert len(calls) >= 4  # (the compiled loop ran in every call of the second batch)
    assert batches[1].fallbacks <= batches[0].fallbacks + 2


def _counted(func, calls):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return func(*args, **kwargs)
    return wrapped


def test_compiled_quad_rows_kkt_decides_as_kkt_certified():
    # the KKT check of quad_rows_pass (nodequad._quad_kkt, run here as Python on each node's
    # copied rows) against kkt_certified: the same decision at exact answers and at points
    # whose z or duals are moved by 1e-13 ... 1e-3
    rng = np.random.default_rng(5)
    k, d = 200, 3
    losses = [gm.HuberLoss(rng.standard_normal((5, d)), rng.standard_normal(5), M=0.5,
                           l1=float(rng.choice([0.0, 0.3]))) for _ in range(k)]
    pad = CompositeProxBatch(gm.HuberLoss, np.arange(k), losses, k, d)._padded()
    rows = {key: pad[key] for key in ("P", "cs", "cq", "lo", "hi", "fixed")}
    V, mu = 2.0 * rng.standard_normal((k, d)), np.full(k, 1.4)
    g = V * mu[:, None]
    Z, ok, (state, a, _) = composite.composite_active_set_prox(
        **rows, coord=pad["coord"], mu=mu, g=g, Z0=V, compiled=False)
    assert ok.all()
    scale, seen = 10.0 ** rng.uniform(-13, -3, k), []
    for Zt, at in ((Z, a), (Z + scale[:, None] * rng.standard_normal(Z.shape), a),
                   (Z, a + scale[:, None] * rng.standard_normal(a.shape))):
        ref = composite.kkt_certified(**rows, mu=mu, g=g, Z=Zt, a=at)
        R = a.shape[1]
        rw, w = np.empty((R, nodequad._P + d)), np.empty((nodequad._J + d, d))
        mine = np.empty(k, dtype=bool)
        for i in range(k):
            nodequad._load_node(pad["P"], pad["cs"], pad["cq"], pad["lo"], pad["hi"],
                                pad["fixed"], pad["coord"], np.zeros(R, dtype=bool),
                                np.ones((k, R)), np.ones((k, R)), g, state, at, Zt, rw, w, i)
            mine[i] = nodequad._quad_kkt(rw, w, mu[i], composite.KKT_RTOL)
        np.testing.assert_array_equal(mine, ref)
        seen.append(ref)
    assert seen[0].all() and 0 < seen[1].sum() < k  # (both decisions occur)
