"""Compiled (numba) node loops of the exact small-``d`` node updates PU (32) of paper 001:
every node's whole active-set iteration in one pass over the nodes, so that a node costs its
own steps and nothing else (the numpy versions pay a fixed cost per step for all the nodes
still moving, most of a call's time at average degree 10, where early iterations move many
active sets).

- :func:`~gtvmodel.kernels.nodebox.box_dual_pass` (in :mod:`gtvmodel.kernels.nodebox`): the
  steps of :func:`~gtvmodel.kernels.boxqp.dual_active_set_prox` (the box QP of the row duals
  of hinge and absolute losses, with ``l1``, box rows and Euclidean balls those of the
  composite prox), node by node.
- :func:`logistic_newton_pass`: the damped Newton method of
  :func:`~gtvmodel.kernels.newton.newton_minimize` for logistic rows, node by node (same
  steps, Armijo rule and stops).
- :func:`logistic_composite_pass`: logistic losses with ``l1`` and a coordinate box by a
  projected Newton method node by node, every answer certified by the KKT conditions.
- :func:`kkt_pass`: the KKT check :func:`~gtvmodel.kernels.composite.kkt_certified` of the
  composite prox node by node (one pass over each node's rows, no ``(k, R, d)``
  temporaries), and its next active sets :func:`next_states_pass`.

Optional: numba is imported only by the ``compiled_*`` functions (``gtvmodel[fast]``); the
callers keep their numpy paths, which stay the reference.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np

from .._compiled import Compiled

__all__ = ["logistic_newton_pass",
           "compiled_logistic_newton", "kkt_pass", "compiled_kkt", "next_states_pass",
           "compiled_next_states", "logistic_composite_pass", "compiled_logistic_composite",
           "COMPILED_MIN_NODES"]

#: Calls on fewer nodes stay on the numpy path with ``compiled=None`` (the numba import and
#: the cache load cost more than such a call).
COMPILED_MIN_NODES = 256


def logistic_newton_pass(X, y, c, ends, mu, g, Z, lip, H, max_iter, predict, mu0, g0
                         ):  # unannotated: compiled by numba
    """Damped Newton (:func:`~gtvmodel.kernels.newton.newton_minimize`) on ``F_i(z) = sum_r
    c_r log(1 + exp(-y_r x_r^T z)) + mu_i ||z||^2 / 2 - g_i^T z`` node by node, in place on
    ``Z`` (the starts).  Node ``i`` owns the rows ``ends[i]:ends[i + 1]`` of ``X`` ``(M,
    d)``, ``y``, ``c``.  Per step: the gradient (a node stops where ``||grad|| <= mu 1e-15 (1
    + ||z||_inf)``), the Hessian ``sum_r c_r s_r (1 - s_r) x_r x_r^T + mu I`` (written into
    ``H[i]``, the next call's predictor), the Newton step by Cholesky; the full step where
    ``lip_i ||step|| <= 1.5 mu`` (``lip``: a Lipschitz constant of the Hessian of ``L_i``:
    the cubic bound makes it a descent), else Armijo backtracking ``F(z - s step) <= F(z) - s
    dec / 4 + 1e-13 (1 + |F(z)|)`` (40 halvings at most, then the node stops unmoved); it
    stops after a move below ``1e-15 (1 + ||z||_inf)``, a negligible decrement ``dec <= 1e-30
    (1 + |F|)``, or a full step whose quadratic-convergence bound ``lip / (2 mu) (||grad|| /
    mu)^2`` is below ``1e-15 (1 + ||z+||_inf)``.  With ``predict``, ``Z`` and ``H`` are the
    last call's answer and Hessian for ``(mu0, g0)`` and each node starts from
    :func:`~gtvmodel.kernels.newton.newton_predictor`'s point (one Newton step of the new
    ``F`` from the old answer with the old Hessian shifted by ``mu - mu0``)."""
    k, d = Z.shape
    G = np.empty(d)
    step = np.empty(d)
    zt = np.empty(d)
    L = np.empty((d, d))
    for i in range(k):
        r0, r1, mi, z = ends[i], ends[i + 1], mu[i], Z[i]
        F = np.nan
        if predict:
            dmu = mi - mu0[i]
            for j in range(d):
                G[j] = dmu * z[j] - (g[i, j] - g0[i, j])
                H[i, j, j] += dmu
            _cholesky_solve(H[i], G, step, L)
            for j in range(d):
                z[j] -= step[j]
        for _ in range(max_iter):
            gnorm, zinf = _logistic_derivatives(X, y, c, r0, r1, mi, g[i], z, G, H[i], zt)
            if gnorm <= mi * 1e-15 * (1.0 + zinf):
                break
            _cholesky_solve(H[i], G, step, L)
            snorm, dec = 0.0, 0.0
            for j in range(d):
                snorm += step[j] * step[j]
                dec += G[j] * step[j]
            ts, tiny = 1.0, False
            if lip[i] * np.sqrt(snorm) <= 1.5 * mi:
                F = np.nan  # moved without an evaluation
            else:
                if np.isnan(F):
                    F = _logistic_value(X, y, c, r0, r1, mi, g[i], z)
                ts, F = _armijo(X, y, c, r0, r1, mi, g[i], z, step, zt, F, dec)
                if ts == 0.0:
                    break  # rejected after 40 halvings: unmoved
                tiny = dec <= 1e-30 * (1.0 + abs(F))
            small, znew_inf = True, 0.0
            for j in range(d):
                mv = ts * step[j]
                small = small and abs(mv) <= 1e-15 * (1.0 + zinf)
                z[j] -= mv
                znew_inf = max(znew_inf, abs(z[j]))
            if small or tiny or (ts == 1.0 and 0.5 * lip[i] / mi * (gnorm / mi) ** 2
                                 <= 1e-15 * (1.0 + znew_inf)):
                break


def _expit(u):  # unannotated: compiled by numba
    """``1 / (1 + exp(-u))`` without overflow."""
    if u >= 0.0:
        return 1.0 / (1.0 + np.exp(-u))
    e = np.exp(u)
    return e / (1.0 + e)


def _logistic_derivatives(X, y, c, r0, r1, mu, g, z, G, H, S
                          ):  # unannotated: compiled by numba
    """The gradient ``G`` and Hessian ``H`` of :func:`logistic_newton_pass`'s ``F`` at ``z``,
    and the gradient's scale ``S = |mu z| + |g| + sum_r |c_r ell'_r x_r|`` (the magnitudes it
    sums); returns ``(||G||, ||z||_inf)``."""
    d = z.shape[0]
    for j in range(d):
        G[j] = mu * z[j] - g[j]
        S[j] = abs(mu * z[j]) + abs(g[j])
        for q in range(d):
            H[j, q] = mu if j == q else 0.0
    for r in range(r0, r1):
        t = 0.0
        for j in range(d):
            t += X[r, j] * z[j]
        s = _expit(-y[r] * t)
        d1 = c[r] * (-y[r] * s)
        d2 = c[r] * s * (1.0 - s)
        for j in range(d):
            G[j] += d1 * X[r, j]
            S[j] += abs(d1 * X[r, j])
            for q in range(d):
                H[j, q] += d2 * X[r, j] * X[r, q]
    gn, zinf = 0.0, 0.0
    for j in range(d):
        gn += G[j] * G[j]
        zinf = max(zinf, abs(z[j]))
    return np.sqrt(gn), zinf


def _logistic_value(X, y, c, r0, r1, mu, g, z):  # unannotated: compiled by numba
    """``F(z)`` of :func:`logistic_newton_pass` (``log(1 + exp(u))`` without overflow)."""
    d = z.shape[0]
    val = 0.0
    for j in range(d):
        val += 0.5 * mu * z[j] * z[j] - g[j] * z[j]
    for r in range(r0, r1):
        t = 0.0
        for j in range(d):
            t += X[r, j] * z[j]
        u = -y[r] * t
        val += c[r] * (max(u, 0.0) + np.log1p(np.exp(-abs(u))))
    return val


def _armijo(X, y, c, r0, r1, mu, g, z, step, zt, F, dec):  # unannotated: compiled by numba
    """The largest ``s = 2^-j`` (``j < 40``) with ``F(z - s step) <= F - s dec / 4 + 1e-13 (1
    + |F|)``, and ``F`` there; ``(0, F)`` where none."""
    s = 1.0
    for _ in range(40):
        for j in range(z.shape[0]):
            zt[j] = z[j] - s * step[j]
        Ft = _logistic_value(X, y, c, r0, r1, mu, g, zt)
        if Ft <= F - 0.25 * s * dec + 1e-13 * (1.0 + abs(F)):
            return s, Ft
        s *= 0.5
    return 0.0, F


def _cholesky_solve(A, b, x, L):  # unannotated: compiled by numba
    """``x = A^-1 b`` for a symmetric positive definite ``A`` (``d x d``) by Cholesky
    (``L`` work space)."""
    d = b.shape[0]
    for j in range(d):
        L[j, j] = A[j, j]
        for q in range(j):
            L[j, j] -= L[j, q] * L[j, q]
        L[j, j] = np.sqrt(L[j, j])
        for r in range(j + 1, d):
            L[r, j] = A[r, j]
            for q in range(j):
                L[r, j] -= L[r, q] * L[j, q]
            L[r, j] /= L[j, j]
    for j in range(d):
        x[j] = b[j]
        for q in range(j):
            x[j] -= L[j, q] * x[q]
        x[j] /= L[j, j]
    for j in range(d - 1, -1, -1):
        for q in range(j + 1, d):
            x[j] -= L[q, j] * x[q]
        x[j] /= L[j, j]


@functools.cache
def compiled_logistic_newton() -> Compiled:
    """numba's compiled :func:`logistic_newton_pass` (built on the first call, cached on
    disk); ``ImportError`` without numba."""
    _register_helpers()
    return Compiled(importlib.import_module("numba"), logistic_newton_pass)


def kkt_pass(P, cs, cq, lo, hi, fixed, mu, g, Z, a, rtol, ok):  # unannotated: numba
    """``ok[i]``: the conditions of :func:`~gtvmodel.kernels.composite.kkt_certified` (without
    balls; ``mu`` already holds ``mu + nu``) at node ``i``, each summed in one pass over the
    node's rows: stationarity ``|mu z - g + P^T a| <= rtol (|mu z| + |g| + |P|^T |a|)``
    per coordinate; every non-padding dual in ``[lo_r, hi_r]`` with ``grad_r = cs_r + cq_r
    a_r - P_r z`` at most ``tol_r`` where ``a_r > lo_r`` and at least ``-tol_r`` where ``a_r <
    hi_r``, ``tol_r = rtol (|cs_r| + cq_r |a_r| + |P_r|^T |z|) + |P_r|^T
    |mu z - g + P^T a| / mu``;
    ``z`` and ``a`` finite (a NaN fails every comparison)."""
    k, R, d = P.shape
    stat = np.empty(d)
    scale = np.empty(d)
    for i in range(k):
        mi = mu[i]
        good = True
        for j in range(d):
            mz = mi * Z[i, j]
            stat[j] = mz - g[i, j]
            scale[j] = abs(mz) + abs(g[i, j])
            good = good and np.isfinite(Z[i, j])
        for r in range(R):
            ar = 0.0 if fixed[i, r] else a[i, r]
            good = good and np.isfinite(ar)
            for j in range(d):
                stat[j] += P[i, r, j] * ar
                scale[j] += abs(P[i, r, j]) * abs(ar)
        for j in range(d):
            good = good and abs(stat[j]) <= rtol * scale[j]
        for r in range(R):
            if not good:
                break
            if fixed[i, r]:
                continue
            ar = a[i, r]
            pz, zs, shift = 0.0, 0.0, 0.0
            for j in range(d):
                pz += P[i, r, j] * Z[i, j]
                zs += abs(P[i, r, j]) * abs(Z[i, j])
                shift += abs(P[i, r, j]) * (abs(stat[j]) / mi)
            grad = cs[i, r] + cq[i, r] * ar - pz
            tol = rtol * (abs(cs[i, r]) + cq[i, r] * abs(ar) + zs) + shift
            good = (ar >= lo[i, r] and ar <= hi[i, r] and (ar <= lo[i, r] or grad <= tol)
                    and (ar >= hi[i, r] or grad >= -tol))
        ok[i] = good


@functools.cache
def compiled_kkt() -> Compiled:
    """numba's compiled :func:`kkt_pass` (built on the first call, cached on disk);
    ``ImportError`` without numba."""
    return Compiled(importlib.import_module("numba"), kkt_pass)


def next_states_pass(P, cs, cq, lo, hi, fixed, tol_s, tol_p, tol_q, gamma, nlo, nhi, ix, a, Z,
                     free, state, grad):  # unannotated: compiled by numba
    """``kernels.composite._next_states`` of the nodes ``ix`` (positions in the row arrays;
    ``a``, ``Z``, ``free``, and the outputs ``state`` (int8) and ``grad`` are the nodes' own
    rows, in the order of ``ix``): ``grad_r = cs_r + cq_r a_r - P_r z``, at most ``tol_r =
    tol_s + tol_p ||z||_1 + tol_q |a_r|`` counts as zero; a free row whose gradient is not
    zero goes to the bound it points to, else the trial point ``a_r - gamma_r grad_r`` decides
    (``-1`` at or below ``lo``, ``+1`` at or above ``hi``); padding is held (``-1``); never
    at an infinite bound (state 0 there)."""
    n, R = a.shape
    d = Z.shape[1]
    for q in range(n):
        i = ix[q]
        zn1 = 0.0
        for j in range(d):
            zn1 += abs(Z[q, j])
        for r in range(R):
            pz = 0.0
            for j in range(d):
                pz += P[i, r, j] * Z[q, j]
            gr = cs[i, r] - pz
            tol = tol_s[i, r] + tol_p[i, r] * zn1
            if cq[i, r] != 0.0:  # (rows without q: a does not enter, nor its rounding)
                gr += cq[i, r] * a[q, r]
                tol += tol_q[i, r] * abs(a[q, r])
            grad[q, r] = gr
            big = abs(gr) > tol
            trial = a[q, r] - gamma[i, r] * gr if big else a[q, r]
            if free[q, r] and big:
                down, up = gr > 0, gr < 0
            else:
                down, up = trial <= lo[i, r], trial >= hi[i, r]
            down = down or fixed[i, r]
            up = up and not down
            state[q, r] = (1 if up and nhi[i, r] else 0) - (1 if down and nlo[i, r] else 0)


@functools.cache
def compiled_next_states() -> Compiled:
    """numba's compiled :func:`next_states_pass` (built on the first call, cached on disk);
    ``ImportError`` without numba."""
    return Compiled(importlib.import_module("numba"), next_states_pass)


def logistic_composite_pass(X, y, c, ends, mu, g, eta, lo, hi, Z, lip, max_iter, rtol, ok,
                            Hk, predict, mu0, g0):  # unannotated: compiled by numba
    """PU (32) of logistic losses with ``l1`` and a coordinate box, node by node: ``argmin_z
    F(z) = f(z) + eta_i ||z||_1`` over ``lo_i <= z <= hi_i``, ``f(z) = sum_r c_r log(1 +
    exp(-y_r x_r^T z)) + mu_i ||z||^2 / 2 - g_i^T z`` (rows ``ends[i]:ends[i + 1]``), from
    ``Z`` (inside the box), in place.

    Projected Newton on the coordinates' sign pattern: a coordinate at ``0`` whose gradient
    is within ``eta`` and one at a bound whose gradient (with the ``l1`` term on the side it
    would move to) pushes outwards are held; the others move along the Newton step of ``f +
    eta s^T z`` on them (``s``: their signs, or the side they leave ``0`` or a bound to),
    projected back onto the box and the signs' orthants (a coordinate that would cross ``0``
    stops exactly there), with Armijo backtracking on ``F`` (the full step is taken without
    evaluating ``F`` where no projection binds and ``lip_i ||step|| <= 1.5 mu_i``, ``lip``
    a Lipschitz constant of the Hessian of the data term: then ``F`` is smooth on the segment
    and the cubic bound gives the Armijo decrease).  A node is done (``ok[i]``) when
    its KKT conditions hold: every coordinate's minimum-norm subgradient of ``F`` (the box's
    normal cone included) is at most ``rtol (|mu z_j| + |g_j| + sum_r |c_r ell'_r x_rj| +
    eta)``; ``ok[i]`` False after ``max_iter`` steps or a failed line search (the caller's
    fallback).  ``Hk`` ``(k, d, d)`` receives each node's last Hessian of ``f``; with
    ``predict``, ``Z`` and ``Hk`` are the last call's answer and Hessian for ``(mu0, g0)``,
    and each node starts from that answer moved to first order on its free coordinates
    (nonzero, strictly inside the box): ``-H_FF^-1 ((mu - mu0) z - (g - g0))_F``, projected
    back onto the box and the coordinates' orthants."""
    k, d = Z.shape
    G = np.empty(d)
    S = np.empty(d)
    s = np.empty(d)
    step = np.empty(d)
    zt = np.empty(d)
    A = np.empty((d, d))
    L = np.empty((d, d))
    work = np.empty(d)
    free = np.empty(d, dtype=np.bool_)
    z, gi, loi, hii, H = np.empty(d), np.empty(d), np.empty(d), np.empty(d), np.empty((d, d))
    for i in range(k):
        ok[i] = False
        r0, r1 = ends[i], ends[i + 1]
        for j in range(d):  # the node's vectors copied once (not a view per helper call)
            z[j], gi[j], loi[j], hii[j] = Z[i, j], g[i, j], lo[i, j], hi[i, j]
            for q in range(d):
                H[j, q] = Hk[i, j, q]
        if predict:
            _predicted(z, H, mu[i] - mu0[i], gi, g0[i], loi, hii, G, s, free, step, L, A, work)
        for _ in range(max_iter):
            _logistic_derivatives(X, y, c, r0, r1, mu[i], gi, z, G, H, S)
            if _sign_pattern(z, G, S, eta[i], loi, hii, rtol, s, free):
                ok[i] = True
                break
            nf = _free_newton_step(H, G, s, eta[i], free, step, L, A, work)
            if nf == 0:
                break
            if _full_step_sure(z, step, s, free, loi, hii, lip[i], mu[i]):
                for j in range(d):
                    z[j] += step[j]
            elif not _projected_search(X, y, c, r0, r1, mu[i], gi, eta[i], loi, hii, z, step,
                                       s, free, zt, G):
                break
        for j in range(d):
            Z[i, j] = z[j]
            for q in range(d):
                Hk[i, j, q] = H[j, q]


def _sign_pattern(z, G, S, eta, lo, hi, rtol, s, free):  # unannotated: compiled by numba
    """The KKT check of :func:`logistic_composite_pass` at ``z`` (gradient ``G`` of ``f``,
    scale ``S``; returns whether it holds) and the coordinates that move (``free``) with the
    sign ``s`` of their ``l1`` term on the side they move to."""
    good = True
    for j in range(z.shape[0]):
        zj, gj = z[j], G[j]
        if lo[j] == hi[j]:
            res, free[j], s[j] = 0.0, False, 0.0
        elif zj <= lo[j]:  # may move up: l1 slope of the side above lo
            s[j] = 1.0 if lo[j] >= 0.0 else -1.0
            res = min(gj + eta * s[j], 0.0)
            free[j] = gj + eta * s[j] < 0.0
        elif zj >= hi[j]:
            s[j] = -1.0 if hi[j] <= 0.0 else 1.0
            res = max(gj + eta * s[j], 0.0)
            free[j] = gj + eta * s[j] > 0.0
        elif zj == 0.0:
            res = max(abs(gj) - eta, 0.0)
            free[j] = abs(gj) > eta
            s[j] = -1.0 if gj > 0.0 else 1.0  # it leaves 0 against its gradient
        else:
            s[j] = 1.0 if zj > 0.0 else -1.0
            res, free[j] = gj + eta * s[j], True
        good = good and abs(res) <= rtol * (S[j] + eta)
    return good


def _free_newton_step(H, G, s, eta, free, step, L, A, work
                      ):  # unannotated: compiled by numba
    """The Newton step of ``f + eta s^T z`` on the ``free`` coordinates (``-H_FF^-1 (G + eta
    s)_F``, 0 elsewhere) into ``step``: one Cholesky solve of ``H`` with the held
    coordinates' rows and columns replaced by the identity's and their right sides 0 (block
    diagonal, the free block's arithmetic that of ``H_FF`` alone); returns the number of free
    coordinates (``work``: work space)."""
    d = G.shape[0]
    nf = 0
    b = work  # (the right side)
    for a in range(d):
        fa = free[a]
        nf += 1 if fa else 0
        b[a] = -(G[a] + eta * s[a]) if fa else 0.0
        for e in range(d):
            A[a, e] = H[a, e] if fa and free[e] else (1.0 if a == e else 0.0)
    if nf:
        _cholesky_solve(A, b, step, L)
    else:
        for j in range(d):
            step[j] = 0.0
    return nf


def _predicted(z, H, dmu, g, g0, lo, hi, G, s, free, step, L, A, work
               ):  # unannotated: compiled by numba
    """The start of :func:`logistic_composite_pass` from the last answer ``z`` (moved in
    place): the first-order change of the minimizer on the free coordinates (nonzero,
    strictly inside the box) for the change ``dmu``, ``g - g0`` of ``f``, with the last
    Hessian ``H`` (shifted by ``dmu``), projected onto the box and the orthants."""
    d = z.shape[0]
    for j in range(d):
        free[j] = z[j] != 0.0 and lo[j] < z[j] < hi[j]
        s[j] = 0.0
        G[j] = dmu * z[j] - (g[j] - g0[j])
        H[j, j] += dmu
    _free_newton_step(H, G, s, 0.0, free, step, L, A, work)
    for j in range(d):
        if free[j]:
            v = min(max(z[j] + step[j], lo[j]), hi[j])
            z[j] = 0.0 if v * z[j] < 0.0 else v


def _full_step_sure(z, step, s, free, lo, hi, lip, mu):  # unannotated: compiled by numba
    """Whether the full step of :func:`logistic_composite_pass` needs no line search: every
    free coordinate stays in its box and its sign's orthant (no projection), and ``lip
    ||step|| <= 1.5 mu`` (the cubic bound then gives the Armijo decrease of the smooth
    restriction)."""
    n2 = 0.0
    for j in range(z.shape[0]):
        if free[j]:
            v = z[j] + step[j]
            if v < lo[j] or v > hi[j] or s[j] * v < 0.0:
                return False
        n2 += step[j] * step[j]
    return lip * np.sqrt(n2) <= 1.5 * mu


def _projected_search(X, y, c, r0, r1, mu, g, eta, lo, hi, z, step, s, free, zt, G
                      ):  # unannotated: compiled by numba
    """Armijo backtracking along the projected path ``P(z + t step)`` (box, and the free
    coordinates' sign orthants): the largest ``t = 2^-j`` (``j < 40``) with ``F(P(z + t
    step)) <= F(z) - dec_t / 4 + 1e-13 (1 + |F(z)|)``, ``dec_t = -(G + eta s)^T (P(z + t
    step) - z)``; ``z`` moved there and True, or unmoved and False."""
    d = z.shape[0]
    F0 = _logistic_value(X, y, c, r0, r1, mu, g, z) + eta * _norm1(z)
    t = 1.0
    for _ in range(40):
        dec = 0.0
        for j in range(d):
            v = z[j] + t * step[j] if free[j] else z[j]
            v = min(max(v, lo[j]), hi[j])
            if free[j] and s[j] * v < 0.0 and lo[j] <= 0.0 <= hi[j]:
                v = 0.0  # the orthant's face: exactly 0
            zt[j] = v
            dec -= (G[j] + eta * s[j]) * (v - z[j]) if free[j] else 0.0
        Ft = _logistic_value(X, y, c, r0, r1, mu, g, zt) + eta * _norm1(zt)
        if Ft <= F0 - 0.25 * max(dec, 0.0) + 1e-13 * (1.0 + abs(F0)):
            moved = False
            for j in range(d):
                moved = moved or zt[j] != z[j]
                z[j] = zt[j]
            return moved
        t *= 0.5
    return False


def _norm1(z):  # unannotated: compiled by numba
    out = 0.0
    for j in range(z.shape[0]):
        out += abs(z[j])
    return out


@functools.cache
def compiled_logistic_composite() -> Compiled:
    """numba's compiled :func:`logistic_composite_pass` (built on the first call, cached on
    disk); ``ImportError`` without numba."""
    _register_helpers()
    return Compiled(importlib.import_module("numba"), logistic_composite_pass)


@functools.cache
def _register_helpers() -> None:
    """The node loops' helpers made callable from numba's compiled code, once (those called
    per node and step inlined: a call passing a dozen arrays costs more than their work);
    ``ImportError`` without numba."""
    extending = importlib.import_module("numba.extending")
    for helper in (_expit, _logistic_derivatives, _sign_pattern, _free_newton_step,
                   _full_step_sure, _predicted, _cholesky_solve):
        extending.register_jitable(inline="always")(helper)
    # called from several places (inlined there, numba's SSA check warns at compile time) or
    # rarely (a changed active set, a restart: inlining them only costs compile time)
    for helper in (_logistic_value, _armijo, _projected_search, _norm1):
        extending.register_jitable(helper)
