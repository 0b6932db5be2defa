"""Compiled (numba) node loop of the composite prox's active-set steps where every data row
is quadratic (:func:`quad_rows_pass`): the steps of
:func:`~gtvmodel.kernels.composite.composite_active_set_prox` for rows with ``q_r > 0``
(squared and Huber rows), at most one unit row per coordinate (an ``l1`` row, or one box
row) and a Euclidean or a 1-norm ball, node by node in one pass (the numpy steps pay a fixed
cost per step for all the nodes still moving, and the ball's factorizations per step).

With the active sets fixed there is no linear data row, so ``z`` solves ``H z = f`` on the
coordinates no free unit row fixes, ``H = mu I + sum_{free r} P_r P_r^T / (c_r q_r)``
positive definite: one Cholesky factorization per step (``d x d``), the ball's multiplier by
Moré and Sorensen's Newton iteration on ``1 / ||z(nu)|| = 1 / rho`` with a factorization of
``H + nu I`` per iteration, the 1-norm ball's from the two solves ``z(nu1) = z_a + nu1
z_b`` as :func:`~gtvmodel.kernels.composite._solve_l1_ball` does.

Optional: numba is imported only by :func:`compiled_quad_rows` (``gtvmodel[fast]``); the
numpy steps stay the reference.
"""

from __future__ import annotations

import functools
import importlib

import numpy as np

from .._compiled import Compiled

__all__ = ["quad_rows_pass", "compiled_quad_rows"]


def quad_rows_pass(P, cs, cq, lo0, hi0, fixed, coord, l1row, gam, pn, mu, g, rtol, krtol,
                   state, a, Z, nu, nu1, lo, hi, radius, radius1, max_iter, done
                   ):  # unannotated: compiled by numba
    """Up to ``max_iter`` active-set steps of
    :func:`~gtvmodel.kernels.composite.composite_active_set_prox` on every node, in place.

    Rows: ``P`` ``(k, R, d)``, ``cs``, ``cq``, ``lo0``, ``hi0``, ``fixed`` ``(k, R)`` as there;
    ``coord`` ``(R,)`` the coordinate of a unit row (``-1``: a data row, which must have ``cq >
    0`` where not padding); at most one unit row per coordinate and node is not padding;
    ``l1row`` ``(R,)``: the unit rows whose intervals a 1-norm ball's multiplier ``nu1``
    widens; ``gam`` ``(k, R)``: ``1 / Q_rr = 1 / (||P_r||^2 / mu + c_r q_r)``, ``pn``:
    ``||P_r||``.  Per step (:func:`_quad_point`): held rows' duals at their bounds, free data rows
    in ``H``, a free unit row fixes its coordinate to ``cs_r`` (exactly), ``z`` on the other
    coordinates by Cholesky; inside the Euclidean ball ``||z|| <= radius_i`` (``inf``: none)
    or the 1-norm ball ``||z||_1 <= radius1_i`` (``inf``: none; not both at a node); then
    every row's dual (:func:`_quad_duals`) and the next set by the primal-dual rule of
    :func:`~gtvmodel.kernels.composite._next_states` (from the 7th step on only the most
    violated row changes, :func:`_quad_next_set`).  A node stops when its set repeats;
    ``done[i]`` is then the KKT check of
    :func:`~gtvmodel.kernels.composite.kkt_certified` at ``krtol`` with the balls'
    conditions (:func:`_quad_kkt`, on the node's rows while they are in cache); False also
    after ``max_iter`` steps, or where the free rows fix ``z`` outside the 1-norm ball (the
    numpy steps' leaving multiplier): the caller's fallback.  ``state`` (int8), ``a`` ``(k,
    R)``, ``Z`` ``(k, d)``, ``nu``, ``nu1`` ``(k,)`` are read as the start (``nu``: the
    secular iteration's) and overwritten; ``lo``, ``hi`` receive the intervals widened by
    ``nu1``."""
    k, R, d = P.shape
    rw = np.empty((R, _P + d))  # the node's rows (_CS, _CQ, ..., P from _P on)
    w = np.empty((_J + d, d))  # the node's vectors (_F, _ZA, ...), a d x d work block
    H = np.empty((d, d))
    L = np.empty((d, d))
    new = np.empty(R, dtype=np.int8)
    for i in range(k):
        _load_node(P, cs, cq, lo0, hi0, fixed, coord, l1row, gam, pn, g, state, a, Z, rw, w, i)
        done[i], nui, nu1i = False, nu[i], 0.0
        for it in range(max_iter):
            ok, nui, nu1i = _quad_point(rw, w, H, L, mu[i], nui, radius[i], radius1[i])
            if not ok:
                break
            _quad_duals(rw, w, mu[i] + nui, nu1i)
            if not _quad_next_set(rw, w, rtol, it, new):
                done[i] = _quad_kkt(rw, w, mu[i] + nui, krtol) and _ball_kkt(
                    w, nui, radius[i], nu1i, radius1[i], krtol)
                break
        nu[i], nu1[i] = nui, nu1i
        for r in range(R):
            state[i, r], a[i, r], lo[i, r], hi[i, r] = rw[r, _ST], rw[r, _A], rw[r, _LO], \
                rw[r, _HI]
        for j in range(d):
            Z[i, j] = w[_Z, j]


#: Columns of a node's rows in :func:`quad_rows_pass` (``_P`` on: ``P_r``) and its vectors
#: (the right side ``f``, ``z_a``, ``z_b``, the held ``l1`` rows' signs, the fixed
#: coordinates' values and mask (1.0: fixed), a solve's scratch, ``z``, ``g``, the
#: eigenbasis' coefficients and eigenvalues, then a ``d x d`` block from ``_J``).
_CS, _CQ, _LO0, _HI0, _FIXED, _COORD, _L1, _GAM, _PN, _ST, _A, _LO, _HI, _P = range(14)
_F, _ZA, _ZB, _SIG, _ZF, _FX, _T, _Z, _G, _C, _LAM, _J = range(12)


def _load_node(P, cs, cq, lo0, hi0, fixed, coord, l1row, gam, pn, g, state, a, Z, rw, w, i
               ):  # unannotated: compiled by numba
    """Node ``i``'s rows and vectors copied into ``rw`` and ``w`` (the steps' helpers then
    take two small arrays, not a dozen: passing each array costs more than their work)."""
    R, d = P.shape[1], P.shape[2]
    for r in range(R):
        for j in range(d):
            rw[r, _P + j] = P[i, r, j]
        rw[r, _CS], rw[r, _CQ], rw[r, _LO0], rw[r, _HI0] = cs[i, r], cq[i, r], lo0[i, r], \
            hi0[i, r]
        rw[r, _FIXED] = 1.0 if fixed[i, r] else 0.0
        rw[r, _COORD], rw[r, _L1] = coord[r], 1.0 if l1row[r] else 0.0
        rw[r, _PN], rw[r, _GAM] = pn[i, r], gam[i, r]
        rw[r, _ST], rw[r, _A], rw[r, _LO], rw[r, _HI] = state[i, r], a[i, r], lo0[i, r], \
            hi0[i, r]
    for j in range(d):
        w[_Z, j], w[_G, j] = Z[i, j], g[i, j]


def _quad_point(rw, w, H, L, mu, nu, radius, radius1):  # unannotated: compiled by numba
    """The node's point ``w[_Z]`` for its active set (:func:`quad_rows_pass`; ``nu``: the
    last Euclidean multiplier); returns ``(ok, nu, nu1)``, the balls' multipliers, ``ok``
    False where the free unit rows fix ``z`` outside the 1-norm ball (no ``nu1`` moves ``z``
    there)."""
    R, d = rw.shape[0], H.shape[0]
    for j in range(d):
        w[_F, j], w[_SIG, j], w[_ZF, j], w[_FX, j] = w[_G, j], 0.0, 0.0, 0.0
        for q in range(d):
            H[j, q] = mu if j == q else 0.0
    for r in range(R):
        s = rw[r, _ST]
        if rw[r, _FIXED] > 0:
            continue
        if rw[r, _COORD] >= 0:
            j = int(rw[r, _COORD])
            if s == 0:
                w[_FX, j], w[_ZF, j] = 1.0, rw[r, _CS]
            else:
                w[_F, j] -= rw[r, _LO0] if s < 0 else rw[r, _HI0]
                if rw[r, _L1] > 0:
                    w[_SIG, j] = s
        elif s == 0:
            wr = 1.0 / rw[r, _CQ]
            for j in range(d):
                w[_F, j] += rw[r, _P + j] * rw[r, _CS] * wr
                for q in range(d):
                    H[j, q] += rw[r, _P + j] * rw[r, _P + q] * wr
        else:
            b = rw[r, _LO0] if s < 0 else rw[r, _HI0]
            for j in range(d):
                w[_F, j] -= rw[r, _P + j] * b
    _fix_coordinates(H, w)
    if radius < np.inf:
        return True, _quad_ball(H, L, w, radius, nu, mu), 0.0
    _chol(H, L, 0.0, w)
    _chol_solve(L, w, _F, _ZA)
    for j in range(d):
        w[_Z, j] = w[_ZA, j]
    if radius1 < np.inf:
        ok, nu1 = _quad_l1_ball(L, w, radius1, mu)
        return ok, 0.0, nu1
    return True, 0.0, 0.0


def _fix_coordinates(H, w):  # unannotated: compiled by numba
    """The coordinates fixed by free unit rows (``w[_FX]``) out of ``H z = f``: their columns
    moved to the right side, their rows and columns of ``H`` the identity, ``f`` there their
    values (so the solve returns them exactly), no ``l1`` sign there."""
    d = H.shape[0]
    for j in range(d):
        if w[_FX, j] > 0:
            for q in range(d):
                if w[_FX, q] == 0:
                    w[_F, q] -= H[q, j] * w[_ZF, j]
    for j in range(d):
        for q in range(d):
            if w[_FX, j] > 0 or w[_FX, q] > 0:
                H[j, q] = 1.0 if j == q else 0.0
        if w[_FX, j] > 0:
            w[_F, j], w[_SIG, j] = w[_ZF, j], 0.0


def _quad_l1_ball(L, w, radius1, mu):  # unannotated: compiled by numba
    """The 1-norm ball's step of :func:`_quad_point` (``L``: the Cholesky factor of ``H``,
    ``w[_Z] = z_a`` written): the held ``l1`` rows' duals are ``+-(eta + nu1)``, so ``z(nu1)
    = z_a + nu1 z_b`` with ``H z_b = -sig`` and ``||z||_1 = sig^T z``; ``nu1 = (r - sig^T
    z_a) / sig^T z_b`` where ``z_a`` is outside; returns ``(ok, nu1)``, ``ok`` False where
    ``sig^T z_b`` does not move ``z`` (``>= -1e-12 ||sig||_1 / mu``:
    :func:`~gtvmodel.kernels.composite._l1_ball_factors`)."""
    d = L.shape[0]
    na, nb, n1 = 0.0, 0.0, 0.0
    for j in range(d):
        w[_T, j] = -w[_SIG, j]
        n1 += abs(w[_SIG, j])
        na += w[_SIG, j] * w[_ZA, j]
    if na <= radius1:
        return True, 0.0
    _chol_solve(L, w, _T, _ZB)
    for j in range(d):
        nb += w[_SIG, j] * w[_ZB, j]
    if not nb < -1e-12 * n1 / mu:
        return False, 0.0
    t = max((radius1 - na) / nb, 0.0)
    for j in range(d):
        w[_Z, j] = w[_ZA, j] + t * w[_ZB, j]
    return True, t


def _quad_ball(H, L, w, radius, nu0, mu):  # unannotated: compiled by numba
    """The Euclidean ball's step of :func:`_quad_point`, returns ``nu``: ``z = zf`` on the
    fixed coordinates, ``y = (H + nu I)^{-1} f`` on the others, in the eigenbasis ``H = V
    diag(lam) V^T`` (:func:`_jacobi_eig`, into ``L``: ``||y(nu)||^2 = sum_i c_i^2 / (lam_i +
    nu)^2``, ``c = V^T f``), with ``nu = 0`` where ``||y(0)|| <= rho = sqrt(r^2 -
    ||zf||^2)``, else Moré and Sorensen's Newton iteration on ``1 / ||y(nu)|| = 1 / rho``
    (concave and increasing: from any start one step lands at or below the root, then it
    increases to it; ``nu = 0`` where it is clipped there and ``y(0)`` is inside), started
    from the last multiplier ``nu0``; then ``y`` with one step of iterative refinement (the
    residual with ``H`` itself) and scaled to ``||y|| = rho`` where the ball binds."""
    d = H.shape[0]
    z0 = 0.0
    for j in range(d):
        z0 += w[_ZF, j] * w[_ZF, j]
        w[_T, j] = w[_F, j] if w[_FX, j] == 0 else 0.0
    rho = np.sqrt(max(radius * radius - z0, (1e-8 * radius) ** 2))
    _jacobi_eig(H, L, w)
    _eig_coefficients(L, w, _T, _C)
    nu = max(nu0, 0.0)
    for _ in range(60):
        n2, n3 = 0.0, 0.0
        for j in range(d):
            t = 1.0 / (w[_LAM, j] + nu)
            n2 += w[_C, j] * w[_C, j] * t * t
            n3 += w[_C, j] * w[_C, j] * t * t * t
        ny = np.sqrt(n2)
        if nu == 0.0 and ny <= rho:  # inside: nu = 0
            break
        step = max(nu + n2 / n3 * (ny - rho) / rho, 0.0) if ny > 0 else 0.0
        if abs(step - nu) <= 4 * 2.220446049250313e-16 * (mu + nu + step):
            break
        nu = step
    _eig_solve(H, L, w, nu)
    if nu > 0.0:
        ny = 0.0
        for j in range(d):
            ny += w[_ZA, j] * w[_ZA, j]
        for j in range(d):  # ||y|| = rho to rounding
            w[_ZA, j] *= rho / max(np.sqrt(ny), 1e-300)
    for j in range(d):
        w[_Z, j] = w[_ZF, j] if w[_FX, j] > 0 else w[_ZA, j]
    return nu


def _eig_coefficients(V, w, src, dst):  # unannotated: compiled by numba
    """``w[dst] = V^T w[src]``."""
    d = V.shape[0]
    for i in range(d):
        s = 0.0
        for j in range(d):
            s += V[j, i] * w[src, j]
        w[dst, i] = s


def _eig_solve(H, V, w, nu):  # unannotated: compiled by numba
    """``w[_ZA] = (H + nu I_free)^{-1} w[_T]`` in the eigenbasis (``V``, ``w[_LAM]``; the
    coefficients ``w[_C]``), with one step of iterative refinement (residual with ``H``)."""
    d = H.shape[0]
    for j in range(d):
        w[_ZA, j] = 0.0
    for step in range(2):
        if step:  # the residual's coefficients
            for j in range(d):
                s = w[_T, j] - (nu if w[_FX, j] == 0 else 0.0) * w[_ZA, j]
                for q in range(d):
                    s -= H[j, q] * w[_ZA, q]
                w[_ZB, j] = s
            _eig_coefficients(V, w, _ZB, _C)
        for j in range(d):
            s = 0.0
            for i in range(d):
                s += V[j, i] * w[_C, i] / (w[_LAM, i] + nu)
            w[_ZA, j] += s


def _jacobi_eig(H, V, w):  # unannotated: compiled by numba
    """``H = V diag(w[_LAM]) V^T`` by cyclic Jacobi rotations (``H`` symmetric, ``d x d``,
    copied into ``w``'s rows ``_J`` on; sweeps until the off-diagonal part is below ``1e-32``
    of the squared diagonal, 30 at most; ``d = 2``: one rotation)."""
    d = H.shape[0]
    for j in range(d):
        for q in range(d):
            w[_J + j, q] = H[j, q]
            V[j, q] = 1.0 if j == q else 0.0
    for _ in range(30):
        off, diag = 0.0, 0.0
        for j in range(d):
            diag += w[_J + j, j] * w[_J + j, j]
            for q in range(j + 1, d):
                off += w[_J + j, q] * w[_J + j, q]
        if off <= 1e-32 * diag:
            break
        for p in range(d):
            for q in range(p + 1, d):
                _rotate(w, V, p, q)
    for j in range(d):
        w[_LAM, j] = w[_J + j, j]


def _rotate(w, V, p, q):  # unannotated: compiled by numba
    """One Jacobi rotation of :func:`_jacobi_eig` zeroing the entry ``(p, q)``."""
    d = V.shape[0]
    apq = w[_J + p, q]
    if apq == 0.0:
        return
    theta = (w[_J + q, q] - w[_J + p, p]) / (2.0 * apq)
    t = (1.0 if theta >= 0 else -1.0) / (abs(theta) + np.sqrt(theta * theta + 1.0))
    c = 1.0 / np.sqrt(t * t + 1.0)
    s = t * c
    for r in range(d):  # A <- A J (columns p, q)
        arp, arq = w[_J + r, p], w[_J + r, q]
        w[_J + r, p], w[_J + r, q] = c * arp - s * arq, s * arp + c * arq
    for r in range(d):  # A <- J^T A (rows p, q)
        apr, aqr = w[_J + p, r], w[_J + q, r]
        w[_J + p, r], w[_J + q, r] = c * apr - s * aqr, s * apr + c * aqr
    w[_J + p, q], w[_J + q, p] = 0.0, 0.0
    for r in range(d):
        vrp, vrq = V[r, p], V[r, q]
        V[r, p], V[r, q] = c * vrp - s * vrq, s * vrp + c * vrq


def _chol(A, L, shift, w):  # unannotated: compiled by numba
    """``L L^T = A + shift I_free`` (Cholesky; ``shift`` where ``w[_FX]`` is 0)."""
    d = A.shape[0]
    for j in range(d):
        s = A[j, j] + (shift if w[_FX, j] == 0 else 0.0)
        for q in range(j):
            s -= L[j, q] * L[j, q]
        L[j, j] = np.sqrt(s)
        for r in range(j + 1, d):
            s = A[r, j]
            for q in range(j):
                s -= L[r, q] * L[j, q]
            L[r, j] = s / L[j, j]


def _chol_solve(L, w, b, x):  # unannotated: compiled by numba
    """``w[x] = (L L^T)^{-1} w[b]`` (rows of ``w``; ``x`` may be ``b``)."""
    d = L.shape[0]
    for j in range(d):
        s = w[b, j]
        for q in range(j):
            s -= L[j, q] * w[x, q]
        w[x, j] = s / L[j, j]
    for j in range(d - 1, -1, -1):
        s = w[x, j]
        for q in range(j + 1, d):
            s -= L[q, j] * w[x, q]
        w[x, j] = s / L[j, j]


def _quad_duals(rw, w, mun, nu1):  # unannotated: compiled by numba
    """Every row's dual at ``z`` (:func:`quad_rows_pass`; ``mun = mu + nu``): held rows their
    bound (``l1`` rows widened by ``nu1``, written into the columns ``_LO``, ``_HI``), free
    data rows ``(P_r^T z - c_r s_r) / (c_r q_r)``, a free unit row the stationarity residual
    ``g_j - mun z_j - sum_{other rows} P_rj a_r`` at its coordinate; padding 0."""
    R, d = rw.shape[0], w.shape[1]
    for r in range(R):
        wid = nu1 if rw[r, _L1] > 0 and rw[r, _COORD] >= 0 else 0.0
        rw[r, _LO], rw[r, _HI] = rw[r, _LO0] - wid, rw[r, _HI0] + wid
        s = rw[r, _ST]
        if rw[r, _FIXED] > 0:
            rw[r, _A] = 0.0
        elif s != 0:
            rw[r, _A] = rw[r, _LO] if s < 0 else rw[r, _HI]
        elif rw[r, _COORD] < 0:
            pz = 0.0
            for j in range(d):
                pz += rw[r, _P + j] * w[_Z, j]
            rw[r, _A] = (pz - rw[r, _CS]) / rw[r, _CQ]
    for r in range(R):
        if rw[r, _COORD] >= 0 and rw[r, _ST] == 0 and rw[r, _FIXED] == 0:
            j = int(rw[r, _COORD])
            s = w[_G, j] - mun * w[_Z, j]
            for q in range(R):
                if q != r and rw[q, _FIXED] == 0:
                    s -= rw[q, _P + j] * rw[q, _A]
            rw[r, _A] = s


def _quad_next_set(rw, w, rtol, it, new):  # unannotated: compiled by numba
    """The node's next active set (:func:`~gtvmodel.kernels.composite._next_states`: a
    gradient ``grad_r = c_r s_r + c_r q_r a_r - P_r^T z`` within ``rtol (|c s| + |c q a| +
    ||P_r|| ||z||_1)`` counts as zero; never held at an infinite bound of ``lo0``, ``hi0``;
    from step 7 on only the most violated row changes), written into the column ``_ST``;
    returns whether it changed."""
    R, d = rw.shape[0], w.shape[1]
    zn1 = 0.0
    for j in range(d):
        zn1 += abs(w[_Z, j])
    best, jbest = -1.0, -1
    for r in range(R):
        a, gam, st = rw[r, _A], rw[r, _GAM], rw[r, _ST]
        s = rw[r, _CS] + rw[r, _CQ] * a
        for j in range(d):
            s -= rw[r, _P + j] * w[_Z, j]
        big = abs(s) > rtol * (abs(rw[r, _CS]) + rw[r, _CQ] * abs(a) + rw[r, _PN] * zn1)
        trial = a - gam * s if big else a
        if rw[r, _FIXED] > 0:
            new[r] = -1
        elif st == 0 and big:
            new[r] = -1 if s > 0 else 1
        else:
            new[r] = -1 if trial <= rw[r, _LO] else (1 if trial >= rw[r, _HI] else 0)
        if (new[r] < 0 and rw[r, _LO0] == -np.inf) or (new[r] > 0 and rw[r, _HI0] == np.inf):
            new[r] = 0
        if new[r] != st:  # the anti-cycling rule's violation
            trial = a - gam * s
            v = abs(trial - min(max(trial, rw[r, _LO]), rw[r, _HI])) + 1e-300
            if st == 0:
                v += gam * abs(s)
            if v > best:
                best, jbest = v, r
    changed = False
    for r in range(R):
        if it >= 6 and r != jbest:
            new[r] = rw[r, _ST]
        changed = changed or new[r] != rw[r, _ST]
        rw[r, _ST] = new[r]
    return changed


def _quad_kkt(rw, w, mun, rtol):  # unannotated: compiled by numba
    """The conditions of :func:`~gtvmodel.kernels.nodeqp.kkt_pass` (those of
    :func:`~gtvmodel.kernels.composite.kkt_certified` without balls; ``mun = mu + nu``) on
    the node's rows ``rw`` (effective intervals ``_LO``, ``_HI``) and point ``w[_Z]``:
    stationarity ``|mun z - g + P^T a| <= rtol (|mun z| + |g| + |P|^T |a|)`` per coordinate,
    every dual in its interval with ``grad_r = c_r s_r + c_r q_r a_r - P_r^T z`` at most
    ``tol_r`` where ``a_r > lo_r`` and at least ``-tol_r`` where ``a_r < hi_r``, ``tol_r =
    rtol (|c s| + c q |a| + |P_r|^T |z|) + |P_r|^T |stat| / mun``; all finite."""
    R, d = rw.shape[0], w.shape[1]
    good = True
    for j in range(d):  # stat -> _T, its scale -> _ZB
        w[_T, j] = mun * w[_Z, j] - w[_G, j]
        w[_ZB, j] = abs(mun * w[_Z, j]) + abs(w[_G, j])
        good = good and np.isfinite(w[_Z, j])
    for r in range(R):
        ar = 0.0 if rw[r, _FIXED] > 0 else rw[r, _A]
        good = good and np.isfinite(ar)
        for j in range(d):
            w[_T, j] += rw[r, _P + j] * ar
            w[_ZB, j] += abs(rw[r, _P + j]) * abs(ar)
    for j in range(d):
        good = good and abs(w[_T, j]) <= rtol * w[_ZB, j]
    for r in range(R):
        if not good:
            break
        if rw[r, _FIXED] > 0:
            continue
        ar, lo, hi = rw[r, _A], rw[r, _LO], rw[r, _HI]
        pz, zs, shift = 0.0, 0.0, 0.0
        for j in range(d):
            pz += rw[r, _P + j] * w[_Z, j]
            zs += abs(rw[r, _P + j]) * abs(w[_Z, j])
            shift += abs(rw[r, _P + j]) * (abs(w[_T, j]) / mun)
        grad = rw[r, _CS] + rw[r, _CQ] * ar - pz
        tol = rtol * (abs(rw[r, _CS]) + rw[r, _CQ] * abs(ar) + zs) + shift
        good = (ar >= lo and ar <= hi and (ar <= lo or grad <= tol)
                and (ar >= hi or grad >= -tol))
    return good


def _ball_kkt(w, nu, radius, nu1, radius1, rtol):  # unannotated: compiled by numba
    """The balls' conditions of :func:`~gtvmodel.kernels.composite._certified`: ``||z|| <= r
    (1 + rtol)``, ``>= r (1 - rtol)`` where ``nu > 0``, ``nu >= 0``; ``||z||_1 <= r1 (1 +
    rtol)``, ``>= r1 (1 - rtol)`` where ``nu1 > 0`` (``inf`` radii: no ball)."""
    d = w.shape[1]
    n2, n1 = 0.0, 0.0
    for j in range(d):
        n2 += w[_Z, j] * w[_Z, j]
        n1 += abs(w[_Z, j])
    nz = np.sqrt(n2)
    ok = nu >= 0 and (radius == np.inf or (nz <= radius * (1 + rtol)
                                           and (nu <= 0 or nz >= radius * (1 - rtol))))
    return ok and (radius1 == np.inf or (n1 <= radius1 * (1 + rtol)
                                         and (nu1 == 0 or n1 >= radius1 * (1 - rtol))))


@functools.cache
def compiled_quad_rows() -> Compiled:
    """numba's compiled :func:`quad_rows_pass` (built on the first call, cached on disk; its
    helpers registered as jit-callable, not inlined: they index the full arrays, so a call
    costs no per-node views, and inlining them took 60 s of compile time for no measured
    gain); ``ImportError`` without numba."""
    extending = importlib.import_module("numba.extending")
    for helper in (_load_node, _quad_point, _fix_coordinates, _quad_kkt, _ball_kkt,
                   _quad_duals, _quad_next_set, _chol, _chol_solve, _quad_ball,
                   _quad_l1_ball, _eig_coefficients, _eig_solve, _jacobi_eig, _rotate):
        extending.register_jitable(helper)
    return Compiled(importlib.import_module("numba"), quad_rows_pass)
