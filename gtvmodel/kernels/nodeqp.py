"""Compiled (numba) node loops of the exact small-``d`` node updates PU (32) of paper 001:
every node's whole active-set iteration in one pass over the nodes, so that a node costs its
own steps and nothing else (the numpy versions pay a fixed cost per step for all the nodes
still moving, most of a call's time at average degree 10, where early iterations move many
active sets).

- :func:`box_dual_pass`: the steps of :func:`~gtvmodel.kernels.boxqp.dual_active_set_prox`
  (the box QP of the row duals of hinge and absolute losses), node by node, with the same
  active-set rule, anti-cycling rule, stop test and pseudo-inverse cache.
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

__all__ = ["box_dual_pass", "compiled_box_dual", "logistic_newton_pass",
           "compiled_logistic_newton", "kkt_pass", "compiled_kkt", "next_states_pass",
           "compiled_next_states", "logistic_composite_pass", "compiled_logistic_composite",
           "COMPILED_MIN_NODES"]

#: Calls on fewer nodes stay on the numpy path with ``compiled=None`` (the numba import and
#: the cache load cost more than such a call).
COMPILED_MIN_NODES = 256


def box_dual_pass(P, cs, lo, hi, fixed, mu, g, rtol, state, a_prev, Z, cstate, cpinv,
                  max_iter, done, radius, nu):  # unannotated: compiled by numba
    """Up to ``max_iter`` active-set steps of
    :func:`~gtvmodel.kernels.boxqp.dual_active_set_prox` on every node, in place.

    Per node ``i`` and step: the held rows' duals ``a_r`` (``lo_r`` / ``hi_r`` where
    ``state = -1`` / ``+1``, 0 on padding rows ``fixed``), ``h = (g - sum_held a_r P_r) /
    mu``; ``z = h + pinv(P_F) (cs_F - P_F h)`` (the projection onto the free rows' equations,
    least squares where they are inconsistent) plus one step of iterative refinement; the
    free rows' duals ``a_F = a0 + pinv(P_F)^T (mu (h - z) - P_F^T a0)`` nearest the previous
    ones ``a0``; then the next set by the primal-dual rule (a gradient ``grad_r = cs_r - P_r
    z`` within ``rtol (|cs_r| + ||P_r|| ||z||_1)`` counts as zero; a free row whose equation
    is not met goes to the bound its gradient points to; from the 7th step on only the most
    violated row changes; a dual is never held at an infinite bound, that row stays free:
    the box rows of :func:`~gtvmodel.kernels.composite.composite_active_set_prox`).  A node
    stops when its set repeats (``done[i]`` True): the KKT
    conditions of the box QP hold, ``Z[i]`` is the exact minimizer to rounding.  A node
    still cycling after ``max_iter`` steps restarts once from a projected-gradient point
    (:func:`_restart`) and takes up to ``max_iter`` steps again; ``done[i]`` False after
    that: the caller's fallback.

    ``P`` ``(k, m, d)``; ``cs``, ``lo``, ``hi``, ``fixed`` ``(k, m)``; ``mu`` ``(k,)``; ``g``
    ``(k, d)``; ``state`` (int8), ``a_prev`` ``(k, m)`` and ``Z`` ``(k, d)`` are read as the
    start and overwritten; ``cstate`` / ``cpinv`` ``(k, m)`` / ``(k, d, m)``: every node's
    last active set and its free rows' pseudo-inverse (``numpy.linalg.pinv``, ``rcond =
    1e-15``), reused while the set is unchanged and updated here.  ``radius`` ``(k,)``
    (empty: none): Euclidean balls ``||z_i|| <= radius_i`` (``inf``: none), their multipliers
    written into ``nu`` (:func:`_ball_step`; the restart with ``mu + nu``).
    """
    k, m, d = P.shape
    w = np.empty((5, max(m, d)))  # work rows: h, z, t | a, grad, gamma, norms
    new = np.empty(m, dtype=np.int8)
    pf = np.empty((m, d))
    vb = np.empty((d, d))
    balls = radius.shape[0] > 0
    for i in range(k):
        done[i] = False
        ri = radius[i] if balls else np.inf
        nui = 0.0
        for r in range(m):
            s2 = 0.0
            for j in range(d):
                s2 += P[i, r, j] * P[i, r, j]
            w[3, r] = np.sqrt(s2)
            w[4, r] = mu[i] / max(s2, 1e-300)
        for phase in range(2):
            for it in range(max_iter):
                nui = _box_point(P[i], cs[i], lo[i], hi[i], fixed[i], mu[i], g[i], state[i],
                                 a_prev[i], Z[i], cstate[i], cpinv[i], pf, vb, w, ri)
                if not _box_next_set(P[i], cs[i], lo[i], hi[i], fixed[i], rtol, state[i],
                                     a_prev[i], Z[i], w[4, :m], w[3, :m], w[0, :m], it, new):
                    done[i] = True
                    break
            if done[i] or phase == 1:
                break
            # cycling: near the solution by projected gradients, the set read off there
            _restart(P[i], cs[i], lo[i], hi[i], fixed[i], mu[i] + nui, g[i], rtol,
                     w[4, :m], w[3, :m], pf, vb, a_prev[i], Z[i], state[i], w[0, :m],
                     w[1, :m], w[2, :d])
        if balls:
            nu[i] = nui


def _box_point(P, cs, lo, hi, fixed, mu, g, state, a_prev, z, cstate, cpinv, pf, vb, w, radius
               ):  # unannotated: compiled by numba
    """One node's point for its active set ``state`` (:func:`box_dual_pass`): ``z`` and the
    row duals ``a_prev`` written; the free rows' pseudo-inverse ``cpinv`` recomputed
    (:func:`_pinv_jacobi`) where ``state`` is not the cached ``cstate``; ``w``: work rows;
    inside the ball ``||z|| <= radius`` (``inf``: none) by :func:`_ball_step`, the duals then
    with ``mu + nu``; returns ``nu``."""
    m, d = P.shape
    h, t = w[0], w[2]
    for j in range(d):
        h[j] = g[j]
    nfree, same = 0, True
    for r in range(m):
        s = state[r]
        same = same and cstate[r] == s
        if s == 0:
            nfree += 1
        elif not fixed[r]:
            af = lo[r] if s < 0 else hi[r]
            for j in range(d):
                h[j] -= P[r, j] * af
    for j in range(d):
        h[j] /= mu
        z[j] = h[j]
    if not same:
        cstate[:] = state
        cpinv[:, :] = 0.0
        if nfree:
            for r in range(m):
                for j in range(d):
                    pf[r, j] = P[r, j] if state[r] == 0 else 0.0
            _pinv_jacobi(pf, vb, cpinv)
    ball = radius < np.inf
    z0 = w[1, :d]
    for j in range(d):
        z0[j] = 0.0
    _project_free(P, cs, state, cpinv, z, z0, ball and nfree > 0, t)
    nu = _ball_step(z, z0, mu, radius) if ball else 0.0
    for j in range(d):  # the free rows' duals nearest the previous ones
        s = mu * h[j] - (mu + nu) * z[j]
        for r in range(m):
            if state[r] == 0:
                s -= P[r, j] * a_prev[r]
        t[j] = s
    for r in range(m):
        st = state[r]
        if st == 0:
            s = a_prev[r]
            for j in range(d):
                s += cpinv[j, r] * t[j]
            a_prev[r] = s
        else:
            a_prev[r] = 0.0 if fixed[r] else (lo[r] if st < 0 else hi[r])
    return nu


def _project_free(P, cs, state, cpinv, z, z0, both, t):  # unannotated: compiled by numba
    """``z`` (and, with ``both``, ``z0``) projected onto the free rows' equations ``P_r z =
    cs_r`` (``state = 0``) by their pseudo-inverse ``cpinv``, refined once, in place (``t``:
    work space; one call site, so that numba inlines it once)."""
    m, d = P.shape
    for v in range(2 if both else 1):
        x = z if v == 0 else z0
        for _ in range(2):
            for j in range(d):
                t[j] = 0.0
            for r in range(m):
                if state[r] == 0:
                    s = cs[r]
                    for j in range(d):
                        s -= P[r, j] * x[j]
                    for j in range(d):
                        t[j] += cpinv[j, r] * s
            for j in range(d):
                x[j] += t[j]


def _ball_step(z, z0, mu, radius):  # unannotated: compiled by numba
    """The point of :func:`_box_point` inside the ball ``||z|| <= radius``, in place on
    ``z`` (the projection ``z_a`` of ``h`` onto the free rows' equations), and its
    multiplier ``nu``: with ``H = mu I`` the minimizer on the affine set with multiplier
    ``nu`` is ``z0 + (z_a - z0) mu / (mu + nu)`` (``z0``: the affine set's least-norm point,
    the projection of 0, orthogonal to ``z_a - z0``), so where ``||z_a|| > radius``,
    ``||z_a - z0|| > rho = sqrt(radius^2 - ||z0||^2)`` (at least ``1e-8 radius``: rows that
    leave no point in the ball must change) gives ``nu = mu (||z_a - z0|| / rho - 1)`` and
    ``||z - z0|| = rho`` (``kernels.steps._ball_solve`` where no row has ``q > 0``); else
    ``nu = 0``."""
    d = z.shape[0]
    zz = 0.0
    for j in range(d):
        zz += z[j] * z[j]
    if zz <= radius * radius:
        return 0.0
    n0, ny = 0.0, 0.0
    for j in range(d):
        n0 += z0[j] * z0[j]
        ny += (z[j] - z0[j]) * (z[j] - z0[j])
    ny = np.sqrt(ny)
    rho = np.sqrt(max(radius * radius - n0, (1e-8 * radius) ** 2))
    if ny <= rho:
        return 0.0
    for j in range(d):
        z[j] = z0[j] + (z[j] - z0[j]) * (rho / ny)
    return mu * (ny / rho - 1.0)


def _box_next_set(P, cs, lo, hi, fixed, rtol, state, a, z, gam, pn, grad, it, new
                  ):  # unannotated: compiled by numba
    """One node's next active set (``boxqp._box_active_set``, from step 7 on
    ``boxqp._most_violated_change``) at its point ``z`` and duals ``a``, written into
    ``state``; returns whether it changed."""
    m, d = P.shape
    zn1 = 0.0
    for j in range(d):
        zn1 += abs(z[j])
    for r in range(m):
        s = cs[r]
        for j in range(d):
            s -= P[r, j] * z[j]
        grad[r] = s
        big = abs(s) > rtol * (abs(cs[r]) + pn[r] * zn1)
        trial = a[r] - gam[r] * s if big else a[r]
        if fixed[r]:
            new[r] = -1
        elif state[r] == 0 and big:
            new[r] = -1 if s > 0 else 1
        else:
            new[r] = -1 if trial <= lo[r] else (1 if trial >= hi[r] else 0)
        if (new[r] < 0 and lo[r] == -np.inf) or (new[r] > 0 and hi[r] == np.inf):
            new[r] = 0  # never held at an infinite bound (the composite prox's box rows)
    if it >= 6:  # one row changes: the one whose trial point violates its bounds most
        best, jbest = -1.0, -1
        for r in range(m):
            if new[r] != state[r]:
                trial = a[r] - gam[r] * grad[r]
                v = abs(trial - min(max(trial, lo[r]), hi[r])) + 1e-300
                if state[r] == 0:
                    v += gam[r] * abs(grad[r])
                if v > best:
                    best, jbest = v, r
        for r in range(m):
            if r != jbest:
                new[r] = state[r]
    changed = False
    for r in range(m):
        changed = changed or new[r] != state[r]
        state[r] = new[r]
    return changed


def _pinv_jacobi(B, V, out):  # unannotated: compiled by numba
    """``out = pinv(B)`` (``(d, m)``) of ``B`` (``(m, d)``, overwritten) by one-sided Jacobi
    rotations of its columns (``B V = U S``, accurate to the relative rounding of each
    singular value, as an SVD), singular values at most ``1e-15`` times the largest counting
    as zero (``numpy.linalg.pinv``'s ``rcond``); ``V`` ``(d, d)`` is work space."""
    m, d = B.shape
    eps = 2.220446049250313e-16
    for p in range(d):
        for q in range(d):
            V[p, q] = 1.0 if p == q else 0.0
    for _ in range(60):
        rotated = False
        for p in range(d - 1):
            for q in range(p + 1, d):
                alpha, beta, gamma = 0.0, 0.0, 0.0
                for r in range(m):
                    alpha += B[r, p] * B[r, p]
                    beta += B[r, q] * B[r, q]
                    gamma += B[r, p] * B[r, q]
                if gamma == 0.0 or abs(gamma) <= eps * np.sqrt(alpha) * np.sqrt(beta):
                    continue
                rotated = True
                if abs(beta - alpha) > 1e150 * abs(gamma):
                    t = gamma / (beta - alpha)  # 1 / (2 zeta): zeta would overflow
                else:
                    zeta = (beta - alpha) / (2.0 * gamma)
                    t = 1.0 / (abs(zeta) + np.sqrt(1.0 + zeta * zeta))
                    if zeta < 0.0:
                        t = -t
                c = 1.0 / np.sqrt(1.0 + t * t)
                s = c * t
                for r in range(m):
                    bp, bq = B[r, p], B[r, q]
                    B[r, p] = c * bp - s * bq
                    B[r, q] = s * bp + c * bq
                for r in range(d):
                    vp, vq = V[r, p], V[r, q]
                    V[r, p] = c * vp - s * vq
                    V[r, q] = s * vp + c * vq
        if not rotated:
            break
    smax = 0.0
    for q in range(d):
        s2 = 0.0
        for r in range(m):
            s2 += B[r, q] * B[r, q]
        smax = max(smax, np.sqrt(s2))
    out[:, :] = 0.0
    for q in range(d):
        s2 = 0.0
        for r in range(m):
            s2 += B[r, q] * B[r, q]
        if s2 == 0.0 or np.sqrt(s2) <= 1e-15 * smax:
            continue
        for j in range(d):
            f = V[j, q] / s2
            for r in range(m):
                out[j, r] += f * B[r, q]


def _restart(P, cs, lo, hi, fixed, mu, g, rtol, gam, pn, B, V, a_prev, z, state, a, y, w
             ):  # unannotated: compiled by numba
    """One node's restart of :func:`box_dual_pass` (``boxqp._box_restart``): 500 steps of
    accelerated projected gradient (FISTA, step ``1 / lambda_max(Q)``, ``Q = P P^T / mu``) on
    the box QP from ``clip(a_prev)``, then ``z = (g - P^T a) / mu`` and the active set read
    off there (no free row forced to a bound); ``a_prev``, ``z`` and ``state`` are written,
    ``gam``/``pn`` are the rows' ``1/Q_rr`` and norms, the rest is work space."""
    m, d = P.shape
    for r in range(m):
        for j in range(d):
            B[r, j] = P[r, j]
    _pinv_jacobi(B, V, np.empty((d, m)))  # B's columns: P V = U S
    L = 0.0
    for q in range(d):
        s2 = 0.0
        for r in range(m):
            s2 += B[r, q] * B[r, q]
        L = max(L, s2)
    L = max(L / mu, 1e-300)
    for r in range(m):
        a[r] = min(max(a_prev[r], lo[r]), hi[r])
        y[r] = a[r]
    t = 1.0
    for _ in range(500):
        for j in range(d):
            s = 0.0
            for r in range(m):
                s += P[r, j] * y[r]
            w[j] = s / mu
        t_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
        f = (t - 1.0) / t_new
        for r in range(m):
            # (Q y - b)_r = P_r (P^T y - g) / mu + cs_r
            s = cs[r]
            for j in range(d):
                s += P[r, j] * (w[j] - g[j] / mu)
            an = min(max(y[r] - s / L, lo[r]), hi[r])
            y[r] = an + f * (an - a[r])
            a[r] = an
        t = t_new
    zn1 = 0.0
    for j in range(d):
        s = g[j]
        for r in range(m):
            s -= P[r, j] * a[r]
        z[j] = s / mu
        zn1 += abs(z[j])
    for r in range(m):
        a_prev[r] = a[r]
        s = cs[r]
        for j in range(d):
            s -= P[r, j] * z[j]
        if fixed[r]:
            state[r] = -1
            continue
        big = abs(s) > rtol * (abs(cs[r]) + pn[r] * zn1)
        trial = a[r] - gam[r] * s if big else a[r]
        state[r] = -1 if trial <= lo[r] else (1 if trial >= hi[r] else 0)


@functools.cache
def compiled_box_dual() -> Compiled:
    """numba's compiled :func:`box_dual_pass` (built on the first call, cached on disk; its
    helper :func:`_pinv_jacobi` registered as jit-callable); ``ImportError`` without numba."""
    _register_helpers()
    return Compiled(importlib.import_module("numba"), box_dual_pass)


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
        s = A[j, j]
        for q in range(j):
            s -= L[j, q] * L[j, q]
        L[j, j] = np.sqrt(s)
        for r in range(j + 1, d):
            s = A[r, j]
            for q in range(j):
                s -= L[r, q] * L[j, q]
            L[r, j] = s / L[j, j]
    for j in range(d):
        s = b[j]
        for q in range(j):
            s -= L[j, q] * x[q]
        x[j] = s / L[j, j]
    for j in range(d - 1, -1, -1):
        s = x[j]
        for q in range(j + 1, d):
            s -= L[q, j] * x[q]
        x[j] = s / L[j, j]


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
    work = np.empty((3, d))
    idx = np.empty(d, dtype=np.int64)
    free = np.empty(d, dtype=np.bool_)
    for i in range(k):
        ok[i] = False
        r0, r1, z = ends[i], ends[i + 1], Z[i]
        if predict:
            _predicted(z, Hk[i], mu[i] - mu0[i], g[i], g0[i], lo[i], hi[i], G, s, free, step,
                       L, A, work, idx)
        for _ in range(max_iter):
            _logistic_derivatives(X, y, c, r0, r1, mu[i], g[i], z, G, Hk[i], S)
            H = Hk[i]
            if _sign_pattern(z, G, S, eta[i], lo[i], hi[i], rtol, s, free):
                ok[i] = True
                break
            nf = _free_newton_step(H, G, s, eta[i], free, step, L, A, work, idx)
            if nf == 0:
                break
            if _full_step_sure(z, step, s, free, lo[i], hi[i], lip[i], mu[i]):
                for j in range(d):
                    z[j] += step[j]
            elif not _projected_search(X, y, c, r0, r1, mu[i], g[i], eta[i], lo[i], hi[i], z,
                                       step, s, free, zt, G):
                break


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


def _free_newton_step(H, G, s, eta, free, step, L, A, work, idx
                      ):  # unannotated: compiled by numba
    """The Newton step of ``f + eta s^T z`` on the ``free`` coordinates (``-H_FF^-1 (G + eta
    s)_F``, the free block gathered into ``A``, Cholesky in ``L``; 0 elsewhere) into
    ``step``; returns the number of free coordinates (``work``, ``idx``: work space)."""
    d = G.shape[0]
    nf = 0
    for j in range(d):
        if free[j]:
            idx[nf] = j
            nf += 1
    b, x = work[0, :nf], work[1, :nf]
    for a in range(nf):
        b[a] = -(G[idx[a]] + eta * s[idx[a]])
        for e in range(nf):
            A[a, e] = H[idx[a], idx[e]]
    if nf:
        _cholesky_solve(A[:nf, :nf], b, x, L[:nf, :nf])
    for j in range(d):
        step[j] = 0.0
    for a in range(nf):
        step[idx[a]] = x[a]
    return nf


def _predicted(z, H, dmu, g, g0, lo, hi, G, s, free, step, L, A, work, idx
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
    _free_newton_step(H, G, s, 0.0, free, step, L, A, work, idx)
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
    for helper in (_box_point, _box_next_set, _project_free, _ball_step, _expit,
                   _logistic_derivatives, _sign_pattern, _free_newton_step, _full_step_sure,
                   _predicted):
        extending.register_jitable(inline="always")(helper)
    # called from several places (inlined there, numba's SSA check warns at compile time) or
    # rarely (a changed active set, a restart: inlining them only costs compile time)
    for helper in (_logistic_value, _armijo, _projected_search, _norm1, _cholesky_solve,
                   _pinv_jacobi, _restart):
        extending.register_jitable(helper)
