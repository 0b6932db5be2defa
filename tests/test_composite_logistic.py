"""Logistic + ``l1`` / box prox (:class:`SmoothCompositeProxBatch`, its solver in
``gtvmodel.kernels.composite_newton``): the warm-started calls' Newton steps on the last call's
active sets (``_held_newton``) and their active-set update (``_held_states``), against an
independent CVXPY prox written here (exponential cone via ``cp.logistic``, one tight Clarabel
solve per node)."""

from __future__ import annotations

import cvxpy as cp
import numpy as np
import pytest
from scipy.special import expit

import gtvmodel as gm
from gtvmodel.kernels import composite_newton
from gtvmodel.kernels.composite_newton import (
    CompositeNewton,
    certified_at,
    composite_prox_newton,
    predicted_start,
    rows_of,
    unit_rows,
)
from gtvmodel.kernels.linalg import spd_solve
from gtvmodel.terms.composite import SmoothCompositeProxBatch, kkt_certified

TIGHT = {"solver": "CLARABEL", "tol_gap_abs": 1e-13, "tol_gap_rel": 1e-13, "tol_feas": 1e-13}


def _reference(X, y, l1, l2, v, tau, lo, hi):
    """argmin_z mean_r log(1 + exp(-y_r x_r^T z)) + l1 ||z||_1 + l2 ||z||^2
    + ||z - v||^2 / (2 tau) over lo <= z <= hi."""
    z = cp.Variable(v.size)
    obj = (cp.sum(cp.logistic(-cp.multiply(y, X @ z))) / X.shape[0] + l1 * cp.norm1(z)
           + l2 * cp.sum_squares(z) + cp.sum_squares(z - v) / (2 * tau))
    cons = [z >= lo, z <= hi]
    cp.Problem(cp.Minimize(obj), cons).solve(**TIGHT)
    return np.clip(z.value, lo, hi)


def _batch(rng, k, d, l1, lo, hi):
    data = []
    for _ in range(k):
        X = rng.standard_normal((int(rng.integers(2, 7)), d)) * np.logspace(0, 1, d)
        y = np.sign(X @ np.ones(d) + 0.5 * rng.standard_normal(X.shape[0]))
        y[y == 0] = 1.0
        data.append((X, y, l1, 0.1 * float(rng.integers(0, 2))))
    losses = [gm.LogisticLoss(X, y, l1=a, l2=b) for X, y, a, b in data]
    return data, SmoothCompositeProxBatch(gm.LogisticLoss, np.arange(k), losses, k, d,
                                          box=(lo, hi))


def _spy_general_steps(monkeypatch):
    """Counts the calls that needed the general proximal Newton steps (and their nodes)."""
    calls = []
    orig = composite_newton._general_steps

    def spy(pb, Z, mu, g, start, done, H):
        calls.append(int((~done).sum()))
        return orig(pb, Z, mu, g, start, done, H)

    monkeypatch.setattr(composite_newton, "_general_steps", spy)
    return calls


def _objective(X, y, l1, l2, v, tau, z):
    """The prox objective in numpy."""
    return (np.logaddexp(0.0, -y * (X @ z)).mean() + l1 * np.abs(z).sum() + l2 * z @ z
            + (z - v) @ (z - v) / (2 * tau))


def _distance_bound(X, y, l1, l2, v, tau, lo, hi, z):
    """A certified upper bound on ``||z - z*||_2`` for a point ``lo <= z <= hi``: ``||g|| /
    mu`` for the least-norm ``g`` in the subdifferential of the ``mu``-strongly convex prox
    objective at ``z`` (``mu = 2 l2 + 1/tau``; ``0`` is a subgradient at ``z*``, so ``mu ||z -
    z*||^2 <= g^T (z - z*)``).  Coordinatewise that subdifferential is the gradient ``s_i`` of
    the smooth part plus ``l1 sign(z_i)`` (``l1 [-1, 1]`` at ``z_i = 0``) plus the normal cone
    of the box (``[0, inf)`` at ``hi_i``, ``(-inf, 0]`` at ``lo_i``)."""
    s = -X.T @ (y * expit(-y * (X @ z))) / X.shape[0] + 2 * l2 * z + (z - v) / tau
    low = np.where(z == lo, -np.inf, s + l1 * np.where(z > 0, 1.0, -1.0))
    high = np.where(z == hi, np.inf, s + l1 * np.where(z < 0, -1.0, 1.0))
    return np.linalg.norm(np.clip(0.0, low, high)) / (2 * l2 + 1 / tau)


def _reference_error(X, y, l1, l2, v, tau, lo, hi, ref):
    """A certified bound on the reference's distance to the minimizer: :func:`_distance_bound`
    at ``ref`` with its coordinates within 1e-7 of ``0`` or a bound moved there (Clarabel
    stops near them, where the subdifferential of the exact point is an interval), plus that
    move (any such move keeps the bound valid; it only makes it tighter)."""
    snapped = np.where(np.abs(ref) <= 1e-7, 0.0, ref)
    snapped = np.where(np.abs(snapped - lo) <= 1e-7, lo, snapped)
    snapped = np.where(np.abs(snapped - hi) <= 1e-7, hi, snapped)
    return (_distance_bound(X, y, l1, l2, v, tau, lo, hi, snapped)
            + np.linalg.norm(snapped - ref))


def _assert_exact(data, V, tau, lo, hi, Z):
    """Every ``Z[j]`` feasible and equal to the reference to 1e-8, or the reference is the
    inexact one (Clarabel's exponential cone stops early, "optimal_inaccurate", up to 1e-5
    away at the dependency floors): ``Z[j]`` then lies within the reference's certified error
    (:func:`_reference_error`) plus 1e-8, and the reference is worse than ``Z[j]`` by at least
    the quadratic growth ``(mu / 2) ||z_ref - z||^2`` of the ``mu``-strongly convex objective,
    up to its rounding."""
    assert np.all(Z >= lo) and np.all(Z <= hi)
    for j, (X, y, l1, l2) in enumerate(data):
        ref = _reference(X, y, l1, l2, V[j], tau[j], lo[j], hi[j])
        if np.abs(Z[j] - ref).max() <= 1e-8 * (1 + np.abs(ref).max()):
            continue
        f, f_ref = (_objective(X, y, l1, l2, V[j], tau[j], z) for z in (Z[j], ref))
        growth = 0.5 * (2 * l2 + 1 / tau[j]) * np.sum((Z[j] - ref) ** 2)
        err = _reference_error(X, y, l1, l2, V[j], tau[j], lo[j], hi[j], ref)
        assert np.linalg.norm(Z[j] - ref) <= err + 1e-8 * (1 + np.abs(ref).max()), (j, err)
        assert f_ref - f >= growth * (1 - 1e-6) - 1e-13 * (1 + abs(f)), (j, f, f_ref)


@pytest.mark.parametrize("l1, boxed", [(0.3, False), (0.0, True), (0.3, True)])
def test_warm_calls_take_held_newton_steps_and_equal_cvxpy(monkeypatch, l1, boxed):
    """Algorithm 1-like calls (``v`` moves a little, ``tau`` fixed): after the first call every
    node is certified by the Newton steps on the held active sets (no general step, no
    fallback), with bounds binding and ``l1`` zeros exact, and equal to CVXPY to 1e-8."""
    rng = np.random.default_rng(5)
    k, d = 8, 3
    lo, hi = (np.full((k, d), -0.4), np.full((k, d), 0.4)) if boxed else \
        (np.full((k, d), -np.inf), np.full((k, d), np.inf))
    data, batch = _batch(rng, k, d, l1, lo, hi)
    calls = _spy_general_steps(monkeypatch)
    V, tau = 2.0 * rng.standard_normal((k, d)), np.full(k, 3.0)
    Z = batch.prox(V, tau)
    for _ in range(5):
        V = V + 0.01 * rng.standard_normal(V.shape)
        Z = batch.prox(V, tau, Z)
        _assert_exact(data, V, tau, lo, hi, Z)
    assert calls == [k]  # the first call only
    assert batch.fallbacks == 0
    assert np.isin(Z, [-0.4, 0.0, 0.4]).sum() >= 3  # bounds binding or l1 zeros


def test_held_active_sets_update_where_a_bound_or_an_l1_zero_is_crossed(monkeypatch):
    """``v`` moved so that coordinates cross a bound (and leave it) and an ``l1`` zero: the
    held states are updated after an uncertified Newton step (``_held_states``), and the
    answers equal CVXPY's; no fallback."""
    rng = np.random.default_rng(8)
    k, d = 6, 2
    lo, hi = np.full((k, d), -0.5), np.full((k, d), 0.5)
    data, batch = _batch(rng, k, d, 0.2, lo, hi)
    tau = np.full(k, 2.0)
    V = np.tile([0.3, -0.1], (k, 1))
    Z = batch.prox(V, tau)
    updated = []
    orig = composite_newton._held_states

    def spy(*args):
        updated.append(1)
        return orig(*args)

    monkeypatch.setattr(composite_newton, "_held_states", spy)
    for shift in ([1.5, 0.0], [0.0, 0.6], [-1.5, 0.0], [0.0, -2.0], [3.0, 3.0]):
        V = V + np.asarray(shift)
        Z = batch.prox(V, tau, Z)
        _assert_exact(data, V, tau, lo, hi, Z)
    assert updated  # the active sets changed between calls
    assert batch.fallbacks == 0


def test_nonneg_coordinate_with_l1_zero_is_exact():
    """A coordinate whose ``l1`` row and lower bound ``0`` fix it at once (two free rows on
    one coordinate: left to the general steps) is still exact over warm calls."""
    rng = np.random.default_rng(11)
    k, d = 4, 2
    lo, hi = np.zeros((k, d)), np.full((k, d), np.inf)
    data, batch = _batch(rng, k, d, 0.5, lo, hi)
    tau = np.full(k, 1.0)
    V = np.tile([-0.5, 1.0], (k, 1))
    Z = batch.prox(V, tau)
    for _ in range(3):
        V = V + 0.01 * rng.standard_normal(V.shape)
        Z = batch.prox(V, tau, Z)
        _assert_exact(data, V, tau, lo, hi, Z)
    assert np.all(Z[:, 0] == 0.0)
    assert batch.fallbacks == 0


def _padded_kkt(batch, Z, a, mu, g):
    """The true KKT check written on :meth:`_padded`'s rows (its definition): the data rows
    ``P_r = c_r x_r`` with their duals ``ell'(x_r^T z)`` held (``lo = hi``), the ``l1`` and box
    rows with the duals ``a``, by :func:`kkt_certified`."""
    pad = batch._padded()
    P, cq, a = pad["P"].copy(), pad["cq"].copy(), a.copy()
    slot = batch._slot()
    P[batch.local, slot] = batch.c[:, None] * batch.Xs
    cq[:, :batch.max_rows()] = 0.0
    a[batch.local, slot] = batch.cls._ell_d1(np.einsum("rd,rd->r", batch.Xs, Z[batch.local]),
                                             batch.y, batch.p)
    data = np.zeros(a.shape, dtype=bool)
    data[batch.local, slot] = True
    lo, hi = np.where(data, a, pad["lo"]), np.where(data, a, pad["hi"])
    return kkt_certified(P, pad["cs"], cq, lo, hi, pad["fixed"], mu, g, Z, a)


def test_true_kkt_is_kkt_certified_on_the_padded_rows():
    """``true_kkt`` (the structured check: data rows through their sums, unit rows directly)
    decides as :func:`kkt_certified` on the padded rows: at exact answers (all certified), at
    points moved by ``1e-9`` to ``1e-3`` relative, with a held dual's sign flipped, and at a
    point with a ``nan``."""
    rng = np.random.default_rng(21)
    k, d = 60, 3
    lo, hi = np.full((k, d), -0.4), np.full((k, d), 0.4)
    data, batch = _batch(rng, k, d, 0.3, lo, hi)
    V, tau = 2.0 * rng.standard_normal((k, d)), np.full(k, 3.0)
    Z = batch.prox(V, tau)
    mu, g = 2.0 * batch.l2 + 1.0 / tau, V / tau[:, None]
    a = batch._dual_start[1]
    pb, S = batch._newton(), np.arange(k)
    um, rw = pb.units, rows_of(pb.data, S)
    seen = set()
    for scale in (0.0, 1e-9, 1e-6, 1e-3):
        Zp = Z * (1 + scale * rng.standard_normal(Z.shape))
        ap = a.copy()
        if scale == 1e-6:  # a held l1 dual with the wrong sign at some nodes
            U = um["U"][0]
            ap[:10, U] = -ap[:10, U]
        if scale == 1e-3:
            Zp[3, 1] = np.nan
        ours = certified_at(pb, rw, S, S, Zp, ap, mu, g)
        np.testing.assert_array_equal(ours, _padded_kkt(batch, Zp, ap, mu, g))
        seen.update(ours.tolist())
        if scale == 0.0:
            assert ours.all()
    assert seen == {True, False}


def test_many_nodes_with_changing_active_sets_equal_cvxpy(monkeypatch):
    """A few hundred logistic + ``l1`` + box nodes over Algorithm 1-like calls whose ``v``
    moves far enough that active sets change at many nodes: the later held Newton steps run
    on the uncertified nodes only (compact arrays), the general steps on a few nodes only;
    every answer (a sample of nodes per call, all of them in the last) equals CVXPY to 1e-8;
    no fallback."""
    rng = np.random.default_rng(3)
    k, d = 300, 3
    lo, hi = np.full((k, d), -0.5), np.full((k, d), 0.5)
    data, batch = _batch(rng, k, d, 0.2, lo, hi)
    calls = _spy_general_steps(monkeypatch)
    held = []
    orig = composite_newton._held_states

    def spy(pb, Z, aU, stU, nodes):
        held.append(nodes.size)
        return orig(pb, Z, aU, stU, nodes)

    monkeypatch.setattr(composite_newton, "_held_states", spy)
    V, tau = rng.standard_normal((k, d)), np.full(k, 2.0)
    Z = batch.prox(V, tau)
    for it in range(6):
        V = V + (0.4 if it % 2 else 0.05) * rng.standard_normal(V.shape)
        Z = batch.prox(V, tau, Z)
        part = np.arange(k) if it == 5 else rng.choice(k, 25, replace=False)
        _assert_exact([data[j] for j in part], V[part], tau[part], lo[part], hi[part], Z[part])
    assert batch.fallbacks == 0
    assert held and max(held) < k  # held steps after the first: uncertified nodes only
    assert calls[0] == k and any(0 < c < k for c in calls[1:])


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5])
def test_spd_solve_equals_lapack(d):
    """``spd_solve`` (Cholesky written out over the entries for ``d <= 4``) solves batched
    positive definite systems as ``numpy.linalg.solve`` does, to rounding."""
    rng = np.random.default_rng(d)
    A = rng.standard_normal((50, d, d)) * np.logspace(0, 2, d)
    H = A @ A.transpose(0, 2, 1) + 0.1 * np.eye(d)
    b = rng.standard_normal((50, d))
    ref = np.linalg.solve(H, b[:, :, None])[:, :, 0]
    np.testing.assert_allclose(spd_solve(H, b), ref, rtol=1e-9, atol=1e-12)


class _LogisticRows:
    """The logistic row ``ell(t, y) = log(1 + exp(-y t))`` and its derivatives in ``t``,
    written here (the kernel's row callables, no loss class of the package)."""

    @staticmethod
    def _ell(t, y, p):
        return np.logaddexp(0.0, -y * t)

    @staticmethod
    def _ell_d1(t, y, p):
        return -y * expit(-y * t)

    @staticmethod
    def _ell_d2(t, y, p):
        s = expit(y * t)
        return s * (1.0 - s)

    @classmethod
    def _ell_d12(cls, t, y, p):
        return cls._ell_d1(t, y, p), cls._ell_d2(t, y, p)


def _kernel_problem(data, l1, lo, hi):
    """:class:`CompositeNewton` of the nodes ``data`` built from arrays here: the data rows
    (``ell*(a) = a^2 / 2`` models: ``cq = 1`` on ``R``), then ``d`` ``l1`` rows (``e_j``,
    duals in ``[-eta, eta]``), ``d`` upper bound rows (``s = hi``, duals ``>= 0``) and ``d``
    lower bound rows (``s = lo``, duals ``<= 0``)."""
    k, d = lo.shape
    ms = np.array([X.shape[0] for X, *_ in data])
    m = ms.max()
    Xs = np.concatenate([X for X, *_ in data])
    local = np.repeat(np.arange(k), ms)
    starts = np.concatenate([[0], np.cumsum(ms)[:-1]])
    slot = np.arange(Xs.shape[0]) - starts[local]
    c = 1.0 / ms[local]
    eye, zero, inf = np.broadcast_to(np.eye(d), (k, d, d)), np.zeros((k, d)), np.full((k, d),
                                                                                     np.inf)
    P = np.concatenate([np.zeros((k, m, d)), eye, eye, eye], axis=1)
    data_fixed = np.ones((k, m), dtype=bool)
    data_fixed[local, slot] = False
    pad = {"P": P, "cs": np.concatenate([np.zeros((k, m)), zero, hi, lo], axis=1),
           "cq": np.concatenate([(~data_fixed).astype(float), zero, zero, zero], axis=1),
           "lo": np.concatenate([np.where(data_fixed, 0.0, -np.inf), zero - l1, zero, -inf], 1),
           "hi": np.concatenate([np.where(data_fixed, 0.0, np.inf), zero + l1, inf, zero], 1),
           "fixed": np.concatenate([data_fixed, np.zeros((k, 3 * d), dtype=bool)], axis=1),
           "coord": np.concatenate([np.full(m, -1)] + [np.arange(d)] * 3)}
    cX = c[:, None] * Xs
    rows = {"Xs": Xs, "y": np.concatenate([y for _, y, *_ in data]), "p": None, "c": c,
            "cX": cX, "acX": np.abs(cX), "cXX": cX[:, :, None] * Xs[:, None, :], "slot": slot,
            "local": local, "starts": starts, "ms": ms}
    return CompositeNewton(_LogisticRows, rows, pad, unit_rows(pad, d), np.full(k, l1))


def test_the_kernel_on_arrays_equals_cvxpy_cold_and_warm(monkeypatch):
    """``composite_prox_newton`` called on arrays built here (a row loss written here, no
    batch): a cold call (general steps only) and warm calls from its active sets and the
    first-order start (held Newton steps certify every node, no general step) equal the
    independent CVXPY prox; every node certified."""
    rng = np.random.default_rng(31)
    k, d, l1 = 8, 3, 0.2
    lo, hi = np.full((k, d), -0.5), np.full((k, d), 0.5)
    data = []
    for _ in range(k):
        X = rng.standard_normal((int(rng.integers(2, 6)), d)) * np.logspace(0, 1, d)
        y = np.sign(X @ np.ones(d) + 0.5 * rng.standard_normal(X.shape[0]))
        y[y == 0] = 1.0
        data.append((X, y, l1, 0.0))
    pb = _kernel_problem(data, l1, lo, hi)
    tau = np.full(k, 2.0)
    mu = 1.0 / tau
    V = rng.standard_normal((k, d))
    Z = np.clip(V, lo, hi)
    done, start, H = composite_prox_newton(pb, Z, mu, V / tau[:, None], None)
    assert done.all()
    _assert_exact(data, V, tau, lo, hi, Z)
    calls = _spy_general_steps(monkeypatch)
    for _ in range(3):
        last = {"mu": mu, "g": V / tau[:, None], "Z": Z.copy(), "H": H}
        V = V + 0.01 * rng.standard_normal(V.shape)
        g = V / tau[:, None]
        Z = np.clip(predicted_start(pb, last, mu, g, start), lo, hi)
        done, start, H = composite_prox_newton(pb, Z, mu, g, start)
        assert done.all()
        _assert_exact(data, V, tau, lo, hi, Z)
    assert calls == []  # the held Newton steps certified every node
