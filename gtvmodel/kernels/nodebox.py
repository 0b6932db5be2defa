"""Compiled (numba) node loop of the dual active-set steps of hinge and absolute losses
(:func:`box_dual_pass`): every node's whole active-set iteration of
:func:`~gtvmodel.kernels.boxqp.dual_active_set_prox`, and of
:func:`~gtvmodel.kernels.composite.composite_active_set_prox` where every row has ``q = 0``
(``l1`` and box rows as linear rows, a Euclidean ball in closed form), in one pass over the
nodes (the numpy versions pay a fixed cost per step for all the nodes still moving).

Optional: numba is imported only by :func:`compiled_box_dual` (``gtvmodel[fast]``); the
callers keep their numpy paths, which stay the reference.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np

from .._compiled import Compiled

__all__ = ["box_dual_pass", "compiled_box_dual"]


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
    helpers registered as jit-callable, :func:`_register_helpers`); ``ImportError`` without
    numba."""
    _register_helpers()
    return Compiled(importlib.import_module("numba"), box_dual_pass)


@functools.cache
def _register_helpers() -> None:
    """The loop's helpers made callable from numba's compiled code, once (those called per
    node and step inlined: a call passing a dozen arrays costs more than their work; the
    pseudo-inverse and the restart, called where a set changes or a node cycles, not);
    ``ImportError`` without numba."""
    extending = importlib.import_module("numba.extending")
    for helper in (_box_point, _box_next_set, _project_free, _ball_step):
        extending.register_jitable(inline="always")(helper)
    for helper in (_pinv_jacobi, _restart):
        extending.register_jitable(helper)
